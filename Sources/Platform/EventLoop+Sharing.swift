import Foundation
import Synchronization

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// Loops that share a thread of the process's LoopGroup. Such a loop keeps
// its own descriptors, timers, stop and finish; the thread's own loop (its
// host) waits for all of them and runs their handlers, timers and jobs, one
// at a time, in the order they came. Stopping one ends only its handlers and
// timers: the thread goes on for the others.

extension EventLoop {
    /// Whether this loop shares a thread of the ``LoopGroup`` with others.
    package var sharesThread: Bool { host != nil }

    /// The thread that runs this loop's handlers and jobs: the same for
    /// loops that share one.
    package var threadLoop: ObjectIdentifier { ObjectIdentifier(host ?? self) }

    // A loop sharing a thread keeps, until ``start()``, what it was given
    // in its own state (handlers, timers, jobs), as a loop with a thread of
    // its own runs nothing before it starts: a transport sets itself up
    // after registering, and its handlers must not run meanwhile. `start`
    // hands them to the host's thread in the order they came.

    /// Registers a handler of this loop sharing a thread.
    func registerAsTenant(_ descriptor: CInt, exclusive: Bool, onReadable handler: @escaping @Sendable () -> Void)
        -> Result<Void, Errno>
    {
        guard let host else { return .failure(Errno(rawValue: EINVAL)) }
        let phase = state { state -> LoopPhase in
            switch state.phase {
            case .created:
                state.handlers[descriptor] = [LoopHandler(tenant: tenant, exclusive: exclusive, body: handler)]
            case .running: state.watched.insert(descriptor)
            case .stopping, .stopped: break
            }
            return state.phase
        }
        switch phase {
        case .created: return .success(())
        case .running:
            let registered = host.register(descriptor, for: tenant, exclusive: exclusive, onReadable: handler)
            // A stop that took `watched` before the host had the handler
            // did not remove it: the handler goes now.
            if state({ $0.phase != .running }) { host.deregister(descriptor, for: tenant) }
            return registered
        case .stopping, .stopped: return .failure(Errno(rawValue: ECANCELED))
        }
    }

    /// The storage that the loops sharing this loop's thread receive
    /// datagrams into, one at a time (see ``DatagramBatch``): made when
    /// first asked for, and kept as long as the thread's own loop.
    package func datagramStorage() -> DatagramStorage {
        let keeper = host ?? self
        if let made = keeper.sharedStorage.withLock({ $0 }) { return made }
        // Mapped with no lock held; of two made at once, one is kept.
        let made = DatagramStorage(slots: DatagramStorage.sharedSlots, slotLength: DatagramStorage.sharedSlotLength)
        return keeper.sharedStorage.withLock { kept in
            if let kept { return kept }
            kept = made
            return made
        }
    }

    /// Sets a timer of this loop sharing a thread; returns its number (one
    /// no timer has when the loop has stopped: timers end then).
    func scheduleAsTenant(after nanoseconds: UInt64, cancellable: Bool, _ body: @escaping @Sendable () -> Void)
        -> UInt64
    {
        guard let host else { return .max }
        let number =
            cancellable
            ? host.state { state -> UInt64 in
                state.nextTimerNumber += 1
                return state.nextTimerNumber
            } : 0
        let deadline = SystemClock.monotonicNanoseconds() &+ nanoseconds
        let timer = LoopTimer(deadline: deadline, body: body, number: number, tenant: tenant)
        let phase = state { state -> LoopPhase in
            if state.phase == .created { state.timers.append(timer) }
            return state.phase
        }
        switch phase {
        case .created: return number
        case .running:
            host.add(timer)
            return number
        case .stopping, .stopped: return .max
        }
    }

    /// Queues a job of this loop sharing a thread: on the host's thread,
    /// once started; jobs outlive a stop there, as on a loop's own thread.
    func pushAsTenant(_ job: LoopJob) {
        guard let host else { return }
        let current = ThreadIdentity.current.rawValue
        if host.jobThread.load(ordering: .relaxed) != current { handOffCount.add(1, ordering: .relaxed) }
        let held = state { state -> Bool in
            guard state.phase == .created else { return false }
            state.jobs.append(job)
            return true
        }
        if !held { host.push(job) }
    }

