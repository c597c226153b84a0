import CTypedNotifications
import Foundation
import Synchronization

/// One thread that waits for descriptors, fires timers and runs jobs, in that
/// rhythm, until it is stopped: the I/O thread of a transport.
///
/// It is also a serial executor and a task executor. An actor whose executor
/// it is runs its jobs on this thread, so a message the thread receives is
/// handed to such an actor without waking another thread: the job it enqueues
/// runs on this thread as soon as the current I/O handler returns. Jobs run
/// one at a time, in the order they were enqueued.
///
/// Jobs get a time slice of ``jobSliceNanoseconds`` (1 ms) before the thread
/// looks at its descriptors again, so I/O waits at most for one slice plus the
/// job that was running when it ended.
///
/// Stopping ends the I/O and the timers, never the jobs: jobs still queued,
/// and jobs enqueued later, run one at a time on a thread of the system's
/// shared pool, so a task waiting on this executor is never stranded.
///
/// The thread never waits for itself: ``join(nanoseconds:)`` there is a
/// programming error; ``stopAndJoin(nanoseconds:)`` skips the wait there.
///
/// How the thread waits when it has nothing to run is its creator's choice
/// (``LoopWaiting``): in the system's event queue for any number of
/// descriptors, or in a receive call of the creator's own.
@_spi(TransportAuthoring) public final class EventLoop: SerialExecutor, TaskExecutor, @unchecked Sendable {
    // Sendable: the one mutable field, `guarded`, is touched only inside
    // `state(_:)`, between lock and unlock of `mutex` (a pthread mutex,
    // which ThreadSanitizer sees); `waiting` is immutable: its poller is
    // used for `add`/`remove`/`wake`, which the kernel makes safe from any
    // thread, and for `wait`, which only the loop's thread calls; its
    // closures are `@Sendable`, and `receive` runs only on the loop's thread.
    // `host`, `tenant` and `group` are immutable (`group` a weak reference,
    // which the runtime reads atomically); the counters are atomics; a loop
    // sharing a thread keeps its own pending work in its own `guarded`,
    // under its own `mutex`, and reaches its host's only through the host's
    // methods, which take the host's lock.

    /// How long queued jobs may run before the loop looks at its descriptors.
    package static let jobSliceNanoseconds: UInt64 = 1_000_000

    /// The name of the loop's thread.
    @_spi(TransportAuthoring) public let name: String

    private let waiting: Waiting
    /// For a loop sharing a thread of the ``LoopGroup``: that thread's
    /// loop, which runs its handlers, timers and jobs; `nil` for a loop with
    /// a thread of its own.
    let host: EventLoop?
    /// This loop's number on its host's thread; 0 for a thread's own loop.
    let tenant: UInt64
    /// For a thread's own loop made by a ``LoopGroup``: that group, told
    /// when a loop sharing the thread leaves.
    weak let group: LoopGroup?
    private let mutex = SystemMutex()
    private var guarded = LoopState()
    let handOffCount = Atomic<Int>(0)
    // The thread running the loop's jobs now (its own thread, or once
    // stopped the one draining them), as ThreadIdentity.rawValue; 0: none.
    // Only that thread writes its own identity and clears it, so a thread
    // that reads its own identity here is that thread (no lock needed).
    let jobThread = Atomic<UInt>(0)
    // When the first handler since the loop last ran its jobs ran inline
    // (see `mayRunHandlerInline()`); 0 when none has. Only the loop's thread
    // reads and writes it.
    let inlineStart = Atomic<UInt64>(0)
    // Whether the loop's thread is running jobs or an inline handler now.
    // Only the loop's thread reads and writes it.
    let runsHandlers = Atomic<Bool>(false)
    let finished = OneShotEvent()
    // The receive storage of this thread's loops, made by the first that
    // asks (see ``datagramStorage()``); kept on the thread's own loop.
    let sharedStorage = Locked<DatagramStorage?>(nil)

    /// Creates a loop whose thread waits as `waiting` says; the thread
    /// starts with ``start()``.
    ///
    /// The corresponding C functions, for ``LoopWaiting/events``, are
    /// `epoll_create1` and `eventfd` (Linux) or `kqueue` (Apple platforms).
    @_spi(TransportAuthoring) public convenience init(name: String, waiting: LoopWaiting = .events) throws(Errno) {
        try self.init(name: name, waiting: waiting, group: nil)
    }

