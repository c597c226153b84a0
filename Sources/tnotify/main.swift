import Foundation
import TypedNotifications

// `tnotify demo`: two tasks in one process, one posting typed notifications
// and one observing them with `for await`, over the in-process transport.
// The cross-process commands (post, watch, latest, ls, gc) arrive with the
// socket and file-plus-signal transports.

/// A typed notification the demo's "extension" task posts.
struct UploadProgress: TypedNotification, Codable {
    static let name: NotificationName = "com.example.upload.progress"
    var fileName: String
    var percent: Int
}

/// Sent once the upload is complete.
struct UploadFinished: TypedNotification, Codable {
    static let name: NotificationName = "com.example.upload.finished"
    var fileName: String
    var bytes: Int
}

let usage = """
    usage: tnotify demo

    Commands:
      demo    One task posts typed notifications, another observes them with
              `for await`, over the in-process transport.
    """

func runDemo() async throws {
    let bus = InProcessBus()
    let app = try NotificationHub(endpoint: "app", transport: InProcessTransport(bus: bus))
    let uploader = try NotificationHub(endpoint: "uploader", transport: InProcessTransport(bus: bus))

    // Registered before anything is posted: nothing can be missed.
    let progress = try app.deliveries(of: UploadProgress.self)
    let finished = try app.notifications(of: UploadFinished.self)

    print("app: observing \(UploadProgress.name) and \(UploadFinished.name)")

    let observer = Task {
        for await delivered in progress {
            let note = delivered.notification
            let meta = delivered.delivery
            print("app: #\(meta.sequence) from \(meta.sender): \(note.fileName) \(note.percent)%")
            if note.percent == 100 { break }
        }
        for await done in finished {
            print("app: \(done.fileName) finished, \(done.bytes) bytes")
            break
        }
    }

    for percent in stride(from: 0, through: 100, by: 25) {
        try uploader.post(UploadProgress(fileName: "clip.mov", percent: percent))
    }
    try uploader.post(UploadFinished(fileName: "clip.mov", bytes: 18_874_368))
    await observer.value
    print("demo: every notification arrived, in order")
}

let arguments = CommandLine.arguments.dropFirst()
switch arguments.first {
case "demo":
    do {
        try await runDemo()
    } catch {
        FileHandle.standardError.write(Data("tnotify: \(error)\n".utf8))
        exit(70)
    }
case "-h", "--help", "help":
    print(usage)
default:
    FileHandle.standardError.write(Data("\(usage)\n".utf8))
    exit(64)
}
