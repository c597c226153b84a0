import TypedNotifications

/// Posted when someone joins. Both processes compile this same type, so both
/// agree on its name and its payload.
struct UserJoined: TypedNotification, Codable {
    static let name: NotificationName = "com.example.presence.joined"
    var user: String
}
