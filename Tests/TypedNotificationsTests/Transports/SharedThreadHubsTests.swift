import Foundation
import Synchronization
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsSocket

/// Makes a hub of one local transport on `group`, never on a thread of its own.
private typealias HubMaker<T: NotificationTransport> =
    @Sendable (
        _ directory: String, _ endpoint: String, _ group: LoopGroup
    ) throws -> NotificationHub<T>

private let socketOnGroup: HubMaker<SocketTransport> = { directory, endpoint, group in
    var configuration = SocketTransportConfiguration()
    configuration.sleepsInReceive = false
    configuration.loopGroup = group
    return try socketHub(directory, endpoint: endpoint, configuration: configuration)
}

private let fileOnGroup: HubMaker<FileSignalTransport> = { directory, endpoint, group in
    var configuration = FileSignalConfiguration()
    configuration.sleepsInRead = false
    configuration.loopGroup = group
    return try fileHub(directory, endpoint: endpoint, configuration: configuration)
}

/// Counts a flooded observer's deliveries; the quiet one reads the count.
private final class FloodCount: Sendable {
    let handled = Atomic<Int>(0)
}

/// Hubs on one thread of a loop group each keep their own state, order and
/// failure: one failing or closing stops no other, and a flooded one delays
/// another by one handler slice, not by its backlog.
@Suite("Hubs sharing a thread", .timeLimit(.minutes(10)))
struct SharedThreadHubsTests {
    @Test("three hubs on one thread: one fails, one closes from inside its handler, the third goes on")
    func failingAndClosingHubs() async throws {
        try await failingAndClosing(socketOnGroup)
        try await failingAndClosing(fileOnGroup)
    }

    private func failingAndClosing<T: NotificationTransport>(_ make: HubMaker<T>) async throws {
        let failing = try makeTemporaryDirectory()
        let shared = try makeTemporaryDirectory()
        defer {
            removeDirectory(failing)
            removeDirectory(shared)
        }
        let group = LoopGroup(threads: 1)
        let doomed = try make(failing, "doomed", group)
        let closing = try make(shared, "closing", group)
        let going = try make(shared, "going", group)
        let poster = try make(shared, "poster", LoopGroup(threads: 1))
        defer {
            for hub in [doomed, closing, going, poster] { hub.close() }
        }
        let loops = [doomed, closing, going].compactMap { $0.transport.deliveryExecutor as? EventLoop }
        try #require(loops.count == 3)
        #expect(Set(loops.map(\.threadLoop)).count == 1)
        #expect(group.threadCount == 1)

        let doomedDeliveries = try doomed.deliveries(.of(Ping.self))
        let closedInHandler = Signal()
        let closingToken = try closing.addObserver(.of(Ping.self)) { _, _ in
            closing.close()
            closedInHandler.fire()
        }
        defer { closingToken.cancel() }
        let got = Collector<Int>()
        let goingToken = try going.addObserver(.of(Ping.self), bufferingPolicy: .unbounded) { ping, _ in
            got.append(ping.index)
        }
        defer { goingToken.cancel() }

        // Another process removes the first hub's directory: it fails.
        let removal = try HelperProcess(["-rf", failing], executable: "/bin/rm")
        #expect(await removal.waitForExit() == 0)
        for await _ in doomedDeliveries {}
        #expect(doomed.failure?.code == .transportFailure)

        try poster.post(Ping(index: 0))
        #expect(await closedInHandler.wait(upTo: safetyNet))
        await closing.closed()
        for index in 1...100 { try poster.post(Ping(index: index)) }
        #expect(await got.wait(forCount: 101, upTo: safetyNet))
        #expect(got.values == Array(0...100))
        #expect(going.failure == nil)
    }

    @Test("a hub flooded with slow handlers delays another on its thread by a slice, not by its backlog")
    func floodedNeighbour() async throws {
        try await floodedNeighbour(socketOnGroup)
        try await floodedNeighbour(fileOnGroup)
    }

    private func floodedNeighbour<T: NotificationTransport>(_ make: HubMaker<T>) async throws {
        let flooded = try makeTemporaryDirectory()
        let quiet = try makeTemporaryDirectory()
        defer {
            removeDirectory(flooded)
            removeDirectory(quiet)
        }
        let group = LoopGroup(threads: 1)
        let busy = try make(flooded, "busy", group)
        let calm = try make(quiet, "calm", group)
        let floodPoster = try make(flooded, "flood-poster", LoopGroup(threads: 1))
        let calmPoster = try make(quiet, "calm-poster", LoopGroup(threads: 1))
        defer {
            for hub in [busy, calm, floodPoster, calmPoster] { hub.close() }
        }
        let count = FloodCount()
        let total = 2_000
        let busyToken = try busy.addObserver(.of(Ping.self), bufferingPolicy: .unbounded) { _, _ in
            // Work, not synchronisation: each delivery holds the thread 1 ms.
            usleep(1_000)
            count.handled.add(1, ordering: .relaxed)
        }
        defer { busyToken.cancel() }
        let seenAt = Collector<Int>()
        let calmToken = try calm.addObserver(.of(Ping.self)) { _, _ in
            seenAt.append(count.handled.load(ordering: .relaxed))
        }
        defer { calmToken.cancel() }
        for index in 0..<total { try floodPoster.post(Ping(index: index)) }
        // The flood has begun on the shared thread.
        #expect(await waitUntil { count.handled.load(ordering: .relaxed) > 0 })
        let atPost = count.handled.load(ordering: .relaxed)
        try calmPoster.post(Ping(index: 0))
        #expect(await seenAt.wait(forCount: 1, upTo: safetyNet))
        // Two seconds of backlog were queued; the quiet hub waited for a
        // slice of them (1 ms of handlers, plus the one running), not for all.
        let behind = (seenAt.values.first ?? total) - atPost
        #expect(behind < 100, "the quiet hub's handler ran \(behind) flood deliveries after its post")
        #expect(calm.failure == nil && busy.failure == nil)
    }
}
