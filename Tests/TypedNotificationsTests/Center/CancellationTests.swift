import Dispatch
import Testing
import TypedNotifications

/// What happened when an observer was cancelled while its handler was running.
struct CancelOutcome {
    var runFinishedBeforeCancelReturned: Bool
    var runsAfterCancel: Int
}

/// Cancels an observer on `center` while its handler is blocked in a run, with
/// a second notification queued behind it; then posts a third. Works the same
/// on every center. `synchronously` cancels with the blocking `cancel()` from
/// a thread of the cooperative pool instead of `cancelAndWait()`.
func cancelDuringHandlerRun(
    on center: some TypedNotificationCenter,
    synchronously: Bool = false
) async throws -> CancelOutcome {
    let entered = Signal()
    let release = DispatchSemaphore(value: 0)
    let runFinished = Flag()
    let cancelReturned = Flag()
    let runsAfterCancel = Counter()
    // On its own thread, so blocking it cannot starve the cooperative pool.
    // Held here: a center holds the actor it runs a handler on weakly.
    let actor = BlockingActor()
    defer { withExtendedLifetime(actor) {} }
    let token = try center.addObserver(.of(Ping.self), on: actor) { _, _, _ in
        if cancelReturned.isSet { runsAfterCancel.increment() }
        entered.fire()
        release.wait()
        runFinished.set()
    }
    try center.post(Ping(index: 1))
    try center.post(Ping(index: 2))
    await entered.wait()

    let cancelAndLook: @Sendable () -> Bool = {
        // The run that was in flight must have finished before cancel returned.
        let finishedFirst = runFinished.isSet
        cancelReturned.set()
        return finishedFirst
    }
    let canceller = Task.detached {
        guard synchronously else {
            await token.cancelAndWait()
            return cancelAndLook()
        }
        // The blocking cancel holds its thread until this test releases the
        // handler, and this test needs a thread of the shared pool to do so:
        // on a thread of the pool it could hold the last free one.
        return try await offThePool {
            token.cancel()
            return cancelAndLook()
        }
    }
    // Let the canceller reach its wait: the token reports cancelled once
    // cancel's synchronous part has run.
    while !token.isCancelled { await Task.yield() }
    release.signal()
    let finishedFirst = try await canceller.value
    try center.post(Ping(index: 3))
    return CancelOutcome(runFinishedBeforeCancelReturned: finishedFirst, runsAfterCancel: runsAfterCancel.count)
}

@Suite("Guarantee 3: cancel never races the handler", .timeLimit(.minutes(10)))
struct CancellationTests {
    @Test(
        "cancelAndWait() and the blocking cancel() wait for a handler run in flight, and none runs after",
        arguments: [false, true])
    func cancelWaitsForRunningHandler(synchronously: Bool) async throws {
        let hub = try makeHub()
        let outcome = try await cancelDuringHandlerRun(on: hub, synchronously: synchronously)
        #expect(outcome.runFinishedBeforeCancelReturned)
        #expect(outcome.runsAfterCancel == 0)
        #expect(hub.metrics.activeObservers == 0)
    }

    @Test("cancel from inside the handler stops later runs without deadlock")
    func cancelFromInsideHandler() async throws {
        let hub = try makeHub()
        let runs = Collector<Int>()
        let slot = Slot<ObservationToken>()
        let token = try hub.addObserver(.of(Ping.self), bufferingPolicy: .unbounded) { note, _ in
            runs.append(note.index)
            if note.index == 2 { slot.current?.cancel() }
        }
        slot.set(token)
        for index in 1...10 { try hub.post(Ping(index: index)) }
        await runs.wait(forCount: 2)
        // Waiting on the loop's end proves the handler did not deadlock itself.
        await token.cancelAndWait()
        #expect(runs.values == [1, 2])
        #expect(token.isCancelled)
    }

    @Test("releasing the last copy of a token cancels the observer")
    func releasingTokenCancels() async throws {
        let hub = try makeHub()
        let runs = Counter()
        do {
            let token = try hub.addObserver(.of(Ping.self)) { _, _ in runs.increment() }
            #expect(hub.metrics.activeObservers == 1)
            _ = token
        }
        #expect(hub.metrics.activeObservers == 0)
        try hub.post(Ping(index: 1))
        // The transport no longer routes the name to this hub at all.
        #expect(hub.metrics.received == 0)
        #expect(runs.count == 0)
    }

    @Test("breaking out of for await removes the observer, even while the sequence lives")
    func breakRemovesObserver() async throws {
        let hub = try makeHub()
        let sequence = try hub.notifications(.of(Ping.self))
        try hub.post(Ping(index: 1))
        for await _ in sequence { break }
        #expect(hub.metrics.activeObservers == 0)
        try hub.post(Ping(index: 2))
        #expect(hub.metrics.received == 1)
        // A second iteration finds the observation over.
        var again = sequence.makeAsyncIterator()
        #expect(await again.next() == nil)
    }

    @Test("cancelling the iterating task ends the loop and removes the observer")
    func taskCancellationRemovesObserver() async throws {
        let hub = try makeHub()
        let sequence = try hub.notifications(.of(Ping.self))
        let firstSeen = Signal()
        let reader = Task {
            var count = 0
            for await _ in sequence {
                count += 1
                firstSeen.fire()
            }
            return count
        }
        try hub.post(Ping(index: 1))
        await firstSeen.wait()
        reader.cancel()
        #expect(await reader.value == 1)
        #expect(hub.metrics.activeObservers == 0)
    }

