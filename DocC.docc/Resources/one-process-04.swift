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

// The observer is registered when this line returns, before any task runs:
// nothing posted after it is missed.
let finished = try center.notifications(.of(DownloadFinished.self))
let listener = Task {
    for await download in finished {
        print("finished \(download.url): \(download.bytes) bytes")
        if download.url.hasSuffix("/last") { break }
    }
}

// Posting checks the type at compile time: there is no dictionary to misspell.
try center.post(DownloadFinished(url: "https://example.com/a", bytes: 1024))
try center.post(DownloadFinished(url: "https://example.com/last", bytes: 2048))
await listener.value
