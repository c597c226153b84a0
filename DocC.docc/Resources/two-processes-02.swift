import TypedNotifications

/// Posted when someone joins. Both processes compile this same type, so both
/// agree on its name and its payload.
struct UserJoined: TypedNotification, Codable {
    static let name: NotificationName = "com.example.presence.joined"
    var user: String
}

// A Unix datagram socket per process in a private directory (0700) under
// $XDG_RUNTIME_DIR; no daemon. Every process that opens one can be reached.
let transport = try SocketTransport()
let center = try NotificationHub(endpoint: "presence", transport: transport)
