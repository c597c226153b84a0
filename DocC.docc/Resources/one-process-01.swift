import TypedNotifications

/// Posted when a download finishes. The type is the contract: its name says
/// where it travels, its properties are the payload.
struct DownloadFinished: TypedNotification, Codable {
    static let name: NotificationName = "com.example.download.finished"
    var url: String
    var bytes: Int
}
