#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// Tells which of a set of directories changed since it was last asked,
/// without scanning them.
///
/// On Linux, a watch per directory in the process's one inotify instance
/// (``ChangeQueue``), which every monitor shares: the kernel allows a user
/// 128 instances by default, so one per hub would cap a process at 128
/// hubs. A change made by another process is queued before that process's
/// call returns, so asking right after sees it, even while another monitor
/// of the process is reading the shared queue: a monitor that asks waits
/// for the reads begun before its own ended to hand out what they read. Elsewhere, each directory's
/// modification time is compared with the last one seen (one `lstat` per
/// directory and question).
///
/// A monitor is used by one thread at a time (its owner's event loop, or a
/// caller that serialises its calls). Whoever reads a shared queue hands
/// each monitor its events; a monitor that gets events read by another
/// thread has its ``whenChangedElsewhere`` called once until it next asks.
package final class DirectoryMonitor {
    #if os(Linux)
        private let queue: ChangeQueue
        private let identifier: UInt64
        private var watchDescriptors: [Int: CInt] = [:]
        // What each watched directory was when watched: an entry leaving it
        // is the moment to check it is still the one at its path.
        private var identities: [Int: FileIdentity] = [:]
        private var events: [ChangeQueueState.Event] = []
        /// The queue's sleeper, for a monitor whose owner sleeps in its queue.
        private let sleeper: ChangeSleeper?
        // The last sleep read the queue empty: the next `changes()` need not read it.
        private var sleptAndDrained = false
    #else
        private var lastModified: [Int: Int64] = [:]
    #endif
    #if canImport(Darwin)
        // The notify(3) descriptor of ``listen(forSignal:as:)``, and which
        // watch index each of its tokens stands for.
        private var signalDescriptor: CInt?
        private var signalIndices: [Int32: Int] = [:]
    #endif
    private var paths: [String] = []
    private var lost: Set<Int> = []
    private var created: Set<Int> = []
    // The watches that name their created entries, and what they named
    // since last taken (`nil`: list the directory, the names are not known).
    private var naming: Set<Int> = []
    private var createdEntries: [Int: [String]?] = [:]

    private let includesModifications: Bool

    /// Creates a monitor watching nothing yet. With `includingModifications`,
    /// a write to a file in a watched directory counts as a change too. With
    /// `sharingQueue` false it gets an inotify instance of its own, which
    /// only it reads: for a caller that blocks on ``pollDescriptor`` and
    /// has no event loop to be woken on.
    ///
    /// The corresponding C function is `inotify_init1`, called once per
    /// process (and once per monitor that does not share).
    package init(includingModifications: Bool = false, sharingQueue: Bool = true) throws(ChangeMonitorError) {
        includesModifications = includingModifications
        #if os(Linux)
            queue = sharingQueue ? try ChangeQueue.shared() : try ChangeQueue.make()
            identifier = queue.state.withLock { $0.addMonitor() }
            sleeper = nil
        #endif
    }

    #if os(Linux)
        /// A monitor on `queue`, which other monitors may share.
        init(includingModifications: Bool = false, queue: ChangeQueue) {
            includesModifications = includingModifications
            self.queue = queue
            identifier = queue.state.withLock { $0.addMonitor() }
            sleeper = nil
        }

        private init(includingModifications: Bool, sleeper: ChangeSleeper) {
            includesModifications = includingModifications
            queue = sleeper.queue
            identifier = queue.state.withLock { $0.addMonitor() }
            self.sleeper = sleeper
        }
    #endif

    /// A monitor with a queue of its own that its owner's thread sleeps in,
    /// with ``sleep(timeoutMilliseconds:)``, woken by ``ChangeSleeper/wake()``
    /// (see ``ChangeSleeper``); `nil` where there is none (not Linux), or
    /// none can be made now: make a shared one and wait for ``pollDescriptor``.
    /// With `beyondLimit` (for tests), whatever the process holds already.
    package static func sleeping(includingModifications: Bool, beyondLimit: Bool = false) -> DirectoryMonitor? {
        #if os(Linux)
            // The process's shared instance first: a sleeper never takes the
            // last instance the user may make, which every file transport
            // past the first two needs.
            guard (try? ChangeQueue.shared()) != nil,
                let sleeper = ChangeSleeper.make(beyondLimit: beyondLimit)
            else { return nil }
            return DirectoryMonitor(includingModifications: includingModifications, sleeper: sleeper)
        #else
            return nil
        #endif
    }

    /// The wake-up of a monitor made with ``sleeping(includingModifications:beyondLimit:)``
    /// (``ChangeSleeper/wake()``), callable from any thread; `nil` for others.
    package var wakeUp: (@Sendable () -> Void)? {
        #if os(Linux)
            // Weakly: the monitor's owner decides how long the sleeper
            // lives (a closed transport lets it go); a loop that is stopping
            // needs no wake-up once its sleeper is gone.
            guard let sleeper else { return nil }
            return { [weak sleeper] in sleeper?.wake() }
        #else
            nil
        #endif
    }

    /// Sleeps in the queue until a change or a wake-up arrives, or for at
    /// most `timeoutMilliseconds` (-1: without limit, 0: not at all).
    /// Returns whether a change came: ``changes()`` then reports it without
    /// reading the queue again. Only for a monitor made with
    /// ``sleeping(includingModifications:beyondLimit:)``; others return `false` at once.
    ///
    /// The corresponding C function is `read`.
    package func sleep(timeoutMilliseconds: CInt) -> Bool {
        #if os(Linux)
            guard let sleeper, sleeper.prepareSleep(timeoutMilliseconds: timeoutMilliseconds) else { return false }
            let before = events.count
            let (count, drained) = readOnce(skipping: sleeper.wakeWatch, afterRead: sleeper.didRead)
            guard count > 0 else { return false }
            sleptAndDrained = drained
            return events.count > before
        #else
            return false
        #endif
    }

    deinit {
        #if os(Linux)
            let retiring = queue.state.withLock { $0.removeMonitor(identifier) }
            for descriptor in retiring { queue.removeWatch(descriptor) }
        #endif
    }

    /// Called, on whatever thread read the shared queue, when events for
    /// this monitor were read by another: the owner should call
    /// ``changes()`` soon (schedule it on its loop). Called once until the
    /// next ``changes()``; never under a lock.
    package var whenChangedElsewhere: (@Sendable () -> Void)? {
        get {
            #if os(Linux)
                queue.state.withLock { $0.inboxes[identifier]?.wake }
            #else
                nil
            #endif
        }
        set {
            #if os(Linux)
                queue.state.withLock { $0.inboxes[identifier]?.wake = newValue }
            #endif
        }
    }

    /// Starts watching the directory at `path` for entries created, removed or
    /// renamed; returns its index, which ``changes()`` reports. With
    /// `namingEntries`, ``takeCreatedEntries()`` also says which entries
    /// were created there.
    ///
    /// The corresponding C function is `inotify_add_watch`.
    package func watch(_ path: String, namingEntries: Bool = false) throws(ChangeMonitorError) -> Int {
        let index = paths.count
        #if os(Linux)
            var mask =
                UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF)
                | UInt32(IN_ONLYDIR | IN_DONT_FOLLOW)
            // A write by another process to a file in the directory (an append to a log).
            if includesModifications { mask |= UInt32(IN_MODIFY) }
            let subscriber = ChangeQueueState.Subscriber(
                monitor: identifier, index: index, includesModifications: includesModifications,
                namesEntries: namingEntries)
            // Another monitor may watch the same directory: the kernel hands
            // out one watch per directory and instance, and IN_MASK_ADD keeps
            // what the others asked for.
            while true {
                // The directory at the path before and after the call: the
                // same one, or it was replaced meanwhile and the watch may be
                // on either.
                let before = SystemCalls.linkStatus(path).map(\.identity)
                SystemCalls.count()
                let descriptor = inotify_add_watch(queue.descriptor.rawValue, path, mask | UInt32(IN_MASK_ADD))
                guard descriptor != -1 else { throw ChangeMonitorError(watching: Errno.current) }
                guard case .success(let identity) = before,
                    case .success(identity) = SystemCalls.linkStatus(path).map(\.identity)
                else { continue }
                switch queue.state.withLock({ $0.add(subscriber, to: descriptor) }) {
                case .added:
                    watchDescriptors[index] = descriptor
                    identities[index] = identity
                case .retry:
                    // The last monitor on that watch is removing it right
                    // now: once it has, adding makes a new one.
                    sched_yield()
                    continue
                case .gone:
                    // The directory went between the kernel's answer and
                    // now, and its end was handed out before this monitor
                    // listened: as if it had gone before the call.
                    throw ChangeMonitorError(watching: .noSuchFile)
                }
                break
            }
        #else
            if case .success(let info) = SystemCalls.linkStatus(path) { lastModified[index] = info.modifiedNanoseconds }
        #endif
        paths.append(path)
        if namingEntries { naming.insert(index) }
        return index
    }

    /// Also reports the watch `index` as changed whenever a poster calls
    /// ``postSignal(_:)`` with `signal`: on Apple platforms, where a write to
    /// a file does not change its directory, a notify(3) name (as Darwin
    /// notifications use), so an append wakes a reader at once. Returns a
    /// descriptor the first time one is made, for the caller's poller.
    /// Elsewhere nothing, and `nil`: inotify reports the write itself.
    ///
    /// The corresponding C function is `notify_register_file_descriptor`.
    package func listen(forSignal signal: String, as index: Int) -> CInt? {
        #if canImport(Darwin)
            let before = signalDescriptor
            guard let (descriptor, token) = DarwinChangeSignal.register(signal, descriptor: signalDescriptor) else {
                return nil
            }
            signalDescriptor = descriptor
            signalIndices[token] = index
            return before == nil ? descriptor : nil
        #else
            return nil
        #endif
    }

    /// Whether appends are signalled with notify(3) names (Apple platforms),
    /// rather than seen as file changes (inotify).
    package static var usesSignals: Bool {
        #if canImport(Darwin)
            true
        #else
            false
        #endif
    }

    /// Wakes every monitor listening for `signal` (see
    /// ``listen(forSignal:as:)``); nothing where change events need no signal.
    ///
    /// The corresponding C function is `notify_post`.
    @inline(__always)
    package static func postSignal(_ signal: @autoclosure () -> String) {
        #if canImport(Darwin)
            DarwinChangeSignal.post(signal())
        #endif
    }

    /// The indices whose directory left its path since the last call
    /// (removed or renamed: inotify's `IN_DELETE_SELF`, `IN_MOVE_SELF`,
    /// `IN_IGNORED`), so their watch no longer follows the path; watch the
    /// path again to follow a directory made anew there. Also reported by
    /// ``changes()`` as changed.
    package func takeLostWatches() -> Set<Int> {
        defer { lost = [] }
        return lost
    }

    /// Looks whether each of the directories watched as `indices` is still
    /// the one at its path, for an owner told that something above them
    /// changed (renamed away, say: a watch follows its directory, and no
    /// event comes for it). One that is not counts as lost (see
    /// ``takeLostWatches()``). Nothing where changes are found by comparing
    /// times: that look is made on every ``changes()``.
    ///
    /// The corresponding C function is `lstat`, once per index.
    package func recheckPaths(_ indices: some Sequence<Int>) {
        #if os(Linux)
            for index in indices where !lost.contains(index) && !isStillAtItsPath(index) { lost.insert(index) }
        #endif
    }

    /// The indices of the directories where an entry was created or moved
    /// in since the last call; where changes are found by comparing times,
    /// every changed directory (a time does not say what changed).
    package func takeCreations() -> Set<Int> {
        defer { created = [] }
        return created
    }

    /// The names of the entries created or moved into each watch made with
    /// `namingEntries` since the last call; `nil` for a watch whose names
    /// are not known (too many waited, or changes are found by comparing
    /// times): list its directory. Up to 65,536 names wait per monitor.
    package func takeCreatedEntries() -> [Int: [String]?] {
        defer { createdEntries = [:] }
        return createdEntries
    }

    /// A descriptor that becomes readable when a change is waiting, for
    /// `poll`; `nil` where changes are found by comparing times instead.
    /// Shared by every monitor of the process that shares its queue: an
    /// event loop should register it with `exclusive` set. `nil` too for a
    /// monitor whose owner sleeps in its queue (``sleeping(includingModifications:beyondLimit:)``).
    package var pollDescriptor: CInt? {
        #if os(Linux)
            sleeper == nil ? queue.descriptor.rawValue : nil
        #else
            nil
        #endif
    }

    /// The indices of the watched directories that changed since the last
    /// call; `nil` when the monitor lost track (its queue overflowed) and
    /// every directory must be treated as changed.
    package func changes() -> Set<Int>? {
        #if os(Linux)
            let ticket = queue.state.withLock { $0.beginRead() }
            readQueue()
            let (taken, bound, wakes, removals) = queue.state.withLock { state in
                let (inbox, bound) = state.finishRead(ticket, by: identifier, events: events)
                return (inbox, bound, state.takeWakes(), state.takeRemovals())
            }
            events.removeAll(keepingCapacity: true)
            for watch in removals { queue.removeWatch(watch) }
            for wake in wakes { wake() }
            let inbox = taken ?? queue.inbox(of: identifier, settledThrough: bound)
            if !inbox.created.isEmpty { created.formUnion(inbox.created) }
            for (index, names) in inbox.createdEntries where createdEntries[index] != .some(nil) {
                createdEntries[index, default: []]?.append(contentsOf: names)
            }
            for index in inbox.entriesOverflowed { createdEntries[index] = .some(nil) }
            if !inbox.lost.isEmpty { lost.formUnion(inbox.lost) }
            var changed = inbox.changed
            if !inbox.emptied.isEmpty {
                for index in inbox.emptied.subtracting(inbox.lost) where !isStillAtItsPath(index) {
                    lost.insert(index)
                    changed.insert(index)
                }
            }
            guard !inbox.overflowed else {
                for index in naming { createdEntries[index] = .some(nil) }
                // The kernel dropped events, perhaps the end of a watch: a
                // directory removed and made again would then go unwatched
                // for good. Each watched directory is looked at, once per
                // overflow, and one that left its path is lost.
                for index in Array(identities.keys) where !lost.contains(index) && !isStillAtItsPath(index) {
                    lost.insert(index)
                }
                return nil
            }
            return changed
        #else
            var changed = Set<Int>()
            #if canImport(Darwin)
                if let signalDescriptor {
                    for token in DarwinChangeSignal.drain(signalDescriptor) {
                        if let index = signalIndices[token] { changed.insert(index) }
                    }
                }
            #endif
            for (index, path) in paths.enumerated() {
                guard case .success(let info) = SystemCalls.linkStatus(path) else {
                    changed.insert(index)
                    continue
                }
                let seen = lastModified[index]
                if seen != info.modifiedNanoseconds {
                    changed.insert(index)
                    created.insert(index)
                    if naming.contains(index) { createdEntries[index] = .some(nil) }
                    lastModified[index] = info.modifiedNanoseconds
                }
            }
            return changed
        #endif
    }

    #if os(Linux)
        /// Whether the directory watched as `index` is still the one at its
        /// path. When not (removed, or replaced), its watch is dropped: it
        /// counts as lost, and its owner watches the path again.
        ///
        /// The corresponding C function is `lstat`.
        private func isStillAtItsPath(_ index: Int) -> Bool {
            guard let identity = identities[index] else { return true }
            if case .success(let now) = SystemCalls.linkStatus(paths[index]), now.identity == identity { return true }
            identities[index] = nil
            watchDescriptors[index] = nil
            if let retire = queue.state.withLock({ $0.remove(monitor: identifier, index: index) }) {
                queue.removeWatch(retire)
            }
            return false
        }

        /// Reads what is queued into ``events``, without a lock: the kernel
        /// hands each event to exactly one reader. A sleeping monitor's
        /// queue blocks: it is read only while the kernel says events wait,
        /// and not at all right after a sleep that emptied it.
        private func readQueue() {
            if let sleeper {
                defer { sleptAndDrained = false }
                guard !sleptAndDrained else { return }
                while sleeper.queuedBytes() > 0 {
                    let (count, drained) = readOnce(skipping: sleeper.wakeWatch, afterRead: sleeper.didRead)
                    guard count > 0, !drained else { return }
                }
                return
            }
            while true {
                let (count, drained) = readOnce()
                guard count > 0, !drained else { return }
            }
        }

        /// Reads the queue once and appends what it read to ``events``
        /// (leaving out `skipped`'s); `afterRead` runs right after the read.
        /// Returns what `read` returned, and whether the read emptied the
        /// queue. The buffer is on the stack: a process's thousand monitors
        /// kept 4 KiB each for reads that most of them seldom make.
        private func readOnce(skipping skipped: CInt? = nil, afterRead: () -> Void = {}) -> (count: Int, drained: Bool)
        {
            withUnsafeTemporaryAllocation(byteCount: 4096, alignment: 16) { raw in
                SystemCalls.count()
                let count = read(queue.descriptor.rawValue, raw.baseAddress, raw.count)
                afterRead()
                guard count > 0 else { return (count, false) }
                let drained = ChangeQueue.parse(
                    UnsafeRawBufferPointer(raw), count: count, into: &events, skipping: skipped)
                return (count, drained)
            }
        }
    #endif
}
