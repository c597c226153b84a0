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

/// The extension, following along. With the identity "widget" the transport
/// keeps a durable cursor: after a suspension or a restart, the extension
/// resumes exactly after the last score it was given, so every score posted
/// while it was not running arrives, in order.
func followScores(limit: Int) async throws(TypedNotificationError) {
    let transport = try FileSignalTransport(directory: sharedDirectory(), identity: "widget")
    let center = try NotificationHub(endpoint: "widget", transport: transport)
    var shown = 0
    for await delivered in try center.deliveries(.of(ScoreChanged.self)) {
        let score = delivered.notification
        print("score \(score.home)–\(score.away) (#\(delivered.delivery.sequence) from \(delivered.delivery.sender))")
        shown += 1
        if shown == limit { break }
    }
    // The cursor is saved once the close is done: wait for it before exiting.
    center.close()
    await center.closed()
}

// Scores post HOME AWAY    the app posts a score
// Scores latest            the widget shows the newest score
// Scores follow [COUNT]    the widget follows scores, resuming where it stopped
do throws(TypedNotificationError) {
    let arguments = Array(CommandLine.arguments.dropFirst())
    switch arguments.first {
    case "post" where arguments.count == 3:
        try runApp(home: Int(arguments[1]) ?? 0, away: Int(arguments[2]) ?? 0)
    case "latest":
        try showLatest()
    case "follow":
        try await followScores(limit: arguments.count > 1 ? Int(arguments[1]) ?? 1 : .max)
    default:
        print("usage: Scores post HOME AWAY | Scores latest | Scores follow [COUNT]")
    }
} catch {
    print("Scores: \(error.code): \(error.message)")
    exit(1)
}