    /// A loop with a thread of its own; `group` made it to share.
    init(name: String, waiting: LoopWaiting, group: LoopGroup?) throws(Errno) {
        self.name = name
        host = nil
        tenant = 0
        self.group = group
        switch waiting.kind {
        case .events:
            self.waiting = .events(try EventPoller())
        case .receiving(let receive, let wake):
            self.waiting = .receiving(receive: receive, wake: wake)
        }
    }

    /// A loop on `host`'s thread, numbered `tenant` there (see
    /// `EventLoop+Sharing`).
    init(name: String, sharing host: EventLoop, tenant: UInt64) {
        self.name = name
        self.host = host
        self.tenant = tenant
        group = nil
        waiting = .shared
    }

    deinit {
        // A loop sharing a thread that was never stopped: its handlers and
        // timers must not outlive it there.
        if let host { host.removeTenant(tenant, watching: guarded.watched) }
        mutex.deallocate()
    }

    func state<Result>(_ body: (inout LoopState) -> Result) -> Result {
        mutex.lock()
        defer { mutex.unlock() }
        return body(&guarded)
    }

    /// Starts the loop's thread. Has no effect after the first call.
    @_spi(TransportAuthoring) public func start() {
        guard host == nil else { return startTenant() }
        let starts = state { state in
            guard case .created = state.phase else { return false }
            state.phase = .running
            return true
        }
        guard starts else { return }
        let thread = Thread { [self] in self.run() }
        thread.name = name
        thread.start()
    }

    /// How many jobs other threads handed to the loop; what the loop's own
    /// thread enqueues (a handler's job, resumed by the message it just
    /// received) is not counted, and never needs a wake-up.
    package var handOffs: Int { handOffCount.load(ordering: .relaxed) }

    /// Whether the calling thread may run a handler inline, now, from the
    /// I/O it is handling: it is this loop's thread, and inline handlers
    /// have run for less than ``jobSliceNanoseconds`` since the loop last
    /// ran its jobs, so the loop looks at its jobs and I/O again as soon as
    /// it would with the handlers queued as jobs.
    ///
    /// Never while the loop runs its jobs or another inline handler: a
    /// handler that posts to a transport delivering on the calling thread
    /// does not have a second handler run inside it.
    package func mayRunHandlerInline() -> Bool {
        let loop = host ?? self
        guard loop.jobThread.load(ordering: .relaxed) == ThreadIdentity.current.rawValue,
            !loop.runsHandlers.load(ordering: .relaxed)
        else { return false }
        let now = SystemClock.monotonicNanoseconds()
        let start = loop.inlineStart.load(ordering: .relaxed)
        if start == 0 {
            loop.inlineStart.store(now, ordering: .relaxed)
            return true
        }
        return now &- start < Self.jobSliceNanoseconds
    }

    /// Runs `handler`, inline, on the loop's thread (see
    /// ``mayRunHandlerInline()``), marked as running handlers meanwhile.
    package func runInline(_ handler: () -> Void) {
        let loop = host ?? self
        loop.runsHandlers.store(true, ordering: .relaxed)
        handler()
        loop.runsHandlers.store(false, ordering: .relaxed)
    }

    /// Whether the calling thread is the one running this loop's jobs now:
    /// the loop's own thread, or, once stopped, the pool thread draining them.
    @_spi(TransportAuthoring) public var isCurrent: Bool {
        (host ?? self).jobThread.load(ordering: .relaxed) == ThreadIdentity.current.rawValue
    }

    /// Calls `handler` on the loop's thread whenever `descriptor` is readable,
    /// until ``deregister(_:)``. The caller keeps the descriptor open until then.
    /// With `exclusive`, for a descriptor other loops watch too, an event
    /// wakes one of them rather than all (see `DirectoryMonitor`).
    ///
    /// A loop that waits in a receive call of its own
    /// (``LoopWaiting/receiving(_:wake:)``) watches no descriptor: it refuses
    /// with `EOPNOTSUPP`.
    @_spi(TransportAuthoring) public func register(
        _ descriptor: CInt, exclusive: Bool = false, onReadable handler: @escaping @Sendable () -> Void
    ) -> Result<Void, Errno> {
        if host != nil { return registerAsTenant(descriptor, exclusive: exclusive, onReadable: handler) }
        return register(descriptor, for: 0, exclusive: exclusive, onReadable: handler)
    }