    @Test("a sequence released without being iterated removes its observer")
    func unusedSequenceRemovesObserver() throws {
        let hub = try makeHub()
        do {
            let sequence = try hub.notifications(.of(Ping.self))
            #expect(hub.metrics.activeObservers == 1)
            _ = sequence
        }
        #expect(hub.metrics.activeObservers == 0)
    }

    @Test("a sequence is single-pass: a second iterator ends at once, the first goes on")
    func secondIteratorEnds() async throws {
        let hub = try makeHub()
        let sequence = try hub.notifications(.of(Ping.self))
        var first = sequence.makeAsyncIterator()
        let second = Task {
            var iterator = sequence.makeAsyncIterator()
            return await iterator.next()
        }
        #expect(await second.value == nil)
        try hub.post(Ping(index: 1))
        #expect(await first.next()?.index == 1)
    }

    @Test("tokens compare by registration")
    func tokenIdentity() throws {
        let hub = try makeHub()
        let a = try hub.addObserver(.of(Ping.self)) { _, _ in }
        let b = try hub.addObserver(.of(Ping.self)) { _, _ in }
        let copy = a
        #expect(a == copy)
        #expect(a != b)
        #expect(Set([a, b, copy]).count == 2)
    }
}

@Suite("Guarantee 4: bounded buffers count what they drop", .timeLimit(.minutes(10)))
struct BufferingTests {
    @Test("bufferingNewest keeps the latest and reports the rest as missed")
    func newest() async throws {
        let hub = try makeHub()
        let sequence = try hub.deliveries(.of(Ping.self), bufferingPolicy: .bufferingNewest(3))
        for index in 0..<10 { try hub.post(Ping(index: index)) }
        var received: [(Int, Int)] = []
        for await delivered in sequence {
            received.append((delivered.notification.index, delivered.delivery.missed))
            if received.count == 3 { break }
        }
        #expect(received.map(\.0) == [7, 8, 9])
        #expect(received.map(\.1) == [7, 0, 0])
        #expect(sequence.dropped == 7)
        #expect(hub.metrics.dropped == 7)
    }

    @Test("bufferingOldest keeps the first and reports the dropped on the next delivery")
    func oldest() async throws {
        let hub = try makeHub()
        let sequence = try hub.deliveries(.of(Ping.self), bufferingPolicy: .bufferingOldest(2))
        for index in 0..<5 { try hub.post(Ping(index: index)) }
        var iterator = sequence.makeAsyncIterator()
        #expect(await iterator.next()?.notification.index == 0)
        #expect(await iterator.next()?.notification.index == 1)
        try hub.post(Ping(index: 5))
        let next = await iterator.next()
        #expect(next?.notification.index == 5)
        #expect(next?.delivery.missed == 3)
        #expect(hub.metrics.dropped == 3)
    }

    @Test("a handler's buffer follows its policy too")
    func handlerBuffer() async throws {
        let hub = try makeHub()
        let entered = Signal()
        let release = DispatchSemaphore(value: 0)
        let received = Collector<(Int, Int)>()
        let actor = BlockingActor()
        defer { withExtendedLifetime(actor) {} }
        let token = try hub.addObserver(.of(Ping.self), bufferingPolicy: .bufferingNewest(2), on: actor) {
            _, note, delivery in
            received.append((note.index, delivery.missed))
            if note.index == 0 {
                entered.fire()
                release.wait()
            }
        }
        try hub.post(Ping(index: 0))
        await entered.wait()
        // The handler is busy with 0; 1...6 queue behind it and 1...4 are dropped.
        for index in 1...6 { try hub.post(Ping(index: index)) }
        release.signal()
        await received.wait(forCount: 3)
        #expect(received.values.map(\.0) == [0, 5, 6])
        #expect(received.values.map(\.1) == [0, 4, 0])
        #expect(hub.metrics.dropped == 4)
        await token.cancelAndWait()
    }

    @Test("the default policy is bounded")
    func defaultIsBounded() {
        #expect(NotificationBufferingPolicy.default == .bufferingNewest(1024))
        #expect(NotificationBufferingPolicy.bufferingOldest(0) == .bufferingOldest(1))
    }
}

/// An object a handler captures, to watch it being released.
final class Witness: Sendable {
    let id = 1
}

@Suite("Guarantee 5: cancelled observers are released", .timeLimit(.minutes(10)))
struct LeakTests {
    @Test("notifications buffered for a dropped sequence are released")
    func bufferedValuesReleased() throws {
        let hub = try makeHub()
        weak var weakFrame: Frame?
        do {
            let sequence = try hub.notifications(.of(Frame.self))
            let frame = Frame(number: 1)
            weakFrame = frame
            try hub.post(frame)
            _ = sequence
        }
        #expect(weakFrame == nil)
    }

    @Test("a closed hub is released with its observers")
    func hubReleased() async throws {
        weak var weakHub: NotificationHub<InProcessTransport>?
        let token: ObservationToken
        do {
            let hub = try makeHub()
            weakHub = hub
            token = try hub.addObserver(.of(Ping.self)) { _, _ in }
        }
        #expect(weakHub == nil)
        #expect(token.isCancelled)
        await token.cancelAndWait()
    }
}
