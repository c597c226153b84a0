import Foundation
import Testing
import TypedNotificationsCatalog
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

/// The transports with a receiving thread of their own, whose event loop
/// runs the center's executor: every one but the in-process transport,
/// which hands values over on the poster's thread. The contract suite's
/// variants (a long directory, no credentials, no change events) run the
/// same loop.
let loopTransports = ContractTransport.available.filter {
    $0.entry.name != TransportEntry.inProcess.name && !$0.entry.isVariant && $0.directoryLength == nil
}

/// Those of them whose thread is woken by what it receives (a socket, a
/// change event, a Redis reply): their receiving costs no hand-off. The
/// envelope loopback's poster queues each envelope on the receiving thread
/// as a job, one hand-off per notification by design.
let receivingLoopTransports = loopTransports.filter { $0.entry.crossesProcesses }

// Each body below posts and observes on one hub (`observer`): what it
// posts comes back to it through its transport, as from another process.

/// The event loop `hub`'s transport receives on.
func receivingLoop<T: NotificationTransport>(_ hub: NotificationHub<T>) throws -> EventLoop {
    try #require(hub.transport.deliveryExecutor as? EventLoop)
}

private struct SequenceOnLoop: ContractBody {
    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let loop = try receivingLoop(observer)
        let hub = observer
        let sequence = try hub.notifications(.of(Ping.self))
        let consumer = Task(executorPreference: hub.executor.taskExecutor) {
            var seen: [(Int, Bool)] = []
            for await note in sequence {
                seen.append((note.index, loop.isCurrent))
                if seen.count == 100 { break }
            }
            return seen
        }
        for index in 0..<100 { try hub.post(Ping(index: index)) }
        let seen = await consumer.value
        #expect(seen.map(\.0) == Array(0..<100))
        #expect(seen.allSatisfy { $0.1 })
    }
}

private struct SlowHandlerDoesNotStarveOthers: ContractBody {
    let holdsHandler = true

    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let received: @Sendable () -> Int = { observer.metrics.received }
        let hub = observer
        let backlogPosted = OneShotEvent()
        let calls = Counter()
        let receivedAtCall = Collector<(call: Int, received: Int)>()
        let slow = try hub.addObserver(.of(Ping.self)) { _, _ in
            calls.increment()
            // The first call lasts until a backlog of 300 is posted; every
            // later one takes longer than the 1 ms the transport's thread
            // gives handlers before it receives again.
            if calls.count == 1 { backlogPosted.wait() } else { Thread.sleep(forTimeInterval: 0.002) }
            receivedAtCall.append((calls.count, received()))
        }
        for index in 0..<300 { try hub.post(Ping(index: index)) }
        backlogPosted.signal()
        // While the handler works through its backlog, a poster goes on at
        // one post a millisecond (a producer's pace, not a synchronization).
        let producer = Thread {
            for index in 300..<600 {
                try? hub.post(Ping(index: index))
                Thread.sleep(forTimeInterval: 0.001)
            }
        }
        producer.start()
        await receivedAtCall.wait(forCount: 150)
        slow.cancel()
        // Had the thread run the handler's backlog through before receiving
        // again, the count would stand still from the second call to the
        // 257th at least (the backlog a first read takes); it keeps rising
        // with the poster instead. The 150th call leaves room for a server
        // that answers a read late under load (over Redis, reading resumes
        // once the backlog has room, and took 200 ms once in CI).
        let values = receivedAtCall.values
        #expect(values[149].received > values[1].received + 10)
    }
}

private struct CloseFromHandler: ContractBody {
    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let loop = try receivingLoop(observer)
        let close: @Sendable () -> Void = { observer.close() }
        let hub = observer
        let closed = Signal()
        let onLoop = Flag()
        let token = try hub.addObserver(.of(Ping.self)) { _, _ in
            if loop.isCurrent { onLoop.set() }
            close()
            closed.fire()
        }
        try hub.post(Ping(index: 0))
        #expect(await closed.wait(upTo: safetyNet))
        #expect(onLoop.isSet)
        #expect(throws: TypedNotificationError.self) { try hub.post(Ping(index: 1)) }
        token.cancel()
    }
}

private struct SyncCancelOnLoop: ContractBody {
    let holdsHandler = true

    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let hub = observer
        let started = Signal()
        let cancelled = Flag()
        let ranAfterCancel = Counter()
        let token = try hub.addObserver(.of(Ping.self)) { _, _ in
            if cancelled.isSet { ranAfterCancel.increment() }
            started.fire()
            Thread.sleep(forTimeInterval: 0.001)
        }
        for index in 0..<2000 { try hub.post(Ping(index: index)) }
        await started.wait()
        await Task.detached {
            token.cancel()
            cancelled.set()
        }.value
        // Anything still queued on the loop has had its chance to run.
        let probe = try hub.addObserver(.of(Note.self)) { _, _ in }
        try hub.post(Note(text: "probe"))
        let drained = Signal()
        let last = try hub.addObserver(.of(Note.self)) { _, _ in drained.fire() }
        try hub.post(Note(text: "last"))
        #expect(await drained.wait(upTo: safetyNet))
        #expect(ranAfterCancel.count == 0)
        probe.cancel()
        last.cancel()
    }
}

private struct HandlerOnLoop: ContractBody {
    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let loop = try receivingLoop(observer)
        let hub = observer
        let seen = Collector<(Int, Bool)>()
        let token = try hub.addObserver(.of(Ping.self)) { note, _ in seen.append((note.index, loop.isCurrent)) }
        try hub.post(Ping(index: 0))
        await seen.wait(forCount: 1)
        // From here on the loop gets work only from what it receives, never
        // from a thread of the pool handing it a handler's job.
        let handOffsBefore = loop.handOffs
        // One at a time, so that each finds the handler waiting.
        for index in 1..<200 {
            try hub.post(Ping(index: index))
            await seen.wait(forCount: index + 1)
        }
        #expect(loop.handOffs - handOffsBefore < 10)
        #expect(seen.values.map(\.0) == Array(0..<200))
        #expect(seen.values.allSatisfy { $0.1 })
        token.cancel()
    }
}

@Suite("The transport's thread runs the center's executor", .timeLimit(.minutes(10)))
struct DeliveryExecutorTests {
    @Test(
        "a handler on the center's executor runs on the transport's receiving thread",
        arguments: receivingLoopTransports)
    func handlerOnLoop(_ kind: ContractTransport) async throws {
        try await runContract(kind, HandlerOnLoop())
    }

    @Test(
        "a for-await loop in a task that prefers the center's task executor runs there",
        arguments: loopTransports)
    func sequenceOnLoop(_ kind: ContractTransport) async throws {
        try await runContract(kind, SequenceOnLoop())
    }

    @Test(
        "a slow handler on the executor holds up receiving for others by one call, not by its backlog",
        arguments: loopTransports)
    func slowHandlerDoesNotStarveOthers(_ kind: ContractTransport) async throws {
        try await runContract(kind, SlowHandlerDoesNotStarveOthers())
    }

    @Test(
        "closing the center from a handler on its executor returns: the thread does not wait for itself",
        arguments: loopTransports)
    func closeFromHandler(_ kind: ContractTransport) async throws {
        try await runContract(kind, CloseFromHandler())
    }

    @Test(
        "after a synchronous cancel returns, no run of the handler starts, though it ran on the transport's thread",
        arguments: loopTransports)
    func syncCancelOnLoop(_ kind: ContractTransport) async throws {
        try await runContract(kind, SyncCancelOnLoop())
    }
}
