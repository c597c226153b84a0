import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// A socket transport whose thread sleeps in its own receive
/// ("receiving"), or one on a loop group's thread ("shared", `group`).
private func socketTransport(_ path: String, _ directory: String, group: LoopGroup) throws -> SocketTransport {
    var configuration = SocketTransportConfiguration()
    if path == "receiving" {
        configuration.sleepsInReceiveBeyondLimit = true
    } else {
        configuration.sleepsInReceive = false
        configuration.loopGroup = group
    }
    return try SocketTransport(directory: directory, configuration: configuration)
}

/// The spool files under `directory`, as `folder/file`: what posters
/// keep for observers that have yet to read it.
private func spoolFiles(in directory: String) -> [String] {
    let spool = directory + "/spool"
    let folders = (try? FileManager.default.contentsOfDirectory(atPath: spool)) ?? []
    return folders.sorted().flatMap { folder in
        ((try? FileManager.default.contentsOfDirectory(atPath: spool + "/" + folder)) ?? []).sorted().map {
            folder + "/" + $0
        }
    }
}

/// What one observer got: the pings' indexes, in order, and what it was told it missed.
private final class ObserverTally: Sendable {
    let indexes = Collector<Int>()
    let missed = Counter()
    /// When the first and the latest ping reached the handler.
    let times = Locked<(first: ContinuousClock.Instant?, latest: ContinuousClock.Instant?)>((nil, nil))

    func got(_ ping: HelperPing, _ delivery: NotificationDelivery) {
        for _ in 0..<delivery.missed { missed.increment() }
        let now = ContinuousClock.now
        times.withLock { times in
            if times.first == nil { times.first = now }
            times.latest = now
        }
        indexes.append(ping.index)
    }
}

/// The socket transport hands the center no more than its observers'
/// buffers take: what they cannot take yet waits in the socket's queue and
/// in posters' spools. A handler blocked for seconds used to make its own
/// buffer, and on a shared thread its neighbours' buffers, drop what
/// arrived meanwhile (972 of 2,000 each, counted in missed).
@Suite("Socket transport: reading only as fast as buffers empty", .serialized, .timeLimit(.minutes(5)))
struct SocketBackpressureTests {
    static let posts = 6_000

