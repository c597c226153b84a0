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

/// The app: every post is appended to the name's log, so two quick posts are
/// both kept, in order, even when no extension is running.
func runApp(home: Int, away: Int) throws(TypedNotificationError) {
    let center = try NotificationHub(endpoint: "app", transport: FileSignalTransport(directory: sharedDirectory()))
    defer { center.close() }
    try center.post(ScoreChanged(home: home, away: away))
}

/// The extension: shows the newest score at once, without observing.
func showLatest() throws(TypedNotificationError) {
    let center = try NotificationHub(endpoint: "widget", transport: FileSignalTransport(directory: sharedDirectory()))
    defer { center.close() }
    if let latest = try center.latest(.of(ScoreChanged.self)) {
        print("now \(latest.notification.home)–\(latest.notification.away), posted \(latest.delivery.timestamp.date)")
    } else {
        print("no score yet")
    }
}
