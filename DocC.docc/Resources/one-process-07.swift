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

// A view model or service observes on itself and keeps its own token. The
// center holds the actor weakly, so this is no retain cycle: when the last
// reference from outside goes, the actor is released and its observation
// ends with it. The handler uses its isolated parameter, never `self`.
actor DownloadsModel {
    private var token: ObservationToken?
    private(set) var totalBytes = 0

    func start(on center: NotificationHub<InProcessTransport>) throws {
        token = try center.addObserver(.of(DownloadFinished.self), on: self) { model, download, _ in
            model.totalBytes += download.bytes
        }
    }
}

var model: DownloadsModel? = DownloadsModel()
try await model?.start(on: center)
try center.post(DownloadFinished(url: "https://example.com/big", bytes: 1 << 20))
model = nil  // released: its observation ends, nothing keeps it alive

// From synchronous code, or without waiting: once cancel() returns, no run of
// the handler begins, and one in flight on another thread has finished.
token.cancel()
