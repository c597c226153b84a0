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

let arguments = CommandLine.arguments.dropFirst()
switch arguments.first {
case "watch":
    // Only other processes' posts; the kernel vouches for each sender's uid.
    let joins = try center.deliveries(.of(UserJoined.self), from: .others)
    print("watching; run `swift run Presence announce NAME` in another terminal")
    for await joined in joins {
        let delivery = joined.delivery
        print("\(joined.notification.user) joined (from \(delivery.sender), #\(delivery.sequence))")
    }
case "announce":
    for user in arguments.dropFirst() {
        try center.post(UserJoined(user: user))
    }
    // Nothing is lost if this process exits now: what a busy observer
    // could not take waits in its spool. flush says whether every
    // observer has read everything, here within 2 s.
    if !transport.flush(timeout: .seconds(2)) {
        print("not yet read by: \(transport.endpointsWithUnreadPosts)")
    }
default:
    print("usage: Presence watch | Presence announce NAME…")
}
