import Foundation
import Testing
import TypedNotifications

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A durable identity's cursor, or its marker for a namespace, found
/// unreadable by its next run, in every way a file can be (see
/// ``UnreadableFile``), with `tnotify watch --cursor` as a user runs it:
/// what the fault table promises, every time. Reading starts at the oldest
/// record kept, each marked as a redelivery, and the watcher says why; the
/// run after it is back to normal once the file could be written again.
@Suite("File transport: a cursor or marker that cannot be read", .serialized, .timeLimit(.minutes(10)))
struct UnreadableCursorTests {
    static let names: [NotificationName] = ["test.jobs.a", "test.jobs.b", "test.jobs.c"]

    /// `tnotify watch SELECTOR --cursor ID --json` over the file transport
    /// in `directory`, once it has printed "watching".
    private func watch(_ selector: String, identity: String, in directory: String) async throws -> HelperProcess {
        let watcher = try HelperProcess(
            ["watch", selector, "--cursor", identity, "--json", "--transport", "file", "--dir", directory],
            executable: HelperProcess.tnotify)
        await watcher.waitForLine(startingWith: "watching")
        return watcher
    }

    /// Whether the watcher said `text` on standard error.
    private func said(_ text: String, by watcher: HelperProcess) -> Bool {
        watcher.errors.values.contains { line in line.contains(text) }
    }

    /// Waits for `count` notification lines (a safety net of 30 s: a
    /// watcher that lost them never prints them), then stops the watcher.
    private func lines(_ count: Int, of watcher: HelperProcess) async -> [Watched] {
        let arrived = await watcher.lines.wait(forCount: count + 1, upTo: safetyNet)
        #expect(arrived, "\(watcher.lines.values) \(watcher.errors.values)")
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)
        return Watched.parse(watcher.lines.values)
    }

    @Test(
        "a namespace marker that cannot be read: the names that appeared while the identity was away come, marked, and the watcher says why",
        arguments: UnreadableFile.playable)
    func damagedMarker(way: UnreadableFile) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // The identity's first run in the namespace writes its marker.
        let first = try await watch("test.jobs.*", identity: "aud", in: directory)
        first.signal(SIGTERM)
        #expect(await first.waitForExit() == 0)
        // Away: three names appear, and the marker is damaged.
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        for (index, name) in Self.names.enumerated() { try poster.post(Ping(index: index), as: name) }
        let marker = directory + "/cursors/aud/test.jobs.*"
        try way.plant(at: marker)

        let second = try await watch("test.jobs.*", identity: "aud", in: directory)
        let seen = await lines(3, of: second)
        #expect(seen.map(\.name).sorted() == Self.names.map(\.rawValue))
        #expect(seen.allSatisfy { $0.isRedelivery })
        #expect(said("the marker of test.jobs.* could not be used", by: second))

        // Each name has a cursor of its own now; one more appears while away.
        try poster.post(Ping(index: 3), as: "test.jobs.d")
        let third = try await watch("test.jobs.*", identity: "aud", in: directory)
        let next = await lines(1, of: third)
        #expect(next.map(\.name) == ["test.jobs.d"])
        // Written anew, the marker stands for it again: a first delivery.
        // A directory in its place cannot be replaced: marked again, said again.
        #expect(next.first?.isRedelivery == !way.isReplaceable)
        #expect(said("could not be used", by: third) == !way.isReplaceable)
    }

    @Test(
        "a name's cursor that cannot be read: the backlog comes from the oldest record, marked, and the watcher says why",
        arguments: UnreadableFile.playable)
    func damagedCursor(way: UnreadableFile) async throws {
        let directory = try directoryWithBacklog(identity: "c", [Ping(index: 0), Ping(index: 1)])
        defer { removeDirectory(directory) }
        try way.plant(at: directory + "/cursors/c/" + Ping.name.rawValue)

        let second = try await watch(Ping.name.rawValue, identity: "c", in: directory)
        let seen = await lines(2, of: second)
        #expect(seen.map(\.sequence) == [1, 2])
        #expect(seen.allSatisfy { $0.isRedelivery })
        #expect(said("the cursor of test.ping could not be used", by: second))

        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        try poster.post(Ping(index: 2))
        let third = try await watch(Ping.name.rawValue, identity: "c", in: directory)
        if way.isReplaceable {
            // Written anew: the next run resumes after what it printed.
            let next = await lines(1, of: third)
            #expect(next.map(\.isRedelivery) == [false])
            #expect(!said("could not be used", by: third))
        } else {
            // Never saved: every run starts at the oldest again, marked.
            let next = await lines(3, of: third)
            #expect(next.allSatisfy { $0.isRedelivery })
            #expect(said("could not be used", by: third))
        }
    }

    @Test(
        "retention while a cursor cannot be read: what its identity has not read stays, and its next run gets all of it, marked"
    )
    func retentionKeepsForAnUnreadableCursor() async throws {
        let directory = try directoryWithBacklog(identity: "c", [Ping]())
        defer { removeDirectory(directory) }
        try UnreadableFile.garbage.plant(at: directory + "/cursors/c/" + Ping.name.rawValue)
        let configuration = FileSignalConfiguration(
            segmentSize: 4096, retention: FileRetentionPolicy(maximumBytes: 8 * 1024))
        let poster = try fileHub(directory, endpoint: "poster", configuration: configuration)
        for index in 0..<1_000 { try poster.post(Ping(index: index)) }
        poster.close()
        let list = try await tnotify(["ls", "--transport", "file", "--dir", directory])
        #expect(list.output.contains { $0.contains("cursor c: unusable") && $0.contains("kept from retention") })
        #expect(try await tnotify(["gc", "--transport", "file", "--dir", directory]).status == 0)

        let hub = try fileHub(directory, endpoint: "durable", identity: "c", configuration: configuration)
        defer { hub.close() }
        var seen: [Int] = []
        var missed = 0
        for await delivered in try hub.deliveries(.of(Ping.self), bufferingPolicy: .unbounded) {
            #expect(delivered.delivery.isRedelivery)
            missed += delivered.delivery.missed
            seen.append(delivered.notification.index)
            if delivered.notification.index == 999 { break }
        }
        #expect(seen == Array(0..<1_000))
        #expect(missed == 0)
    }
}