    /// Registers `tenant`'s handler; the system's event queue learns of the
    /// descriptor when the first loop on this thread watches it.
    func register(
        _ descriptor: CInt, for tenant: UInt64, exclusive: Bool, onReadable handler: @escaping @Sendable () -> Void
    ) -> Result<Void, Errno> {
        guard case .events(let poller) = waiting else { return .failure(Errno(rawValue: EOPNOTSUPP)) }
        // A handler replaced, or removed on failure, is released after the lock.
        var replaced: [LoopHandler] = []
        let added = LoopHandler(tenant: tenant, exclusive: exclusive, body: handler)
        let isFirst = state { state -> Bool in
            // In place: every loop on a thread watches the process's change queue.
            guard let index = state.handlers.index(forKey: descriptor) else {
                state.handlers[descriptor] = [added]
                return true
            }
            replaced.append(contentsOf: state.handlers.values[index].lazy.filter { $0.tenant == tenant })
            state.handlers.values[index].removeAll { $0.tenant == tenant }
            state.handlers.values[index].append(added)
            return state.handlers.values[index].count == 1
        }
        guard isFirst else { return .success(()) }
        let result = poller.add(descriptor, exclusive: exclusive)
        if case .failure = result {
            state { _ = $0.removeHandler(descriptor, of: tenant, into: &replaced) }
        }
        withExtendedLifetime(replaced) {}
        return result
    }

    /// Stops watching `descriptor`; its handler is not called again once this returns
    /// on the loop's thread, or after the handler running now on another.
    @_spi(TransportAuthoring) public func deregister(_ descriptor: CInt) {
        if let host {
            var removed: [LoopHandler] = []
            state { state in
                _ = state.removeHandler(descriptor, of: tenant, into: &removed)  // not started yet
                state.watched.remove(descriptor)
            }
            withExtendedLifetime(removed) {}
            return host.deregister(descriptor, for: tenant)
        }
        deregister(descriptor, for: 0)
    }

    func deregister(_ descriptor: CInt, for tenant: UInt64) {
        // The handler is released after the lock.
        var removed: [LoopHandler] = []
        if state({ $0.removeHandler(descriptor, of: tenant, into: &removed) }) { removeFromPoller(descriptor) }
        withExtendedLifetime(removed) {}
    }

    /// The system's event queue stops watching `descriptor`.
    func removeFromPoller(_ descriptor: CInt) {
        if case .events(let poller) = waiting { poller.remove(descriptor) }
    }

    /// Runs `descriptor`'s handler on the loop's thread soon, as if the
    /// descriptor had become readable: for a descriptor that several loops
    /// share (the process's change queue), whose event another loop read
    /// for this one. I/O, not a job: it is not counted in ``handOffs``.
    package func markReadable(_ descriptor: CInt) {
        (host ?? self).markReadable(descriptor, for: tenant)
    }

    func markReadable(_ descriptor: CInt, for tenant: UInt64) {
        let current = ThreadIdentity.current
        let mark = MarkedDescriptor(descriptor: descriptor, tenant: tenant)
        let wakes = state { state -> Bool in
            guard state.handler(descriptor, of: tenant) != nil else { return false }
            state.marked.insert(mark)
            return state.takeWakeUp(from: current)
        }
        if wakes { wake() }
    }

    /// Runs `body` on the loop's thread once `nanoseconds` have passed. Timers
    /// end when the loop stops.
    @_spi(TransportAuthoring) public func schedule(after nanoseconds: UInt64, _ body: @escaping @Sendable () -> Void) {
        if host != nil {
            _ = scheduleAsTenant(after: nanoseconds, cancellable: false, body)
            return
        }
        add(LoopTimer(deadline: SystemClock.monotonicNanoseconds() &+ nanoseconds, body: body))
    }

    /// Like ``schedule(after:_:)``, but returns a number that
    /// ``cancelTimer(_:)`` takes, to end the timer before it fires: a
    /// deadline that moved away then wakes nobody.
    @_spi(TransportAuthoring) public func scheduleCancellable(
        after nanoseconds: UInt64, _ body: @escaping @Sendable () -> Void
    ) -> UInt64 {
        if host != nil { return scheduleAsTenant(after: nanoseconds, cancellable: true, body) }
        let deadline = SystemClock.monotonicNanoseconds() &+ nanoseconds
        let number = state { state -> UInt64 in
            state.nextTimerNumber &+= 1
            return state.nextTimerNumber
        }
        add(LoopTimer(deadline: deadline, body: body, number: number))
        return number
    }

