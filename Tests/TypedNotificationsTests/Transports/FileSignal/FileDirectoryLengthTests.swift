import Foundation
import Testing

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The file transport in the longest directory it takes, with the longest
/// identity, name and namespace: every file it writes fits, so nothing
/// fails, and no cursor goes unsaved, for the directory's length.
@Suite("File transport: the longest directory", .serialized, .timeLimit(.minutes(10)))
struct FileDirectoryLengthTests {
    @Test(
        "at exactly the limit: posts, a durable name and namespace whose cursor and marker are saved, latest, ls and gc; one byte more is refused"
    )
    func longestDirectory() async throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        let limit = FileLog.maximumDirectoryLength()
        let directory = try makeLongDirectory(in: base, length: limit)
        let identity = String(repeating: "i", count: 64)
        let name = try NotificationName(validating: String(repeating: "n", count: NotificationName.maximumLength))
        let namespace = try NotificationNamespace(
            validating: String(repeating: "s", count: NotificationName.maximumLength))
        let inNamespace = try NotificationName(validating: namespace.rawValue)

        let durable = try fileHub(directory, endpoint: "durable", identity: identity)
        let named = try durable.deliveries(.of(String.self, named: name))
        let covered = try durable.deliveries(.of(String.self, in: namespace))
        let marker = directory + "/cursors/" + identity + "/" + namespace.rawValue + ".*"
        #expect(FileManager.default.fileExists(atPath: marker))
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        try poster.post("first", as: name)
        try poster.post("first", as: inNamespace)
        var namedIterator = named.makeAsyncIterator()
        var coveredIterator = covered.makeAsyncIterator()
        #expect(await namedIterator.next()?.notification == "first")
        #expect(await coveredIterator.next()?.notification == "first")
        // Asking for the next handled the first; then the hub closes.
        try poster.post("second", as: name)
        #expect(await namedIterator.next()?.notification == "second")
        durable.close()
        await durable.closed()
        withExtendedLifetime((namedIterator, coveredIterator)) {}

        // The next run resumes at its saved cursor: "second" again, marked,
        // never "first".
        let again = try fileHub(directory, endpoint: "durable", identity: identity)
        defer { again.close() }
        var resumed = try again.deliveries(.of(String.self, named: name)).makeAsyncIterator()
        let next = await resumed.next()
        #expect(next?.notification == "second")
        #expect(next?.delivery.isRedelivery == true)

        let dir = ["--transport", "file", "--dir", directory]
        let latest = try await tnotify(["latest", name.rawValue] + dir)
        #expect(latest.status == 0, "\(latest.errors)")
        #expect(latest.output.first?.hasSuffix(" second") == true)
        let list = try await tnotify(["ls"] + dir)
        #expect(list.status == 0, "\(list.errors)")
        #expect(list.output.contains { $0.contains("cursor \(identity):") && !$0.contains("unusable") })
        #expect(try await tnotify(["gc"] + dir).status == 0)

        // One byte more: refused before anything is made there.
        let deeper = directory + "x"
        #expect {
            _ = try FileSignalTransport(directory: deeper)
        } throws: { error in
            guard let error = error as? TypedNotificationError else { return false }
            return error.code == .pathTooLong && error.message.contains(deeper)
                && error.message.contains("at most \(limit)")
        }
        #expect(!FileManager.default.fileExists(atPath: deeper))
        let refused = try await tnotify(["post", name.rawValue, "--text", "x", "--transport", "file", "--dir", deeper])
        #expect(refused.status == 64)
    }
}
