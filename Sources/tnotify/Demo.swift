import Foundation
@_spi(TransportAuthoring) import TypedNotifications
import TypedNotificationsCatalog

/// What the demo's "extension" process reports while it uploads.
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

/// `tnotify demo`: this process plays an app and starts a second one that
/// plays its extension; typed notifications cross between them over each
/// cross-process transport in turn.
func demoCommand(_ words: ArraySlice<String>) async throws(CommandFailure) {
    _ = try Arguments(words, options: [], flags: [])
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("tnotify-demo-\(UUID().uuidString)").path
    do {
        try FileManager.default.createDirectory(
            atPath: root, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
    } catch {
        throw CommandFailure(code: .ioError, message: "could not create a temporary directory: \(error)")
    }
    defer { try? FileManager.default.removeItem(atPath: root) }

    // Every transport that meets in a directory: none needs a server.
    for entry in TransportCatalog.tools {
        guard case .directory = entry.meeting else { continue }
        let directory = root + "/" + entry.name
        emit("== over the \(entry.name) transport (\(directory))")
        do {
            let app = try entry.makeHub(at: .directory(directory), endpoint: "app")
            // Registered before the extension starts: nothing it posts can be missed.
            let progress = try app.notifications(.of(UploadProgress.self))
            let finished = try app.notifications(.of(UploadFinished.self))
            let child = try spawnSelf(["demo-extension", entry.name, directory])
            emit(
                "app (pid \(ProcessInfo.processInfo.processIdentifier)): started the extension, pid \(child.processIdentifier); observing with for await"
            )
            for await delivered in progress {
                let note = delivered.notification
                let sender = delivered.delivery.sender
                emit(
                    "app: #\(delivered.delivery.sequence) from \(sender.endpoint)(\(sender.processID)): \(note.fileName) \(note.percent)%"
                )
                if note.percent == 100 { break }
            }
            for await delivered in finished {
                emit("app: \(delivered.notification.fileName) finished, \(delivered.notification.bytes) bytes")
                break
            }
            child.waitUntilExit()
            app.closeAndWait()
        } catch {
            throw failure(error)
        }
    }
    emit(
        "demo: every notification crossed from the extension process to the app, in order, over every transport that meets in a directory"
    )
}

/// The demo's second process: posts typed notifications as an extension would.
func demoExtensionCommand(_ words: ArraySlice<String>) throws(CommandFailure) {
    guard words.count == 2, let entry = TransportCatalog.entry(named: words[words.startIndex]) else {
        throw CommandFailure(code: .usage, message: "demo-extension TRANSPORT DIR")
    }
    do {
        let hub = try entry.makeHub(at: entry.place(words[words.startIndex + 1]), endpoint: "extension")
        for percent in stride(from: 0, through: 100, by: 25) {
            try hub.post(UploadProgress(fileName: "clip.mov", percent: percent))
        }
        try hub.post(UploadFinished(fileName: "clip.mov", bytes: 18_874_368))
        hub.closeAndWait()
    } catch {
        throw failure(error)
    }
}

/// Starts this same executable with `arguments`.
func spawnSelf(_ arguments: [String]) throws(TypedNotificationError) -> Process {
    let executable = Bundle.main.executablePath ?? CommandLine.arguments[0]
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    do {
        try process.run()
    } catch {
        throw TypedNotificationError(code: .transportFailure, message: "could not start \(executable): \(error)")
    }
    return process
}