    /// Adds a timer to this thread's, waking it when it sleeps.
    func add(_ timer: LoopTimer) {
        let current = ThreadIdentity.current
        let wakes = state { state in
            state.timers.append(timer)
            return state.takeWakeUp(from: current)
        }
        if wakes { wake() }
    }

    /// Ends the timer ``scheduleCancellable(after:_:)`` numbered `number`,
    /// unless it fired already. Cancelled on the loop's own thread, before
    /// the loop sleeps again, it wakes nobody; from another thread, a loop
    /// already asleep may still wake once at its deadline, and find nothing.
    @_spi(TransportAuthoring) public func cancelTimer(_ number: UInt64) {
        if let host {
            state { state in state.timers.removeAll { $0.number == number } }  // not started yet
            return host.cancelTimer(number)
        }
        state { state in state.timers.removeAll { $0.number == number } }
    }

    /// Runs `body` on the loop's thread, after the jobs queued before it.
    @_spi(TransportAuthoring) public func execute(_ body: @escaping @Sendable () -> Void) {
        if host != nil { return pushAsTenant(.closure(body)) }
        push(.closure(body))
    }

    /// Enqueues a task's job; it runs on the loop's thread.
    @_spi(TransportAuthoring) public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        if host != nil { return pushAsTenant(.task(job, self)) }
        push(.task(job, self))
    }

    /// This loop as an actor's executor.
    @_spi(TransportAuthoring) public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        // Itself, also for a loop sharing a thread: the runtime takes an
        // executor to be the object that gives it (a task that prefers one
        // retains the object and releases the executor it named), and a job
        // runs isolated to the loop it was enqueued on.
        UnownedSerialExecutor(ordinary: self)
    }

    /// This loop as a task's preferred executor.
    @_spi(TransportAuthoring) public func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
    }

    /// Traps unless the caller runs on this executor, as `assumeIsolated` requires.
    @_spi(TransportAuthoring) public func checkIsolated() {
        precondition(isCurrent, "not running on the event loop \(name)")
    }

    /// Ends the I/O and timers. Queued jobs still run. Idempotent; never waits.
    @_spi(TransportAuthoring) public func stop() {
        if host != nil { return stopTenant() }
        enum Stop {
            case wakeThread
            case neverStarted([@Sendable () -> Void])
            case nothing
        }
        let stop = state { state -> Stop in
            switch state.phase {
            case .created:
                // Never started: the jobs are drained elsewhere from now on.
                state.phase = .stopped
                defer { state.finishers = [] }
                return .neverStarted(state.finishers)
            case .running:
                // A thread that is not asleep sees the phase before it
                // sleeps again; one asleep is woken once, as for a job.
                state.phase = .stopping
                return state.takeWakeUp(from: ThreadIdentity.current) ? .wakeThread : .nothing
            case .stopping, .stopped:
                return .nothing
            }
        }
        switch stop {
        case .wakeThread:
            wake()
        case .neverStarted(let finishers):
            // No thread will signal the end: this call does.
            finished.signal()
            for finisher in finishers { finisher() }
            drainDetachedIfNeeded()
        case .nothing:
            break
        }
    }

    /// Waits at most `nanoseconds` for the loop's thread to finish after
    /// ``stop()``. Called on that thread it would wait for itself: a
    /// programming error, which traps in a debug build and returns
    /// ``JoinOutcome/refusedOnLoopThread`` at once in a release build. Code
    /// that may run on the loop (a transport closed from a handler) calls
    /// ``stopAndJoin()``, which says so.
    @_spi(TransportAuthoring) public func join(nanoseconds: UInt64) -> JoinOutcome {
        if isCurrent {
            assertionFailure("join on the event loop \(name)'s own thread would wait for itself")
            return .refusedOnLoopThread
        }
        return finished.wait(nanoseconds: nanoseconds) ? .joined : .timedOut
    }

    /// How long a transport's `close()` waits for its loop's thread: the
    /// handler or job running there when it closes. One bound for every
    /// transport.
    @_spi(TransportAuthoring) public static let closeWaitNanoseconds: UInt64 = 2_000_000_000

    /// Stops the loop and waits at most `nanoseconds` for its thread to
    /// finish, unless called on that thread: a transport closed by a
    /// handler or job running there (a center released while it delivered)
    /// returns at once, and the thread ends when that handler returns.
    @discardableResult
    @_spi(TransportAuthoring) public func stopAndJoin(nanoseconds: UInt64 = closeWaitNanoseconds) -> JoinOutcome {
        stop()
        if isCurrent { return .refusedOnLoopThread }
        return join(nanoseconds: nanoseconds)
    }

    /// Runs `body` once the loop's thread has finished after ``stop()``:
    /// on that thread, after its last handler and timer, and before the
    /// jobs still queued run on the system's pool; at once, on the caller,
    /// when the loop has finished (or never started and was stopped). A
    /// transport's close ends this way, without waiting for the thread.
    @_spi(TransportAuthoring) public func whenFinished(_ body: @escaping @Sendable () -> Void) {
        let now = state { state -> Bool in
            guard state.phase == .stopped else {
                state.finishers.append(body)
                return false
            }
            return true
        }
        if now { body() }
    }

    // MARK: - The loop

    func wake() {
        switch waiting {
        case .events(let poller): poller.wake()
        case .receiving(_, let wake): wake()
        case .shared: host?.wake()
        }
    }

    func push(_ job: LoopJob) {
        let current = ThreadIdentity.current
        let action = state { state -> PushAction in
            state.jobs.append(job)
            if state.thread != current { handOffCount.add(1, ordering: .relaxed) }
            switch state.phase {
            case .created, .running, .stopping:
                return state.takeWakeUp(from: current) ? .wake : .none
            case .stopped:
                guard !state.isDraining else { return .none }
                state.isDraining = true
                return .drain
            }
        }
        switch action {
        case .none: break
        case .wake: wake()
        case .drain: DispatchQueue.global().async { self.drainDetached() }
        }
    }

    private func run() {
        nameSystemThread()
        state { $0.thread = ThreadIdentity.current }
        jobThread.store(ThreadIdentity.current.rawValue, ordering: .relaxed)
        var ready: [CInt] = []
        var calls: [MarkedDescriptor] = []
        // The jobs taken from the queue, and how many of them have run: the
        // queue and this array trade buffers, so taking jobs allocates nothing.
        var batch: [LoopJob] = []
        var next = 0
        while true {
            inlineStart.store(0, ordering: .relaxed)
            runsHandlers.store(true, ordering: .relaxed)
            runJobs(&batch, from: &next)
            runsHandlers.store(false, ordering: .relaxed)
            let timeout = state { state -> CInt? in
                guard state.phase == .running else { return nil }
                guard next == batch.count, state.jobs.isEmpty, state.marked.isEmpty else { return 0 }
                state.isSleeping = true
                return state.timeoutMilliseconds(now: SystemClock.monotonicNanoseconds())
            }
            guard let timeout else { break }
            switch waiting {
            case .events(let poller):
                poller.wait(milliseconds: timeout, into: &ready)
            case .receiving(let receive, _):
                ready.removeAll(keepingCapacity: true)
                receive(timeout)
            case .shared:
                return  // never started: its host's thread runs it
            }
            state { state in
                state.isSleeping = false
                state.wakePending = false
                for descriptor in ready {
                    for tenant in state.takeReadyTenants(descriptor) {
                        state.marked.insert(MarkedDescriptor(descriptor: descriptor, tenant: tenant))
                    }
                }
                state.marked.take(into: &calls)
            }
            for call in calls {
                // Looked up one at a time: an earlier handler may deregister a later one.
                if let handler = state({ $0.handler(call.descriptor, of: call.tenant) }) { handler() }
            }
            calls.removeAll(keepingCapacity: true)
            let due = state { $0.takeDueTimers(now: SystemClock.monotonicNanoseconds()) }
            for timer in due { timer.body() }
        }
        // Stopped: what is still queued runs on the pool, one job at a time.
        jobThread.store(0, ordering: .relaxed)
        let carried = batch[next...]
        let finishers = state { state -> [@Sendable () -> Void] in
            state.phase = .stopped
            state.thread = nil
            state.timers = []
            state.handlers = [:]
            state.jobs.insert(contentsOf: carried, at: 0)
            defer { state.finishers = [] }
            return state.finishers
        }
        finished.signal()
        for finisher in finishers { finisher() }
        drainDetachedIfNeeded()
    }

}

/// What an ``EventLoop`` waits in.
private enum Waiting {
    case events(EventPoller)
    case receiving(receive: @Sendable (CInt) -> Void, wake: @Sendable () -> Void)
    /// A loop sharing a thread: its host waits for it.
    case shared
}
