import Foundation

// What an EventLoop keeps under its lock, and the values it passes around.

enum LoopJob: Sendable {
    case closure(@Sendable () -> Void)
    case task(UnownedJob)
}

enum PushAction {
    case none
    case wake
    case drain
}

struct LoopTimer: Sendable {
    let deadline: UInt64
    let body: @Sendable () -> Void
    /// For ``EventLoop/cancelTimer(_:)``; 0 for a timer that cannot be cancelled.
    var number: UInt64 = 0
}

enum LoopPhase: Equatable {
    case created
    case running
    case stopping
    case stopped
}

struct LoopState {
    var phase = LoopPhase.created
    var jobs: [LoopJob] = []
    var handlers: [CInt: @Sendable () -> Void] = [:]
    var timers: [LoopTimer] = []
    var nextTimerNumber: UInt64 = 0
    // The loop's thread while it runs.
    var thread: ThreadIdentity?
    var isDraining = false
    // The loop is (about to be) blocked in the poller and nobody woke it yet.
    var isSleeping = false
    var wakePending = false
    // Descriptors another thread said are readable for this loop (see markReadable).
    var marked: [CInt] = []
    // What runs once the thread has finished (see whenFinished).
    var finishers: [@Sendable () -> Void] = []

    /// Whether `caller` must wake the poller: only when the loop sleeps,
    /// once per sleep, and never from the loop's own thread. That thread
    /// looks at its jobs and timers before it sleeps again; and a loop
    /// that waits in a receive call of its driver's handles what it
    /// received inside that call, while it still counts as asleep, so a
    /// wake-up from there would only make its next receive return at once.
    mutating func takeWakeUp(from caller: ThreadIdentity) -> Bool {
        guard isSleeping, !wakePending, caller != thread else { return false }
        wakePending = true
        return true
    }

    func timeoutMilliseconds(now: UInt64) -> CInt {
        guard let next = timers.lazy.map(\.deadline).min() else { return -1 }
        guard next > now else { return 0 }
        // Rounded up, so a timer never fires early.
        return CInt(min((next - now + 999_999) / 1_000_000, 60_000))
    }

    mutating func takeDueTimers(now: UInt64) -> [LoopTimer] {
        guard timers.contains(where: { $0.deadline <= now }) else { return [] }
        let due = timers.filter { $0.deadline <= now }.sorted { $0.deadline < $1.deadline }
        timers.removeAll { $0.deadline <= now }
        return due
    }
}
