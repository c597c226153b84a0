import TypedNotifications

/// Posted when a download finishes. The type is the contract: its name says
/// where it travels, its properties are the payload.
struct DownloadFinished: TypedNotification, Codable {
    static let name: NotificationName = "com.example.download.finished"
    var url: String
    var bytes: Int
}

// One center per process is typical; the in-process transport hands values
// over as they are, without encoding them.
let center = try NotificationHub(endpoint: "downloads", transport: InProcessTransport())
