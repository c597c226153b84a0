import Dispatch
import Testing

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

/// A notification whose decoder takes 200 µs: the adversary of a cancel that
/// checks its flag before decoding instead of right before the handler.
struct SlowPing: TypedNotification {
    static let name: NotificationName = "test.slow"
    var index: Int

    init(index: Int) {
        self.index = index
    }

    func encodePayload(into buffer: inout [UInt8]) throws {
        try index.encodePayload(into: &buffer)
    }

    init(payload bytes: UnsafeRawBufferPointer) throws {
        index = try Int(payload: bytes)
        let clock = ContinuousClock()
        let until = clock.now.advanced(by: .microseconds(200))
        while clock.now < until {}
    }
}

/// Where a handler runs in these tests.
enum Placement: String, CustomTestStringConvertible, Sendable {
    case executor, actor, main
    var testDescription: String { rawValue }
}

/// How the canceller ends the observation.
enum Ending: String, CustomTestStringConvertible, Sendable {
    /// `token.cancel()`.
    case cancel
    /// Releasing the last copy of the token.
    case release
    var testDescription: String { rawValue }
}

/// Fires a signal when released: here, when a handler loop ends and lets go of
/// the handler that captured it.
final class ReleaseSignal: Sendable {
    let released = Signal()
    deinit { released.fire() }
}

/// Registers a handler of ``SlowPing`` on `observer`, lets it run, and ends it
/// from another thread while it is decoding the next of a burst; then waits
/// for its loop to end. Returns how many of `rounds` saw a handler run begin
/// after the cancel (or the token's release) returned. With a `namespace`,
/// the handler observes it, and the burst goes to three names in it.
func lateRunsAfterSynchronousEnd<T: NotificationTransport>(
    poster: NotificationHub<T>,
    observer: NotificationHub<T>,
    placement: Placement,
    ending: Ending,
    rounds: Int,
    in namespace: NotificationNamespace? = nil
) async throws -> Int {
    let actor = Tally()
    var roundsWithLateRuns = 0
    for _ in 0..<rounds {
        let firstRun = Signal()
        let endReturned = Flag()
        let lateRuns = Counter()
        let slot = Slot<ObservationToken>()
        let loopEnded: Signal
        do {
            // Only the handler keeps this: it is released when the loop ends.
            let loopEnd = ReleaseSignal()
            loopEnded = loopEnd.released
            let handler: @Sendable () -> Void = { [loopEnd] in
                _ = loopEnd
                if endReturned.isSet { lateRuns.increment() }
                firstRun.fire()
            }
            switch placement {
            case .executor:
                if let namespace {
                    slot.set(
                        try observer.addObserver(.of(SlowPing.self, in: namespace), bufferingPolicy: .unbounded) {
                            _, _ in
                            handler()
                        })
                    break
                }
                slot.set(
                    try observer.addObserver(.of(SlowPing.self), bufferingPolicy: .unbounded) { _, _ in handler() })
            case .actor:
                slot.set(
                    try observer.addObserver(.of(SlowPing.self), bufferingPolicy: .unbounded, on: actor) { _, _, _ in
                        handler()
                    })
            case .main:
                slot.set(
                    try observer.addObserver(.of(SlowPing.self), bufferingPolicy: .unbounded, on: .main) { _, _ in
                        handler()
                    })
            }
        }
        for index in 0..<12 {
            guard let namespace else {
                try poster.post(SlowPing(index: index))
                continue
            }
            try poster.post(SlowPing(index: index), as: try NotificationName(validating: "\(namespace).n\(index % 3)"))
        }
        await firstRun.wait()
        // From a thread of the pool, never the handler's: synchronous code in
        // an async context, which must compile without `await`.
        await Task.detached {
            switch ending {
            case .cancel: slot.current?.cancel()
            case .release: slot.clear()
            }
            endReturned.set()
        }.value
        slot.clear()
        // Any late run would have happened by the time the loop has ended.
        await loopEnded.wait()
        if lateRuns.count > 0 { roundsWithLateRuns += 1 }
    }
    return roundsWithLateRuns
}