    @Test(
        "a handler blocked while another process posts 6,000 to its 1,024-notification buffer: all arrive, in order, none missed",
        arguments: ["receiving", "shared"])
    func blockedHandlerLosesNothing(path: String) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let group = LoopGroup(threads: 1)
        let hub = try NotificationHub(endpoint: "blocked", transport: socketTransport(path, directory, group: group))
        defer { hub.close() }
        let gate = ThreadGate()
        gate.close()
        let blocked = Signal()
        let tally = ObserverTally()
        // On the hub's executor: the transport's own thread, which the
        // block holds, so nothing is received meanwhile.
        let token = try hub.addObserver(.of(HelperPing.self)) { ping, delivery in
            if ping.index == 0 {
                blocked.fire()
                gate.passThrough()
            }
            tally.got(ping, delivery)
        }
        defer { token.cancel() }
        // Posts and exits: what the socket's queue cannot take waits in the spool.
        let started = ContinuousClock.now
        let poster = try HelperProcess(["post-exit", directory, "\(Self.posts)", "1"])
        #expect(await blocked.wait(upTo: safetyNet))
        let blockedAt = ContinuousClock.now - started
        #expect(await poster.waitForExit() == 0, "\(poster.errors.values)")
        let exitedAt = ContinuousClock.now - started
        gate.open()
        let arrived = await tally.indexes.wait(forCount: Self.posts, upTo: safetyNet)
        #expect(
            arrived,
            """
            \(tally.indexes.values.count) arrived, \(tally.missed.count) missed; blocked after \(blockedAt), \
            poster exited after \(exitedAt), gave up after \(ContinuousClock.now - started); handler: first \
            after the gate \(tally.times.withLock { $0.first.map { $0 - started } }.map { "\($0)" } ?? "never"), \
            latest \(tally.times.withLock { $0.latest.map { $0 - started } }.map { "\($0)" } ?? "never"); \
            \(hub.metrics); spool left: \(spoolFiles(in: directory))
            """)
        #expect(tally.indexes.values == Array(0..<Self.posts))
        #expect(tally.missed.count == 0)
        #expect(hub.metrics.sequenceGaps == 0)
    }

    @Test(
        "two hubs on one shared thread: one's handler blocks while 6,000 are posted to both; the other gets all, none missed"
    )
    func neighbourLosesNothing() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let group = LoopGroup(threads: 1)
        let blocking = try NotificationHub(
            endpoint: "blocking", transport: socketTransport("shared", directory, group: group))
        let neighbour = try NotificationHub(
            endpoint: "neighbour", transport: socketTransport("shared", directory, group: group))
        defer {
            blocking.close()
            neighbour.close()
        }
        let gate = ThreadGate()
        gate.close()
        let blocked = Signal()
        let blockingTally = ObserverTally()
        let neighbourTally = ObserverTally()
        let first = try blocking.addObserver(.of(HelperPing.self)) { ping, delivery in
            if ping.index == 0 {
                blocked.fire()
                gate.passThrough()
            }
            blockingTally.got(ping, delivery)
        }
        let second = try neighbour.addObserver(.of(HelperPing.self)) { ping, delivery in
            neighbourTally.got(ping, delivery)
        }
        defer {
            first.cancel()
            second.cancel()
        }
        let poster = try HelperProcess(["post-exit", directory, "\(Self.posts)", "1"])
        #expect(await blocked.wait(upTo: safetyNet))
        #expect(await poster.waitForExit() == 0, "\(poster.errors.values)")
        gate.open()
        for tally in [neighbourTally, blockingTally] {
            #expect(await tally.indexes.wait(forCount: Self.posts, upTo: safetyNet))
            #expect(tally.indexes.values == Array(0..<Self.posts))
            #expect(tally.missed.count == 0)
        }
    }

    @Test(
        "a notification of a name whose observer left while it waited in the socket is not waited for: the later ones arrive"
    )
    func unobservedNameIsNotWaitedFor() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let group = LoopGroup(threads: 1)
        let observer = try NotificationHub(
            endpoint: "observer", transport: socketTransport("shared", directory, group: group))
        let poster = try NotificationHub(endpoint: "poster", transport: SocketTransport(directory: directory))
        defer {
            observer.close()
            poster.close()
        }
        let gate = ThreadGate()
        gate.close()
        let blocked = Signal()
        let got = Collector<Int>()
        // A buffer of one: the socket hands it one at a time.
        let token = try observer.addObserver(.of(Ping.self), bufferingPolicy: .bufferingNewest(1)) { ping, _ in
            if ping.index == 0 {
                blocked.fire()
                gate.passThrough()
            }
            got.append(ping.index)
        }
        defer { token.cancel() }
        let leaving = try observer.addObserver(.of(Note.self)) { _, _ in }
        try poster.post(Ping(index: 0))
        #expect(await blocked.wait(upTo: safetyNet))
        // Received once the thread is free, after its observer left: its
        // name has room for nothing and nobody is backed up on it.
        try poster.post(Note(text: "for nobody by then"))
        leaving.cancel()
        for index in 1..<50 { try poster.post(Ping(index: index)) }
        gate.open()
        #expect(await got.wait(forCount: 50, upTo: safetyNet))
        #expect(got.values == Array(0..<50))
        #expect(observer.metrics.sequenceGaps == 0)
    }

    @Test("a sequence nobody reads does not hold up the hub's other names; read later, it has every one, in order")
    func unreadSequenceHoldsOnlyItsName() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try NotificationHub(
            endpoint: "observer", transport: socketTransport("shared", directory, group: LoopGroup(threads: 1)))
        let poster = try NotificationHub(endpoint: "poster", transport: SocketTransport(directory: directory))
        defer {
            observer.close()
            poster.close()
        }
        let unread = try observer.deliveries(.of(Ping.self), bufferingPolicy: .bufferingNewest(8))
        let notes = Collector<String>()
        let token = try observer.addObserver(.of(Note.self)) { note, _ in notes.append(note.text) }
        defer { token.cancel() }
        for index in 0..<500 {
            try poster.post(Ping(index: index))
            try poster.post(Note(text: "\(index)"))
        }
        // Every note, while the pings wait for a reader.
        #expect(await notes.wait(forCount: 500, upTo: safetyNet))
        #expect(notes.values == (0..<500).map { "\($0)" })
        var indexes: [Int] = []
        var missed = 0
        for await element in unread {
            indexes.append(element.notification.index)
            missed += element.delivery.missed
            if indexes.count == 500 { break }
        }
        #expect(indexes == Array(0..<500))
        #expect(missed == 0)
    }

    @Test(
        "a name keeps at most its bound (32 MiB; 2 MiB here) for a sequence nobody reads: the oldest beyond go, each told in missed, first-comers too"
    )
    func heldPerNameIsBounded() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        var configuration = SocketTransportConfiguration()
        configuration.sleepsInReceive = false
        configuration.loopGroup = LoopGroup(threads: 1)
        configuration.heldBytesPerName = 2 << 20
        let observer = try NotificationHub(
            endpoint: "observer", transport: SocketTransport(directory: directory, configuration: configuration))
        let first = try NotificationHub(endpoint: "first", transport: SocketTransport(directory: directory))
        let second = try NotificationHub(endpoint: "second", transport: SocketTransport(directory: directory))
        defer {
            observer.close()
            first.close()
            second.close()
        }
        let unread = try observer.deliveries(.of(LargePing.self), bufferingPolicy: .bufferingNewest(8))
        let notes = Collector<String>()
        let token = try observer.addObserver(.of(Note.self)) { note, _ in notes.append(note.text) }
        defer { token.cancel() }
        // The first poster fills the buffer; every one the second poster's
        // flood loses comes before its first delivered: only a report can
        // tell of those (a sequence gap never shows).
        for index in 0..<8 { try first.post(LargePing(poster: 1, index: index, filler: "")) }
        let posts = 100
        let filler = String(repeating: "x", count: 60_000)
        for index in 0..<posts { try second.post(LargePing(poster: 2, index: index, filler: filler)) }
        try second.post(Note(text: "after"))
        #expect(await notes.wait(forCount: 1, upTo: safetyNet))
        var indexes: [Int] = []
        var missed = 0
        for await element in unread {
            missed += element.delivery.missed
            if element.notification.poster == 2 { indexes.append(element.notification.index) }
            if element.notification.poster == 2, element.notification.index == posts - 1 { break }
        }
        // 2 MiB of 60 KB envelopes: about 34 kept, the oldest of them lost.
        #expect((25..<45).contains(indexes.count), "\(indexes.count) kept")
        #expect(indexes == Array((posts - indexes.count)..<posts))
        #expect(missed == posts - indexes.count)
    }
}

/// A notification of any size, for the memory bound.
struct LargePing: TypedNotification, Codable {
    static let name: NotificationName = "test.large-ping"
    var poster: Int
    var index: Int
    var filler: String
}
