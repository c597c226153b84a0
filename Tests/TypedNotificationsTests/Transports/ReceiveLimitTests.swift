import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsRedis
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Another process's resident set in bytes (Linux: `/proc/PID/statm`); `nil` elsewhere.
private func residentBytes(of pid: pid_t) -> Int? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/statm", encoding: .utf8) else { return nil }
    let fields = text.split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}

private let limitedName: NotificationName = "test.limit.big"
/// Over a 64 KiB limit, under the 4 MiB a datagram can carry here.
private let oversizedPayload = [UInt8](repeating: 0x5A, count: 4_000_000)

/// A hub that may post 4 MB payloads, while its observers keep the default 64 KiB.
private func largePoster(_ directory: String) throws -> NotificationHub<SocketTransport> {
    try socketHub(
        directory, endpoint: "large",
        hubConfiguration: NotificationHubConfiguration(maximumPayloadSize: 4 * 1024 * 1024))
}

@Suite("A transport refuses what its center would, before it reads it", .serialized, .timeLimit(.minutes(10)))
struct ReceiveLimitTests {
    @Test("4 MB datagrams to a hub with a 64 KiB limit: refused unread, undecodable, missed once each")
    func socketRefusesOversizedDatagrams() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try socketHub(directory, endpoint: "small")
        defer { observer.close() }
        let deliveries = try observer.deliveries(.of([UInt8].self, named: limitedName))
        let poster = try largePoster(directory)
        defer { poster.close() }

        try poster.post([1], as: limitedName)
        for _ in 0..<3 { try poster.post(oversizedPayload, as: limitedName) }
        try poster.post([2], as: limitedName)

