import Foundation
import TypedNotifications

/// The score changed. The app posts it; the widget extension shows it. In an
/// Xcode project this file belongs to a framework both targets link.
struct ScoreChanged: TypedNotification, Codable {
    static let name: NotificationName = "com.example.scores.changed"
    var home: Int
    var away: Int
}
