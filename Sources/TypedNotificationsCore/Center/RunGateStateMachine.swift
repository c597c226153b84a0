/// Whether a handler run may begin, and who waits for the run in flight, as a
/// pure state machine.
///
/// No locks, no threads, no I/O: ``RunGate`` runs it under a mutex and carries
/// out what it returns, so every transition can be tested with plain values.
/// `Thread` identifies a thread; `Waiter` is what a canceller blocks on until
/// the run in flight ends.
///
/// The gate is what makes a synchronous cancel exact. A handler loop calls
/// ``begin(on:)`` after decoding a notification, immediately before calling
/// the handler, and ``end()`` right after. Closing and beginning are decided
/// under one lock, so either the run began before the gate closed (and the
/// canceller can wait for it to end) or it sees the gate closed and never calls
/// the handler.
struct RunGateStateMachine<Thread: Equatable, Waiter> {
    private enum State {
        /// No run in flight; a run may begin.
        case open
        /// A run began on this thread and has not ended.
        case running(Thread)
        /// Cancelled; no run in flight, and none will begin.
        case closed
        /// Cancelled while a run on this thread was in flight; the waiters are
        /// released when it ends.
        case closing(Thread, waiters: [Waiter])
    }

    private var state = State.open

    /// Whether the gate has been closed.
    var isClosed: Bool {
        switch state {
        case .open, .running: false
        case .closed, .closing: true
        }
    }

    /// A run wants to begin on `thread`. Returns whether it may.
    mutating func begin(on thread: Thread) -> Bool {
        switch state {
        case .open:
            state = .running(thread)
            return true
        case .closed, .closing:
            return false
        case .running:
            // One loop per observation calls begin and end in turn.
            preconditionFailure("a handler run began while another was in flight")
        }
    }

    /// The run in flight has ended. Returns the waiters to release.
    mutating func end() -> [Waiter] {
        switch state {
        case .running:
            state = .open
            return []
        case .closing(_, let waiters):
            state = .closed
            return waiters
        case .open, .closed:
            preconditionFailure("a handler run ended that had not begun")
        }
    }

    /// What ``close(caller:)`` found.
    struct CloseOutcome: Equatable {
        /// Whether this call closed the gate (the first close does).
        var closedNow: Bool
        /// The thread of a run still in flight that the caller must wait for
        /// before it may say that no run will begin: `nil` when there is none,
        /// or when the caller is that run.
        var mustWaitFor: Thread?
    }

    /// Closes the gate on behalf of a caller on `caller`'s thread.
    mutating func close(caller: Thread) -> CloseOutcome {
        switch state {
        case .open:
            state = .closed
            return CloseOutcome(closedNow: true, mustWaitFor: nil)
        case .running(let thread):
            state = .closing(thread, waiters: [])
            return CloseOutcome(closedNow: true, mustWaitFor: thread == caller ? nil : thread)
        case .closing(let thread, _):
            return CloseOutcome(closedNow: false, mustWaitFor: thread == caller ? nil : thread)
        case .closed:
            return CloseOutcome(closedNow: false, mustWaitFor: nil)
        }
    }

    /// Adds a waiter to release when the run in flight ends. Returns `false`
    /// if that run has ended already, so there is nothing to wait for.
    mutating func addWaiter(_ waiter: Waiter) -> Bool {
        guard case .closing(let thread, var waiters) = state else { return false }
        // Released before appending, so the array is uniquely referenced.
        state = .closed
        waiters.append(waiter)
        state = .closing(thread, waiters: waiters)
        return true
    }
}
