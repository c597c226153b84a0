import Foundation
import TypedNotifications

/// The score changed. The app posts it; the widget extension shows it. In an
/// Xcode project this file belongs to a framework both targets link.
struct ScoreChanged: TypedNotification, Codable {
    static let name: NotificationName = "com.example.scores.changed"
    var home: Int
    var away: Int
}

/// The directory the app and its extensions share.
func sharedDirectory() -> String {
    #if canImport(Darwin)
        // On Apple platforms: the app group container both targets are entitled to.
        if let container = FileManager.default.containerURL(
            forSecurityApplicationGroupIdentifier: "group.com.example.scores")
        {
            return container.appendingPathComponent("notifications").path
        }
    #endif
    // Here, on Linux, any private directory stands in for the container.
    return FileSignalTransport.defaultDirectory + "-scores"
}
