#if os(Linux)
    import CTypedNotifications
    #if canImport(Glibc)
        import Glibc
    #elseif canImport(Musl)
        import Musl
    #endif
    import Synchronization

    /// ``PathWatcher``'s change queue on Linux: the process's one inotify
    /// instance (``ChangeQueue/shared()``), which every directory monitor of
    /// the process shares too, so a process holds one instance however many
    /// hubs it has (a user may hold 128 by default).
    ///
    /// The watcher is one of that instance's readers. Its thread sleeps in
    /// `poll` on three descriptors: the instance; a bell (an `eventfd`) that
    /// another reader rings when it read events of the watcher's and handed
    /// them to its inbox; and `/proc/self/mountinfo`, which becomes ready
    /// when a file system is mounted or unmounted anywhere in the process's
    /// view, since a mount over a watched directory sends inotify nothing
    /// (see ``PathWatcher/watchMounts(_:)``).
    ///
    /// A watch is one subscriber of the kernel's watch of its file, which
    /// the instance shares between everyone watching that file, and is
    /// handed only the events it asked for.
    final class PathWatchQueue: Sendable {
        private let queue: ChangeQueue
        private let identifier: UInt64
        private let bell: CInt
        private let mounts: CInt
        private let nextKey = Atomic<Int>(0)

        /// Each watch has a key of its own, even on a file others watch.
        static let sharesWatches = false

        /// The corresponding C functions are `inotify_init1` (once per
        /// process, for the shared instance), `eventfd` and `open`.
        init() throws(ChangeMonitorError) {
            let queue = try ChangeQueue.shared()
            SystemCalls.count()
            let bell = eventfd(0, CInt(EFD_CLOEXEC | EFD_NONBLOCK))
            guard bell != -1 else { throw ChangeMonitorError(creating: Errno.current) }
            self.queue = queue
            self.bell = bell
            // Without it (no /proc), a mount over a watched directory goes
            // unnoticed, as it did before the first post with a look.
            SystemCalls.count()
            mounts = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC)
            identifier = queue.state.withLock { state in
                let identifier = state.addMonitor()
                state.inboxes[identifier]?.wake = { Self.ring(bell) }
                return identifier
            }
        }

        deinit {
            let retiring = queue.state.withLock { $0.removeMonitor(identifier) }
            for watch in retiring { queue.removeWatch(watch) }
            close(bell)
            if mounts != -1 { close(mounts) }
        }

        /// The corresponding C function is `inotify_add_watch`.
        func add(_ path: String, events: PathEvents) throws(ChangeMonitorError) -> Int {
            var interest: UInt32 = 0
            if events.contains(.removedOrMoved) { interest |= UInt32(IN_DELETE_SELF | IN_MOVE_SELF) }
            if events.contains(.attributes) { interest |= UInt32(IN_ATTRIB) }
            if events.contains(.entries) { interest |= UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) }
            let key = nextKey.add(1, ordering: .relaxed).newValue
            let subscriber = ChangeQueueState.Subscriber(
                monitor: identifier, index: key, includesModifications: false, interest: interest,
                followsItsFile: true)
            while true {
                SystemCalls.count()
                let watch = inotify_add_watch(
                    queue.descriptor.rawValue, path, interest | UInt32(IN_DONT_FOLLOW | IN_MASK_ADD))
                guard watch != -1 else { throw ChangeMonitorError(watching: Errno.current) }
                switch queue.state.withLock({ $0.add(subscriber, to: watch) }) {
                case .added:
                    return key
                case .retry:
                    // The last subscriber of that watch is removing it right
                    // now: once it has, adding makes a new one.
                    sched_yield()
                case .gone:
                    // The file went between the kernel's answer and now.
                    throw ChangeMonitorError(watching: .noSuchFile)
                }
            }
        }

        /// Ends one watch; the kernel's watch goes once nobody subscribes,
        /// removed by the watcher's thread, which the bell wakes: with
        /// thousands of watches in the instance, `inotify_rm_watch` took
        /// 60–350 µs, and a hub's close removes seven. Until it is gone, an
        /// adder handed its number tries again (``ChangeQueueState/add(_:to:)``).
        ///
        /// The corresponding C function is `write` (the bell).
        func remove(_ key: Int) {
            let retiring = queue.state.withLock { state in
                state.remove(monitor: identifier, index: key).map { state.removeLater($0) } != nil
            }
            if retiring { Self.ring(bell) }
        }

        /// Wakes the watcher's thread, asleep in `poll` on `bell`.
        private static func ring(_ bell: CInt) {
            var one: UInt64 = 1
            SystemCalls.count()
            _ = write(bell, &one, MemoryLayout<UInt64>.size)
        }

        /// Sleeps until events come and appends them to `reports`. Returns
        /// `false` if the queue cannot be waited on any more.
        ///
        /// The corresponding C functions are `poll` and `read`.
        func wait(into reports: inout [PathWatchReport]) -> Bool {
            let instance = queue.descriptor.rawValue
            var waited = [
                pollfd(fd: instance, events: Int16(POLLIN), revents: 0),
                pollfd(fd: bell, events: Int16(POLLIN), revents: 0),
                // A negative descriptor is left out by `poll`.
                pollfd(fd: mounts, events: Int16(POLLPRI), revents: 0),
            ]
            SystemCalls.count()
            guard poll(&waited, nfds_t(waited.count), -1) != -1 else { return errno == EINTR }
            if waited[1].revents != 0 {
                var rung: UInt64 = 0
                SystemCalls.count()
                _ = read(bell, &rung, MemoryLayout<UInt64>.size)
            }
            // The kernel marks the change seen as it reports it: one report per change.
            if waited[2].revents & Int16(POLLPRI | POLLERR) != 0 { reports.append(.mounted) }
            let ticket = queue.state.withLock { $0.beginRead() }
            var events: [ChangeQueueState.Event] = []
            if waited[0].revents != 0 {
                var buffer = [UInt8](repeating: 0, count: 16_384)
                while true {
                    SystemCalls.count()
                    let count = buffer.withUnsafeMutableBytes { read(instance, $0.baseAddress, $0.count) }
                    guard count > 0,
                        !buffer.withUnsafeBytes({ ChangeQueue.parse($0, count: count, into: &events) })
                    else { break }
                }
            }
            let (taken, bound, wakes, removals) = queue.state.withLock { state in
                let (inbox, bound) = state.finishRead(ticket, by: identifier, events: events)
                return (inbox, bound, state.takeWakes(), state.takeRemovals())
            }
            for watch in removals { queue.removeWatch(watch) }
            for wake in wakes { wake() }
            // Another reader's read, begun before this one ended, may hold
            // an event of the watcher's.
            let inbox = taken ?? queue.inbox(of: identifier, settledThrough: bound)
            if inbox.overflowed { reports.append(.overflowed) }
            let every: PathEvents = [.removedOrMoved, .attributes, .entries]
            for key in inbox.changed.union(inbox.lost) {
                reports.append(.changed(key: key, events: every, ended: inbox.lost.contains(key)))
            }
            return true
        }
    }
#endif