    /// Starts a loop sharing a thread: what it was given so far goes to
    /// the host, handlers first, then timers, then jobs in order.
    func startTenant() {
        guard let host else { return }
        let taken = state { state -> (handlers: [CInt: [LoopHandler]], timers: [LoopTimer], jobs: [LoopJob])? in
            guard state.phase == .created else { return nil }
            state.phase = .running
            state.watched = Set(state.handlers.keys)
            defer { (state.handlers, state.timers, state.jobs) = ([:], [], []) }
            return (state.handlers, state.timers, state.jobs)
        }
        guard let taken else { return }
        for (descriptor, list) in taken.handlers {
            for handler in list {
                // Failed now, where the loop's own thread would have seen
                // no event either: the transport learns of it as it would
                // from `register`, by the descriptor staying quiet.
                _ = host.register(descriptor, for: tenant, exclusive: handler.exclusive, onReadable: handler.body)
            }
        }
        for timer in taken.timers { host.add(timer) }
        for job in taken.jobs { host.push(job) }
    }

    /// Stops a loop sharing a thread: its descriptors and timers end now,
    /// under its host's lock, so no handler or timer of it starts after this
    /// returns (one running now on the host's thread ends first); what it
    /// is to run once finished (``whenFinished(_:)``) runs as a job on the
    /// host's thread, after that handler and the jobs queued before.
    func stopTenant() {
        let stops = state { state -> (jobs: [LoopJob], watched: Set<CInt>)? in
            guard state.phase == .created || state.phase == .running else { return nil }
            state.phase = .stopping
            state.handlers = [:]
            state.timers = []
            defer { (state.jobs, state.watched) = ([], []) }
            return (state.jobs, state.watched)
        }
        guard let (held, watched) = stops, let host else { return }
        host.removeTenant(tenant, watching: watched)
        // Jobs given before a start that never came still run.
        for job in held { host.push(job) }
        host.push(.closure { [self] in self.finishTenant() })
    }

    /// The job that ends a stopped loop sharing a thread.
    private func finishTenant() {
        let finishers = state { state -> [@Sendable () -> Void] in
            state.phase = .stopped
            defer { state.finishers = [] }
            return state.finishers
        }
        finished.signal()
        for finisher in finishers { finisher() }
    }

    /// On a thread's own loop: forgets the handlers of the loop numbered
    /// `tenant` for the descriptors it was `watching`, and its timers and
    /// marks, and stops watching the descriptors nobody else on this thread
    /// watches. Idempotent.
    func removeTenant(_ tenant: UInt64, watching: Set<CInt>) {
        // What the loop's handlers and timers hold is released after the
        // lock: the last release of a transport's receiving state frees its
        // buffers and closes descriptors (1 to 2 ms of CPU with 500 loops
        // on the thread, measured under the lock before).
        var removed: [LoopHandler] = []
        var timers: [LoopTimer] = []
        let unwatched = state { state -> [CInt] in
            var unwatched: [CInt] = []
            for descriptor in watching where state.removeHandler(descriptor, of: tenant, into: &removed) {
                unwatched.append(descriptor)
            }
            timers = state.timers.filter { $0.tenant == tenant }
            if !timers.isEmpty { state.timers.removeAll { $0.tenant == tenant } }
            state.marked.removeAll(of: tenant)
            return unwatched
        }
        for descriptor in unwatched { removeFromPoller(descriptor) }
        group?.left(self, tenant: tenant)
        withExtendedLifetime((removed, timers)) {}
    }
}

