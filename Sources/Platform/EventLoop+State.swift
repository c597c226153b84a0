import Foundation

// What an EventLoop keeps under its lock, and the values it passes around.

enum LoopJob: Sendable {
    case closure(@Sendable () -> Void)
    /// A task's job, and the loop it was enqueued on: it runs isolated to
    /// that loop's executor (one of those sharing a thread, or the thread's own).
    case task(UnownedJob, EventLoop)
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
    /// The loop sharing the thread that set it (see `EventLoop+Sharing`); 0 for the thread's own.
    var tenant: UInt64 = 0
}

/// One loop's handler for a descriptor of the thread. Loops sharing a
/// thread may watch the same descriptor (the process's change queue).
struct LoopHandler: Sendable {
    var tenant: UInt64
    var exclusive: Bool
    var body: @Sendable () -> Void
}

/// A descriptor another thread said is readable for one loop on this thread.
struct MarkedDescriptor: Hashable {
    var descriptor: CInt
    var tenant: UInt64
}

/// Descriptors marked readable, each once, in the order they were marked:
/// a thread carrying 500 loops is handed a mark for each of them at once
/// (a change of a directory they all watch), so membership is a set's.
struct MarkedDescriptors {
    private(set) var order: [MarkedDescriptor] = []
    private var members: Set<MarkedDescriptor> = []

    var isEmpty: Bool { order.isEmpty }

    mutating func insert(_ mark: MarkedDescriptor) {
        if members.insert(mark).inserted { order.append(mark) }
    }

    mutating func removeAll(of tenant: UInt64) {
        guard order.contains(where: { $0.tenant == tenant }) else { return }
        for mark in order where mark.tenant == tenant { members.remove(mark) }
        order.removeAll { $0.tenant == tenant }
    }

    /// Hands every mark over in `taken` (which must be empty), in order,
    /// trading buffers so that taking allocates nothing.
    mutating func take(into taken: inout [MarkedDescriptor]) {
        swap(&order, &taken)
        members.removeAll(keepingCapacity: true)
    }
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
    // Per descriptor, the handlers of the loops on this thread that watch it.
    var handlers: [CInt: [LoopHandler]] = [:]
    // A loop sharing a thread, once started: the descriptors it watches on
    // its host's, so that its stop removes them without a walk over every
    // loop's (200 µs to 3 ms with 500 loops on a thread).
    var watched: Set<CInt> = []
    var timers: [LoopTimer] = []
    var nextTimerNumber: UInt64 = 0
    // The loop's thread while it runs.
    var thread: ThreadIdentity?
    var isDraining = false
    // The loop is (about to be) blocked in the poller and nobody woke it yet.
    var isSleeping = false
    var wakePending = false
    // Descriptors another thread said are readable for this loop (see markReadable).
    var marked = MarkedDescriptors()
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

    /// The handler `tenant` registered for `descriptor`, if it still has one.
    func handler(_ descriptor: CInt, of tenant: UInt64) -> (@Sendable () -> Void)? {
        handlers[descriptor]?.first { $0.tenant == tenant }?.body
    }

    /// The handlers to call for `descriptor`, which the system says is
    /// readable: every one, except for a descriptor several loops watch
    /// exclusively (one change queue for the process), where one reads for
    /// all and hands the others their part with `markReadable`; that one
    /// goes to the back, so a loop being closed never holds the turn.
    mutating func takeReadyTenants(_ descriptor: CInt) -> [UInt64] {
        guard var list = handlers[descriptor], !list.isEmpty else { return [] }
        guard list.count > 1, list.contains(where: \.exclusive) else { return list.map(\.tenant) }
        let first = list.removeFirst()
        list.append(first)
        handlers[descriptor] = list
        return [first.tenant]
    }

    /// Removes `tenant`'s handler for `descriptor`, appending it to
    /// `removed` so that it is released after the lock (its last release
    /// may tear a transport's receiving state down); returns whether no
    /// loop watches the descriptor any more.
    mutating func removeHandler(_ descriptor: CInt, of tenant: UInt64, into removed: inout [LoopHandler]) -> Bool {
        guard let index = handlers.index(forKey: descriptor) else { return false }
        removed.append(contentsOf: handlers.values[index].lazy.filter { $0.tenant == tenant })
        handlers.values[index].removeAll { $0.tenant == tenant }
        guard handlers.values[index].isEmpty else { return false }
        handlers.remove(at: index)
        return true
    }

    mutating func takeDueTimers(now: UInt64) -> [LoopTimer] {
        guard timers.contains(where: { $0.deadline <= now }) else { return [] }
        let due = timers.filter { $0.deadline <= now }.sorted { $0.deadline < $1.deadline }
        timers.removeAll { $0.deadline <= now }
        return due
    }
}

extension EventLoop {
    /// What ``join(nanoseconds:)`` did.
    @_spi(TransportAuthoring) public enum JoinOutcome: Equatable, Sendable {
        /// The loop's thread has finished.
        case joined
        /// It had not finished in time.
        case timedOut
        /// Called on the loop's own thread, which cannot wait for itself.
        case refusedOnLoopThread
    }
}
