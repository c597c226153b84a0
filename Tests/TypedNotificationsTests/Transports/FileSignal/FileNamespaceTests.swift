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

/// The file transport's namespaces against the processes that break them:
/// a log first made after the observer subscribed, by a long-lived poster
/// and by a new process; a durable namespace identity killed mid-backlog
/// and restarted while new names appeared; retention while it was away;
/// 10,000 names.
@Suite("File transport: a namespace observer between processes", .serialized, .timeLimit(.minutes(10)))
struct FileNamespaceTests {
    @Test(
        "a long-lived poster and a new process both reach a namespace observer with names first posted after it started; a near miss never"
    )
    func newLogsFromEveryone() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        try await playNewNamesFromEveryone(transport: ["--transport", "file", "--dir", directory]) { name, index in
            try poster.post(Ping(index: index), as: name)
        }
    }

    @Test(
        "a durable namespace identity killed mid-backlog and restarted gets every notification at least once, names that appeared while it was away from their first record"
    )
    func durableIdentityKilledWhileNamesAppear() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        try await playDurableNamespaceKill(transport: ["--transport", "file", "--dir", directory]) { name, index in
            try poster.post(Ping(index: index), as: name)
        }
    }

    @Test(
        "retention while a durable namespace identity is away: a new name's log is held like a cursor's, or past the limit behind, its losses are counted exactly"
    )
    func retentionWhileAway() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        for (limit, holds) in [(nil as Int?, true), (16 * 1024, false)] {
            let configuration = FileSignalConfiguration(
                segmentSize: 4096, retention: FileRetentionPolicy(maximumBytes: 8 * 1024, maximumBytesBehind: limit))
            let identity = holds ? "holder" : "limited"
            let away = try fileHub(directory, endpoint: "away", identity: identity, configuration: configuration)
            _ = try away.deliveries(.of(Ping.self, in: "test.retained"))
            away.close()
            await away.closed()
            let name: NotificationName = holds ? "test.retained.held" : "test.retained.limited"
            let poster = try fileHub(directory, endpoint: "poster", configuration: configuration)
            for index in 0..<1_000 { try poster.post(Ping(index: index), as: name) }
            poster.close()
            let segments = FileLog.segments(directory, name)
            #expect(holds == (segments.first == 1), "\(identity): segments \(segments.first ?? 0)...")
            let back = try fileHub(directory, endpoint: "away", identity: identity, configuration: configuration)
            defer { back.close() }
            let deliveries = try back.deliveries(.of(Ping.self, in: "test.retained"), bufferingPolicy: .unbounded)
            var received: [Int] = []
            var missed = 0
            for await delivered in deliveries {
                #expect(delivered.delivery.name == name)
                received.append(delivered.notification.index)
                missed += delivered.delivery.missed
                if delivered.notification.index == 999 { break }
            }
            #expect(received == Array((1_000 - received.count)..<1_000), "\(identity): in order, the newest kept")
            #expect(received.count + missed == 1_000, "\(identity): \(received.count) received, \(missed) missed")
            #expect(holds == (missed == 0))
        }
    }

    @Test("10,000 names first posted after the observer subscribed, each delivered once, with no descriptor per name")
    func tenThousandNames() async throws {
        await MachineLoad.acquire()
        defer { MachineLoad.release() }
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try fileHub(directory, endpoint: "observer")
        defer { observer.close() }
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        let count = manyNames
        let got = Collector<String>()
        let token = try observer.addObserver(.of(Ping.self, in: "test.many")) { _, delivery in
            got.append(delivery.name.rawValue)
        }
        defer { token.cancel() }
        try await offThePool {
            for index in 0..<count {
                try poster.post(Ping(index: index), as: NotificationName(checked: "test.many.n\(index)"))
            }
        }
        #expect(await got.wait(forCount: count, upTo: safetyNet))
        #expect(Set(got.values).count == count)
        #if os(Linux)
            // Past 256 logs a reader closes its segment after each pass, and
            // a poster keeps 256 names' appenders. Counted under this
            // directory: the whole process's count took in the descriptors
            // of the tests running beside it (1,055 under ThreadSanitizer).
            let held = try descriptors(under: directory).count
            #expect(held < min(1_000, count), "\(held) descriptors under the directory for \(count) names")
        #endif
        try poster.post(Ping(index: -1), as: "test.many.n0")
        #expect(await got.wait(forCount: count + 1, upTo: safetyNet))
        #expect(got.values.count == count + 1)
    }
}