/// The threads the process's hubs share, as swift-nio's `EventLoopGroup`:
/// a few loops waiting in the system's event queue, made as they are first
/// needed and kept while the group lives (idle, each sleeps in `epoll_wait`
/// or `kevent` with no timer). A transport gets a loop of its own on the
/// thread that carries the fewest.
///
/// The process's group is ``shared``: a socket or file transport beyond
/// the process's first few (which keep a thread of their own that sleeps in
/// its receive call, see ``ThreadAllowance``) takes a loop of it. A handler
/// that blocks on such a thread holds the other loops on it too, as it
/// would on a swift-nio event loop; tests that hold a handler on purpose
/// give their transports a group of their own.
package final class LoopGroup: Sendable {
    private struct Member {
        var loop: EventLoop
        var tenants: Set<UInt64>
    }

    private struct State {
        var threads: [Member] = []
        var nextTenant: UInt64 = 0

        /// A new loop's thread and number: the quietest thread, or `new`
        /// (kept as a thread of the group) while the group has room and
        /// every thread carries a loop. `nil`: a new thread is wanted and
        /// none was given.
        mutating func admit(limit: Int, new: EventLoop?) -> (EventLoop, UInt64)? {
            let quietest = threads.indices.min { threads[$0].tenants.count < threads[$1].tenants.count }
            var index = quietest
            if threads.count < limit, quietest.map({ !threads[$0].tenants.isEmpty }) ?? true {
                guard let new else { return nil }
                threads.append(Member(loop: new, tenants: []))
                index = threads.count - 1
            }
            guard let index else { return nil }
            nextTenant += 1
            threads[index].tenants.insert(nextTenant)
            return (threads[index].loop, nextTenant)
        }
    }

    private let limit: Int
    // Locked, not Synchronization.Mutex: ThreadSanitizer does not model the
    // futex under the toolchain's Mutex on Linux (see *Design decisions*).
    private let state = Locked(State())

    /// The process's group: one thread per processor, at most four.
    package static let shared = LoopGroup(threads: LoopGroup.defaultThreadCount)

    /// One thread per processor, at most four: a hub's work between
    /// wake-ups is short, and more threads than processors only take turns.
    static var defaultThreadCount: Int { min(4, SystemProcess.processorCount) }

    /// A group of at most `threads` threads (the process's is ``shared``;
    /// tests make their own).
    package init(threads: Int) {
        limit = max(1, threads)
    }

    deinit {
        // A group of a test, released with the last transport on it: its
        // threads end. ``shared`` lives as long as the process.
        for member in state.withLock({ $0.threads }) { member.loop.stop() }
    }

    /// How many threads the group has started.
    package var threadCount: Int { state.withLock { $0.threads.count } }

    /// A loop named `name` on the thread carrying the fewest loops; a new
    /// thread while the group has fewer than its limit and every thread
    /// carries one already.
    ///
    /// - Throws: the system's error when it refuses a new thread's event
    ///   queue (out of descriptors).
    package func loop(named name: String) throws(Errno) -> EventLoop {
        if let (host, tenant) = state.withLock({ $0.admit(limit: limit, new: nil) }) {
            return EventLoop(name: name, sharing: host, tenant: tenant)
        }
        // Made outside the lock (system calls); another caller may have
        // filled the group meanwhile, and then it is not kept.
        let made = try EventLoop(name: "TypedNotifications.LoopGroup", waiting: .events, group: self)
        made.start()
        guard let (host, tenant) = state.withLock({ $0.admit(limit: limit, new: made) }) else {
            made.stop()
            throw Errno(rawValue: EAGAIN)  // not reached: a group has at least one thread
        }
        if host !== made { made.stop() }
        return EventLoop(name: name, sharing: host, tenant: tenant)
    }

    /// A loop numbered `tenant` left `host`'s thread.
    func left(_ host: EventLoop, tenant: UInt64) {
        state.withLock { state in
            for index in state.threads.indices where state.threads[index].loop === host {
                state.threads[index].tenants.remove(tenant)
            }
        }
    }
}

/// The package's own threads in this process, told apart by the names they
/// give themselves (the last part of a loop's name, cut to Linux's 15
/// bytes): for the benchmark and the tests that count them.
package enum PackageThreads {
    /// The names the package's threads carry.
    package static let names: Set<String> = [
        "SocketTransport", "FileSignalTrans", "LoopGroup", "PathWatcher", "SleepDeadlines", "TerminationSig",
        "RedisStreamsTra", "EnvelopeLoopbac",
    ]

    /// How many threads of this process carry one of ``names``; `nil`
    /// where `/proc/self/task` is missing (not Linux).
    package static func count() -> Int? {
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task") else { return nil }
        return tasks.filter { task in
            guard let comm = try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8) else {
                return false
            }
            return names.contains(comm.trimmingCharacters(in: .whitespacesAndNewlines))
        }.count
    }
}