        var seen: [(bytes: [UInt8], missed: Int, exact: Bool)] = []
        for await delivered in deliveries {
            seen.append((delivered.notification, delivered.delivery.missed, delivered.delivery.missedIsExact))
            if seen.count == 2 { break }
        }
        #expect(seen.map(\.bytes) == [[1], [2]])
        // Each refused one counted once: as undecodable, and in the next
        // delivery's `missed`, not again as a gap in the poster's numbers.
        #expect(seen.map(\.missed) == [0, 3])
        #expect(seen.map(\.exact) == [true, true])
        #expect(observer.metrics.undecodable == 3)
        #expect(observer.transport.statistics.refusedOversized == 3)
        #expect(observer.transport.statistics.refusedMalformed == 0)
        // Refused notifications are no gap in the poster's numbers.
        #expect(observer.metrics.sequenceGaps == 0)
    }

    @Test(
        "hubs sharing a thread share its receive storage: a 64 KiB hub refuses 4 MB ones, a 4 MiB hub beside it gets them whole"
    )
    func sharedThreadKeepsEachLimit() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // Both on one thread, so their datagrams land in one storage, in
        // slots each cut to its own hub's limit.
        let group = LoopGroup(threads: 1)
        var configuration = SocketTransportConfiguration()
        configuration.loopGroup = group
        configuration.sleepsInReceive = false
        let small = try socketHub(directory, endpoint: "small", configuration: configuration)
        defer { small.close() }
        let large = try socketHub(
            directory, endpoint: "large-observer", configuration: configuration,
            hubConfiguration: NotificationHubConfiguration(maximumPayloadSize: 4 * 1024 * 1024))
        defer { large.close() }
        let loops = [small, large].compactMap { $0.transport.deliveryExecutor as? EventLoop }
        try #require(loops.count == 2 && loops.allSatisfy(\.sharesThread))
        #expect(Set(loops.map(\.threadLoop)).count == 1)
        let smallDeliveries = try small.deliveries(.of([UInt8].self, named: limitedName))
        let largeDeliveries = try large.deliveries(.of([UInt8].self, named: limitedName))
        let poster = try largePoster(directory)
        defer { poster.close() }
        let big = (0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        for round in 0..<3 {
            try poster.post([UInt8(round)], as: limitedName)
            try poster.post(big, as: limitedName)
        }
        try poster.post([9], as: limitedName)

        var smallSeen: [(bytes: [UInt8], missed: Int)] = []
        for await delivered in smallDeliveries {
            smallSeen.append((delivered.notification, delivered.delivery.missed))
            if smallSeen.count == 4 { break }
        }
        #expect(smallSeen.map(\.bytes) == [[0], [1], [2], [9]])
        #expect(smallSeen.map(\.missed) == [0, 1, 1, 1])
        #expect(small.transport.statistics.refusedOversized == 3)
        var largeSeen: [[UInt8]] = []
        for await delivered in largeDeliveries {
            largeSeen.append(delivered.notification)
            if largeSeen.count == 7 { break }
        }
        #expect(largeSeen == [[0], big, [1], big, [2], big, [9]])
        #expect(large.transport.statistics.refusedOversized == 0)
    }

    @Test("a watcher sent 4 MB notifications, by socket and by spool, stays small and says it missed each")
    func watcherStaysSmall() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watcher = try HelperProcess(
            ["watch", limitedName.rawValue, "--transport", "socket", "--dir", directory, "--json"],
            executable: HelperProcess.tnotify)
        await watcher.waitForLine(startingWith: "watching")
        // Room in the spool for every 4 MB post the stopped watcher's socket cannot take.
        let poster = try socketHub(
            directory, endpoint: "large", configuration: SocketTransportConfiguration(spoolLimitPerEndpoint: 1 << 28),
            hubConfiguration: NotificationHubConfiguration(maximumPayloadSize: 4 * 1024 * 1024))
        defer { poster.close() }
        try poster.post(Array("first".utf8), as: limitedName)
        _ = await watcher.waitForLine(startingWith: "{")
        let before = residentBytes(of: watcher.pid)

        // Running: each lands in its socket. Stopped: the socket fills and
        // the rest goes to the spool, read when it runs again.
        let rounds = 12
        for round in 0..<(2 * rounds) {
            if round == rounds {
                watcher.signal(SIGSTOP)
                await waitUntilStopped(watcher.pid)
            }
            try poster.post(Array("small \(round)".utf8), as: limitedName)
            try poster.post(oversizedPayload, as: limitedName)
        }
        try poster.post(Array("last".utf8), as: limitedName)
        #expect(poster.transport.statistics.spooled > 0, "nothing was spooled: the spool path went untested")
        watcher.signal(SIGCONT)
        await watcher.lines.wait(forCount: 2 + 2 * rounds + 1)
        let lines = Array(watcher.lines.values.dropFirst(2))
        let texts = lines.map { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["payloadText"] as? String
        }
        #expect(texts == (0..<(2 * rounds)).map { "small \($0)" } + ["last"])
        let missed = lines.map { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["missed"] as? Int
        }
        #expect(missed == [0] + Array(repeating: 1, count: 2 * rounds), "\(lines)")
        // Not under ThreadSanitizer: its shadow memory grows with what the
        // watcher touches, 3 MB more here, whatever the watcher keeps.
        if !runsUnderThreadSanitizer, let before, let after = residentBytes(of: watcher.pid) {
            print("watcher resident \(before) → \(after) bytes")
            // About 0.4 MB here; with slots of 4 MiB, as before the center's
            // limit reached the transport, 4.9 MB.
            #expect(after - before < 2 * 1024 * 1024, "resident \(before) → \(after) bytes")
        }
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)
    }

    /// Posts small, oversized, small through `poster` and checks that
    /// `observer` refused the oversized one, counted once, as undecodable
    /// and as missed.
    private func expectRefusedOnce<T: NotificationTransport>(
        observer: NotificationHub<T>, poster: NotificationHub<some NotificationTransport>
    ) async throws {
        let deliveries = try observer.deliveries(.of([UInt8].self, named: limitedName))
        try poster.post([1], as: limitedName)
        try poster.post([UInt8](repeating: 7, count: 200_000), as: limitedName)
        try poster.post([2], as: limitedName)
        var seen: [([UInt8], Int)] = []
        for await delivered in deliveries {
            seen.append((delivered.notification, delivered.delivery.missed))
            if seen.count == 2 { break }
        }
        #expect(seen.map(\.0) == [[1], [2]])
        #expect(seen.map(\.1) == [0, 1])
        #expect(observer.metrics.undecodable == 1)
    }

    @Test("a file log record over the observer's limit is refused: undecodable, missed once, not corrupt")
    func fileRefusesOversizedRecords() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try fileHub(directory, endpoint: "small")
        defer { observer.close() }
        let poster = try NotificationHub(
            endpoint: "large", transport: FileSignalTransport(directory: directory),
            configuration: NotificationHubConfiguration(maximumPayloadSize: 1 << 20))
        defer { poster.close() }
        try await expectRefusedOnce(observer: observer, poster: poster)
        #expect(observer.transport.statistics.refusedOversized == 1)
        #expect(observer.transport.statistics.corruptRecordsSkipped == 0)
    }

    @Test(
        "a Redis entry over the observer's limit is refused: undecodable, missed once, not corrupt",
        .enabled(if: RedisTestServer.suitesRun, RedisTestServer.skipReason))
    func redisRefusesOversizedEntries() async throws {
        let server = try await RedisTestServer()
        let observer = try redisHub(server, endpoint: "small")
        defer { observer.close() }
        let poster = try NotificationHub(
            endpoint: "large", transport: RedisStreamsTransport(url: server.url()),
            configuration: NotificationHubConfiguration(maximumPayloadSize: 1 << 20))
        defer { poster.close() }
        try await expectRefusedOnce(observer: observer, poster: poster)
        #expect(observer.transport.statistics.refusedOversized == 1)
        #expect(observer.transport.statistics.corruptEntriesSkipped == 0)
    }

    @Test("a durable file identity that refused the log's last record does not report it again after a restart")
    func durableFileRefusalReportedOnce() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try NotificationHub(
            endpoint: "large", transport: FileSignalTransport(directory: directory),
            configuration: NotificationHubConfiguration(maximumPayloadSize: 1 << 20))
        defer { poster.close() }
        let first = try fileHub(directory, endpoint: "small", identity: "durable")
        let got = Collector<([UInt8], Int)>()
        let token = try first.addObserver(.of([UInt8].self, named: limitedName)) { bytes, delivery in
            got.append((bytes, delivery.missed))
        }
        #expect(await waitUntil { first.transport.committedPosition(of: limitedName) != nil })
        let start = try #require(first.transport.committedPosition(of: limitedName))
        try poster.post([1], as: limitedName)
        #expect(await got.wait(forCount: 1, upTo: safetyNet))
        // Handled and committed: the cursor is past the first record.
        #expect(await waitUntil { (first.transport.committedPosition(of: limitedName) ?? start) > start })
        let handled = try #require(first.transport.committedPosition(of: limitedName))
        // The log's last record: refused, reported, and passed over once
        // the one before it is handled.
        try poster.post([UInt8](repeating: 7, count: 200_000), as: limitedName)
        #expect(
            await waitUntil { (first.transport.committedPosition(of: limitedName) ?? handled) > handled },
            "the cursor never moved past the refused record")
        #expect(first.metrics.undecodable == 1)
        token.cancel()
        first.close()
        await first.closed()

        let second = try fileHub(directory, endpoint: "small", identity: "durable")
        defer { second.close() }
        let deliveries = try second.deliveries(.of([UInt8].self, named: limitedName))
        try poster.post([2], as: limitedName)
        for await delivered in deliveries {
            #expect(delivered.notification == [2])
            #expect(delivered.delivery.missed == 0)
            break
        }
        #expect(second.metrics.undecodable == 0)
    }

    /// A whole, valid envelope of 70,000 bytes of payload (over the
    /// default 64 KiB limit), and a forgery of it: a valid header and name
    /// claiming 1,000,000 bytes, and nothing after the endpoint (32 + name +
    /// endpoint bytes).
    private func lengthClaim() throws -> (forged: [UInt8], whole: [UInt8]) {
        let sender = try forgedSender(instance: 9)
        let real = try forgedMessage(
            [UInt8](repeating: 1, count: 70_000), named: limitedName, from: sender, sequence: 1)
        guard case .encoded(let encoded) = real.payload else { throw POSIXError(.EINVAL) }
        var forged = Array(
            encoded.envelope.prefix(NotificationEnvelope.headerSize + limitedName.rawValue.utf8.count + 6))
        forged.withUnsafeMutableBytes {
            $0.storeBytes(of: UInt32(1_000_000).littleEndian, toByteOffset: 8, as: UInt32.self)
        }
        return (forged, Array(encoded.envelope))
    }

    /// Posts `[3]` through `poster` and expects it to be `deliveries`' next,
    /// with nothing missed: the forgeries before it cost the observer nothing.
    private func expectNextCleanly(
        _ deliveries: DeliverySequence<[UInt8]>, postedBy poster: NotificationHub<some NotificationTransport>
    ) async throws {
        try poster.post([3], as: limitedName)
        for await delivered in deliveries {
            #expect(delivered.notification == [3])
            #expect(delivered.delivery.missed == 0)
            break
        }
    }

    @Test("a short datagram whose header claims a large payload is malformed, and nothing is missed")
    func forgedLengthIsMalformed() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try socketHub(directory, endpoint: "small")
        defer { observer.close() }
        let deliveries = try observer.deliveries(.of([UInt8].self, named: limitedName))
        let forged = try lengthClaim().forged
        let socket = try SystemCalls.datagramSocket().get()
        try SystemCalls.connectSocket(socket, toSocketPath: observer.transport.socketPath).get()
        for _ in 0..<3 {
            _ = try forged.withUnsafeBytes { try SystemCalls.sendDatagram(socket, $0).get() }
        }
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        try await expectNextCleanly(deliveries, postedBy: poster)
        #expect(observer.transport.statistics.refusedMalformed == 3)
        #expect(observer.transport.statistics.refusedOversized == 0)
        #expect(observer.metrics.undecodable == 0)
    }

    @Test(
        "a Redis entry whose header only claims a large payload, or whose envelope is under another field, is corrupt; nothing is missed",
        .enabled(if: RedisTestServer.suitesRun, RedisTestServer.skipReason))
    func redisForgedLengthIsCorrupt() async throws {
        let server = try await RedisTestServer()
        let observer = try redisHub(server, endpoint: "small")
        defer { observer.close() }
        let deliveries = try observer.deliveries(.of([UInt8].self, named: limitedName))
        let (forged, whole) = try lengthClaim()
        let key = Array("tn:{\(limitedName.rawValue)}".utf8)
        let entries: [[[UInt8]]] = [
            [Array("e".utf8), forged],
            // Whole and checksummed, over the limit, but not in the entry's field.
            [Array("x".utf8), whole],
        ]
        for fields in entries {
            let reply = try server.command(bytes: [Array("XADD".utf8), key, Array("*".utf8)] + fields)
            guard case .bulkString = reply else { throw RedisTestFailure("XADD failed: \(reply)") }
        }
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        try await expectNextCleanly(deliveries, postedBy: poster)
        #expect(observer.transport.statistics.corruptEntriesSkipped == 2)
        #expect(observer.transport.statistics.refusedOversized == 0)
        #expect(observer.metrics.undecodable == 0)
    }
}
