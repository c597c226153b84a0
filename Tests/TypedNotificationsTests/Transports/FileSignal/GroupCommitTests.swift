import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

/// Posts that queue up while an append waits for the log's lock are
/// appended together: one lock, one write, whole records, in order.
@Suite("File transport: group commit", .timeLimit(.minutes(10)))
struct GroupCommitTests {
    /// Holds `name`'s log lock, as another process appending would, posts
    /// one notification that then waits for it, and queues `count` more from
    /// threads of their own behind that one; releases the lock once all of
    /// them wait in line, and returns when every post returned.
    func postBehindHeldLock<N: TypedNotification & Sendable>(
        _ hub: NotificationHub<FileSignalTransport>, directory: String, count: Int, make: @escaping @Sendable (Int) -> N
    ) throws -> [Int: TypedNotificationError.Code?] {
        let lock = try SystemCalls.openFile(FileLog.lockPath(directory, N.name), .readWrite).get()
        try SystemCalls.lockFile(lock, exclusive: true).get()
        let outcomes = Locked<[Int: TypedNotificationError.Code?]>([:])
        @Sendable func post(_ index: Int) {
            do throws(TypedNotificationError) {
                try hub.post(make(index))
                outcomes.withLock { $0[index] = .some(nil) }
            } catch {
                outcomes.withLock { $0[index] = error.code }
            }
        }
        // One of them leads and waits for the lock; the others wait in line.
        let done = (-1..<count).map { index in startThread { post(index) } }
        let queued = waitOnThisThread { hub.postsInLine == count }
        #expect(queued, "every post should wait in line behind the held lock")
        SystemCalls.unlockFile(lock)
        for event in done { event.wait() }
        return outcomes.withLock { $0 }
    }

    @Test("eight posts that queue behind a held log lock are appended with one write, and read once each, in order")
    func queuedPostsShareOneWrite() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        let observer = try fileHub(directory, endpoint: "observer")
        let received = try observer.deliveries(.of(Ping.self))
        try poster.post(Ping(index: -2))  // the log and its lock file exist now
        let before = poster.transport.statistics

        let outcomes = try postBehindHeldLock(poster, directory: directory, count: 8) { Ping(index: $0) }
        #expect(outcomes.count == 9)
        #expect(outcomes.values.allSatisfy { $0 == nil })

        let after = poster.transport.statistics
        #expect(after.appended - before.appended == 9)
        // The post that waited for the lock, then the eight behind it together.
        #expect(after.appendWrites - before.appendWrites == 2)

        var indices: [Int] = []
        var sequences: [UInt64] = []
        for try await delivered in received {
            #expect(delivered.delivery.missed == 0)
            indices.append(delivered.notification.index)
            sequences.append(delivered.delivery.sequence)
            if indices.count == 10 { break }
        }
        #expect(indices.first == -2)
        #expect(Set(indices.dropFirst()) == Set(-1..<8))
        #expect(sequences == Array(1...10))
        let log = logRecords(directory, Ping.name)
        #expect(log.count == 10 && log.clean)
    }

    @Test("a batch larger than the segment's room rolls over between records: whole records only, in order")
    func batchSpansSegments() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let configuration = FileSignalConfiguration(segmentSize: 4096)
        let poster = try fileHub(directory, endpoint: "poster", configuration: configuration)
        let observer = try fileHub(directory, endpoint: "observer", configuration: configuration)
        let received = try observer.deliveries(.of(Note.self))
        let text = String(repeating: "x", count: 1500)
        try poster.post(Note(text: "first"))
        let before = poster.transport.statistics

        let outcomes = try postBehindHeldLock(poster, directory: directory, count: 8) { Note(text: "\($0) " + text) }
        #expect(outcomes.values.allSatisfy { $0 == nil })

        let after = poster.transport.statistics
        #expect(after.appended - before.appended == 9)
        // Two 1.6 KB records fit in a 4 KB segment: the first segment takes
        // three, then the batch goes on two per write and segment.
        let writes = after.appendWrites - before.appendWrites
        #expect(writes < 9, "the queued posts shared writes")
        #expect(writes >= 5, "a write never crosses a segment")
        #expect(FileLog.segments(directory, Note.name).count == 5)
        let log = logRecords(directory, Note.name)
        #expect(log.count == 10 && log.clean)

        var texts: [String] = []
        var sequences: [UInt64] = []
        for try await delivered in received {
            #expect(delivered.delivery.missed == 0)
            texts.append(String(delivered.notification.text.prefix(while: { $0 != " " })))
            sequences.append(delivered.delivery.sequence)
            if texts.count == 10 { break }
        }
        #expect(sequences == Array(1...10))
        #expect(texts.first == "first")
        #expect(Set(texts.dropFirst()) == Set((-1..<8).map(String.init)))
    }
}
