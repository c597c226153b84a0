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

// A handler runs on the center's serial executor, one notification at a time.
let token = try center.addObserver(.of(DownloadFinished.self)) { download, delivery in
    print("handler: \(download.url), #\(delivery.sequence) from \(delivery.sender)")
}

// A slow observer keeps at most 2 notifications waiting; what its buffer
// drops is counted and reported with the next delivery, never lost silently.
let deliveries = try center.deliveries(.of(DownloadFinished.self), bufferingPolicy: .bufferingNewest(2))

// Posting checks the type at compile time: there is no dictionary to misspell.
for index in 0..<10 {
    try center.post(DownloadFinished(url: "https://example.com/\(index)", bytes: index))
}
try center.post(DownloadFinished(url: "https://example.com/last", bytes: 2048))
await listener.value

for await delivered in deliveries {
    if delivered.delivery.missed > 0 {
        print("missed \(delivered.delivery.missed) before \(delivered.notification.url)")
    }
    if delivered.notification.url.hasSuffix("/last") { break }
}

// Once cancel returns, the handler is not running and never runs again.
await token.cancelAndWait()