@Suite("Guarantee 3: a synchronous cancel is exact", .timeLimit(.minutes(10)))
struct SynchronousCancelTests {
    @Test(
        "no handler run begins after cancel() or the token's release returns, over the socket transport",
        arguments: [(Placement.executor, Ending.cancel), (.actor, .release), (.main, .cancel)])
    func socket(placement: Placement, ending: Ending) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try socketHub(directory, endpoint: "observer")
        let poster = try socketHub(directory, endpoint: "poster")
        let late = try await lateRunsAfterSynchronousEnd(
            poster: poster, observer: observer, placement: placement, ending: ending, rounds: 150)
        #expect(late == 0)
    }

    @Test(
        "no handler run begins after cancel() or the token's release returns, over the file transport",
        arguments: [(Placement.actor, Ending.cancel), (.executor, .release), (.main, .release)])
    func file(placement: Placement, ending: Ending) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try fileHub(directory, endpoint: "observer")
        let poster = try fileHub(directory, endpoint: "poster")
        let late = try await lateRunsAfterSynchronousEnd(
            poster: poster, observer: observer, placement: placement, ending: ending, rounds: 150)
        #expect(late == 0)
    }

    @Test("two handlers that cancel each other synchronously do not deadlock, and neither runs again")
    func mutualCancel() async throws {
        let hub = try makeHub()
        let first = BlockingActor()
        let second = BlockingActor()
        let firstToken = Slot<ObservationToken>()
        let secondToken = Slot<ObservationToken>()
        let firstIn = DispatchSemaphore(value: 0)
        let secondIn = DispatchSemaphore(value: 0)
        let done = Collector<String>()
        let runs = Counter()
        firstToken.set(
            try hub.addObserver(.of(Ping.self), on: first) { _, _, _ in
                runs.increment()
                firstIn.signal()
                secondIn.wait()
                // Both handlers are now in their bodies: cancel each other.
                secondToken.current?.cancel()
                done.append("first")
            })
        secondToken.set(
            try hub.addObserver(.of(Note.self), on: second) { _, _, _ in
                runs.increment()
                secondIn.signal()
                firstIn.wait()
                firstToken.current?.cancel()
                done.append("second")
            })
        try hub.post(Ping(index: 1))
        try hub.post(Note(text: "1"))
        await done.wait(forCount: 2)
        await firstToken.current?.cancelAndWait()
        await secondToken.current?.cancelAndWait()
        try hub.post(Ping(index: 2))
        try hub.post(Note(text: "2"))
        #expect(runs.count == 2)
        #expect(hub.metrics.activeObservers == 0)
        withExtendedLifetime((first, second)) {}
    }

    @Test("a handler that cancels another handler's token waits for that handler's run in flight")
    func handlerCancelsAnother() async throws {
        let hub = try makeHub()
        let slowActor = BlockingActor()
        let cancellingActor = BlockingActor()
        let slowEntered = Signal()
        let releaseSlow = DispatchSemaphore(value: 0)
        let slowFinished = Flag()
        let finishedBeforeCancelReturned = Collector<Bool>()
        let slowToken = try hub.addObserver(.of(Ping.self), on: slowActor) { _, _, _ in
            slowEntered.fire()
            releaseSlow.wait()
            slowFinished.set()
        }
        let cancellingToken = try hub.addObserver(.of(Note.self), on: cancellingActor) { _, _, _ in
            slowToken.cancel()
            finishedBeforeCancelReturned.append(slowFinished.isSet)
        }
        try hub.post(Ping(index: 1))
        await slowEntered.wait()
        try hub.post(Note(text: "cancel it"))
        // The cancelling handler has closed the gate; now let the slow run end.
        while !slowToken.isCancelled { await Task.yield() }
        releaseSlow.signal()
        await finishedBeforeCancelReturned.wait(forCount: 1)
        #expect(finishedBeforeCancelReturned.values == [true])
        await cancellingToken.cancelAndWait()
        withExtendedLifetime((slowActor, cancellingActor)) {}
    }
}

@Suite("The run gate as a state machine")
struct RunGateStateMachineTests {
    typealias Machine = RunGateStateMachine<Int, String>
    typealias Outcome = Machine.CloseOutcome

    @Test("an open gate lets one run through at a time; closing it stops the next")
    func openAndClose() {
        var gate = Machine()
        var steps: [String] = []
        steps.append("begin \(gate.begin(on: 1))")
        steps.append("end \(gate.end())")
        #expect(gate.close(caller: 2) == Outcome(closedNow: true, mustWaitFor: nil))
        steps.append("begin \(gate.begin(on: 1))")
        #expect(gate.isClosed)
        #expect(gate.close(caller: 2) == Outcome(closedNow: false, mustWaitFor: nil))
        #expect(steps == ["begin true", "end []", "begin false"])
    }

    @Test("closing during a run on another thread makes every canceller wait for its end")
    func closeDuringRun() {
        var gate = Machine()
        var steps: [String] = []
        steps.append("begin \(gate.begin(on: 1))")
        #expect(gate.close(caller: 2) == Outcome(closedNow: true, mustWaitFor: 1))
        #expect(gate.close(caller: 3) == Outcome(closedNow: false, mustWaitFor: 1))
        steps.append("wait \(gate.addWaiter("two"))")
        steps.append("wait \(gate.addWaiter("three"))")
        steps.append("end \(gate.end())")
        steps.append("wait \(gate.addWaiter("late"))")
        steps.append("begin \(gate.begin(on: 1))")
        #expect(
            steps == ["begin true", "wait true", "wait true", "end [\"two\", \"three\"]", "wait false", "begin false"])
    }

    @Test("a run that cancels its own observation does not wait for itself")
    func closeFromOwnRun() {
        var gate = Machine()
        var steps: [String] = []
        steps.append("begin \(gate.begin(on: 1))")
        #expect(gate.close(caller: 1) == Outcome(closedNow: true, mustWaitFor: nil))
        steps.append("end \(gate.end())")
        steps.append("begin \(gate.begin(on: 1))")
        #expect(steps == ["begin true", "end []", "begin false"])
    }
}
