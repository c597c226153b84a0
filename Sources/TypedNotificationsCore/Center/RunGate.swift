@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// The gate between a handler loop and synchronous cancellation: runs
/// ``RunGateStateMachine`` under a mutex and blocks cancellers outside it.
///
/// **The promise.** Once `close()` and then ``waitForRunInFlight(_:)`` return, no run of the handler
/// begins, for a caller on any thread or actor. A run that had passed the gate
/// when the caller closed it has either ended, or is the caller itself (a
/// handler cancelling its own observation), or had already begun its body:
/// see "why it cannot deadlock" below.
///
/// **Why it cannot deadlock.** A canceller blocks only to wait for a run that
/// is in flight on another thread, and only in three steps, each of which
/// rules a cycle out:
/// 1. A handler run is synchronous code on one thread between ``begin()`` and
///    ``end()``; it needs no other thread to finish, unless the handler itself
///    blocks (see below).
/// 2. A canceller on the run's own thread is that run (actor isolation lets
///    nothing else run on that thread meanwhile); it never waits.
/// 3. Cancellers that block are recorded, each with the thread it waits for, in
///    one table. A canceller does not block when the thread it would wait for is
///    itself blocked in a cancel: that thread is inside the handler body of the
///    run in question (the only user code between begin and end), so that
///    run's body has begun, and waiting for it could close a cycle (two
///    handlers cancelling each other). Every edge is added to the table only
///    towards a thread that is not blocked, under the table's lock, so the
///    waits never form a cycle.
///
/// What remains is a handler that blocks on something the canceller holds (a
/// lock, a `DispatchQueue.main.sync` while the canceller is the main thread):
/// the same deadlock as any blocking join, documented on
/// ``ObservationToken/cancel()``.
final class RunGate: Sendable {
    // Guards the gate's state: whether a run may begin, which thread runs, and
    // who waits. Held only to decide; events are signalled after it.
    private let machine = Locked(RunGateStateMachine<ThreadIdentity, OneShotEvent>())

    /// Whether the gate has been closed.
    var isClosed: Bool { machine.withLock { $0.isClosed } }

    /// Called by the handler loop right before the handler. Returns whether the
    /// handler may run; when it returns `true`, call ``end()`` after it.
    func begin() -> Bool {
        let thread = ThreadIdentity.current
        return machine.withLock { $0.begin(on: thread) }
    }

    /// Called by the handler loop right after the handler returned.
    func end() {
        let waiters = machine.withLock { $0.end() }
        for waiter in waiters { waiter.signal() }
    }

    /// What closing found: whether this call closed the gate, and the run in
    /// flight, if any, that a caller wanting the exact promise must wait for.
    struct Closing {
        let closedNow: Bool
        fileprivate let caller: ThreadIdentity
        fileprivate let runThread: ThreadIdentity?
    }

    /// Closes the gate: no run begins after this returns, but one that passed
    /// the gate on another thread may still be starting; see
    /// ``waitForRunInFlight(_:)``.
    func close() -> Closing {
        let caller = ThreadIdentity.current
        let outcome = machine.withLock { $0.close(caller: caller) }
        return Closing(closedNow: outcome.closedNow, caller: caller, runThread: outcome.mustWaitFor)
    }

    /// Blocks until the run that was in flight when the gate closed has ended,
    /// except where the type's documentation says waiting is not needed.
    func waitForRunInFlight(_ closing: Closing) {
        guard let runThread = closing.runThread else { return }
        let event = OneShotEvent()
        guard machine.withLock({ $0.addWaiter(event) }) else { return }
        BlockedCancellers.wait(for: event, releasedBy: runThread, caller: closing.caller)
    }
}

/// Which threads are blocked in a synchronous cancel, and for which thread's
/// run each waits. Process-wide, because handlers of different observations
/// can cancel each other.
private enum BlockedCancellers {
    // Guards the table; only ever held to read or change it.
    private static let table = Locked<[ThreadIdentity: ThreadIdentity]>([:])

    /// Blocks `caller` until `event` is signalled by the run on `runThread`,
    /// unless `runThread` is itself blocked in a cancel.
    static func wait(for event: OneShotEvent, releasedBy runThread: ThreadIdentity, caller: ThreadIdentity) {
        let mayBlock = table.withLock { blocked -> Bool in
            guard blocked[runThread] == nil else { return false }
            blocked[caller] = runThread
            return true
        }
        guard mayBlock else { return }
        event.wait()
        table.withLock { $0[caller] = nil }
    }
}
