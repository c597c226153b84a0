#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

#if os(Linux)
    /// An inotify instance and who listens to which of its watches: the
    /// process's shared one (``shared()``), or a monitor's own.
    final class ChangeQueue: Sendable {
        private static let current = Locked<ChangeQueue?>(nil)

        let descriptor: FileDescriptor
        let state = Locked(ChangeQueueState())

        private init(_ descriptor: consuming FileDescriptor) {
            self.descriptor = descriptor
        }

        /// The process's queue, made on first use. A failure is not kept: the
        /// next monitor tries again.
        static func shared() throws(ChangeMonitorError) -> ChangeQueue {
            if let queue = current.withLock({ $0 }) { return queue }
            let made = try make()
            return current.withLock { existing in
                if let existing { return existing }
                existing = made
                return made
            }
        }

        /// A new queue of its own; with `blocking`, a read of it waits for
        /// an event (see ``ChangeSleeper``).
        static func make(blocking: Bool = false) throws(ChangeMonitorError) -> ChangeQueue {
            SystemCalls.count()
            let descriptor = inotify_init1(blocking ? CInt(IN_CLOEXEC) : CInt(IN_NONBLOCK | IN_CLOEXEC))
            guard descriptor != -1 else { throw ChangeMonitorError(creating: Errno.current) }
            return ChangeQueue(FileDescriptor(adopting: descriptor))
        }

        /// Appends the events in the first `count` bytes of `buffer`, as
        /// `read` returned them, to `events`, leaving out those of `skipped`.
        /// Returns whether the read emptied the queue: it left room for one
        /// more event of the longest name (an event arriving later makes
        /// the queue readable again).
        static func parse(
            _ buffer: UnsafeRawBufferPointer, count: Int, into events: inout [ChangeQueueState.Event],
            skipping skipped: CInt? = nil
        ) -> Bool {
            let headerSize = 16
            var offset = 0
            while offset + headerSize <= count {
                let descriptor = buffer.loadUnaligned(fromByteOffset: offset, as: CInt.self)
                let mask = buffer.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                let nameLength = Int(buffer.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                defer { offset += headerSize + nameLength }
                if descriptor == skipped { continue }
                // The name (NUL-padded) only of an entry created or moved in.
                var name: String?
                if mask & ChangeQueueState.creation != 0, nameLength > 0, offset + headerSize + nameLength <= count {
                    let bytes = buffer[(offset + headerSize)..<(offset + headerSize + nameLength)]
                    name = String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
                }
                events.append(ChangeQueueState.Event(watch: descriptor, mask: mask, name: name))
            }
            return count <= buffer.count - (headerSize + 256)
        }

        /// `reader`'s inbox once the queue's reads with tickets up to
        /// `bound` have handed out what they read: one of them may hold an
        /// event for it that the kernel queued before it asked. Those reads
        /// hand out at once, so this yields the processor until they have.
        func inbox(of reader: UInt64, settledThrough bound: UInt64) -> ChangeQueueState.Inbox {
            while true {
                sched_yield()
                if let inbox = state.withLock({ $0.takeInbox(reader, settledThrough: bound) }) { return inbox }
            }
        }

        /// Removes a watch no monitor listens to any more, then lets adders
        /// have its directory again.
        func removeWatch(_ watch: CInt) {
            SystemCalls.count()
            _ = inotify_rm_watch(descriptor.rawValue, watch)
            state.withLock { $0.retired(watch) }
        }
    }
#endif

/// Who listens to which watch of an inotify instance, and what each monitor
/// has been handed and not yet taken. A value: every decision is made here,
/// under the queue's lock, and the system calls happen after.
struct ChangeQueueState {
    /// One monitor's interest in one watch.
    struct Subscriber: Equatable {
        var monitor: UInt64
        var index: Int
        var includesModifications: Bool
        /// The watch wants the names of the entries created in its directory.
        var namesEntries = false
        /// The events it wants (besides its watch's end, which every
        /// subscriber is handed): others may share the kernel's watch of
        /// the same file and have asked for more.
        var interest = UInt32.max
        /// The subscriber follows its file wherever it goes, as the
        /// kernel's watch does: its file removed or moved away is an event
        /// for it, and it is lost only when the kernel ends the watch
        /// (`IN_IGNORED`). A hard-linked file "moves" whenever one of its
        /// links is renamed.
        var followsItsFile = false
    }

    /// One event as read: its watch and its mask.
    struct Event {
        var watch: CInt
        var mask: UInt32
        /// The entry's name, read only for an entry created or moved in.
        var name: String? = nil
    }

    /// What a monitor has been handed since it last asked.
    struct Inbox {
        var changed: Set<Int> = []
        var created: Set<Int> = []
        var lost: Set<Int> = []
        /// Entries left these directories (removed or moved out): the
        /// directory itself may have gone with them (see ``departure``).
        var emptied: Set<Int> = []
        /// The names of the entries created, for watches that asked (see
        /// ``Subscriber/namesEntries``), at most ``entriesRemembered`` of
        /// them; past that the watch is in ``entriesOverflowed``.
        var createdEntries: [Int: [String]] = [:]
        var entriesOverflowed: Set<Int> = []
        var createdEntryCount = 0
        var overflowed = false
        var wakeOwed = false
        var wake: (@Sendable () -> Void)?
    }

    /// What ``add(_:to:)`` found.
    enum Added: Equatable {
        case added
        /// The watch is being removed, or was: ask the kernel again.
        case retry
        /// The watch ended (its directory went) before the subscriber was
        /// added: its end was handed to the subscribers it had then.
        case gone
    }

    private(set) var watches: [CInt: [Subscriber]] = [:]
    /// A subscriber, told apart from every other of the queue.
    struct SubscriberID: Hashable {
        var monitor: UInt64
        var index: Int
    }
    // The watches each subscriber is in (one, unless it follows a renamed
    // directory while its owner watches the path again): a close removes a
    // subscriber without a walk over the process's every watch, which took
    // 75–550 µs per subscriber with 1,000 hubs' watches.
    private var watchesOf: [SubscriberID: [CInt]] = [:]
    // The subscribers of each monitor that are in ``watchesOf``: a monitor's
    // close looks at its own watches, not at the process's every one
    // (1 to 2 ms a close with 1,000 hubs, when it walked them all).
    private var subscribersOf: [UInt64: [Int]] = [:]
    private(set) var retiring: Set<CInt> = []
    // Watches whose end (IN_IGNORED) was handed out lately, oldest first: an
    // adder whose inotify_add_watch returned one of them just before its
    // directory went must not wait for an end already handed out. The
    // kernel does not reuse a watch's number until it wraps around, and an
    // adder registers microseconds after its call, so the last 4,096 do.
    private var endedWatches: Set<CInt> = []
    private var endedOrder: [CInt] = []
    // The watches this process removed lately, oldest first (see ``retired(_:)``).
    private var removedWatches: Set<CInt> = []
    private var removedOrder: [CInt] = []
    private static let endedRemembered = 4096
    var inboxes: [UInt64: Inbox] = [:]
    // Reads of the queue begun and not yet handed out, by ticket. The kernel
    // hands each event to whichever read comes first, so an event meant for
    // one monitor may be in another's hands, read and not yet handed over,
    // when the first asks: it waits for those reads (see ``finishRead``).
    private var lastRead: UInt64 = 0
    private var readsInFlight: [UInt64] = []
    private var nextMonitor: UInt64 = 0
    private var wakes: [@Sendable () -> Void] = []
    // Watches whose file left its path while the kernel keeps them (a
    // rename, or a removal whose end waits for an open file), with nobody
    // following it: to remove after unlocking (see ``takeRemovals()``).
    private var removals: [CInt] = []

    /// A new monitor's identifier.
    mutating func addMonitor() -> UInt64 {
        nextMonitor += 1
        inboxes[nextMonitor] = Inbox()
        return nextMonitor
    }

    /// Forgets one subscriber of `monitor` (its directory left its path);
    /// returns the watch when nobody listens to it now, which the caller
    /// removes (``retired(_:)`` once it is gone).
    mutating func remove(monitor: UInt64, index: Int) -> CInt? {
        let id = SubscriberID(monitor: monitor, index: index)
        guard let watch = watchesOf[id]?.first else { return nil }
        forget(id, in: watch)
        guard watches[watch] != nil else {
            retiring.insert(watch)
            return watch
        }
        return withdraw(from: watch) { $0.monitor == monitor && $0.index == index } ? watch : nil
    }

    /// Removes the subscribers of `watch` that `leaving` picks, in place (a
    /// watch of the shared directory lists every hub); returns whether the
    /// watch has none left, and then it is retiring.
    private mutating func withdraw(from watch: CInt, _ leaving: (Subscriber) -> Bool) -> Bool {
        guard let slot = watches.index(forKey: watch) else { return false }
        watches.values[slot].removeAll(where: leaving)
        guard watches.values[slot].isEmpty else { return false }
        watches.remove(at: slot)
        retiring.insert(watch)
        return true
    }

    /// Forgets a monitor; returns the watches nobody listens to now, which
    /// the caller removes (``retired(_:)`` once each is gone).
    mutating func removeMonitor(_ monitor: UInt64) -> [CInt] {
        inboxes[monitor] = nil
        // Every subscriber in `watches` is in `watchesOf` too (each removal
        // from the one forgets it in the other), so these are all its watches.
        var touched: [CInt] = []
        for index in subscribersOf.removeValue(forKey: monitor) ?? [] {
            touched += watchesOf.removeValue(forKey: SubscriberID(monitor: monitor, index: index)) ?? []
        }
        return touched.filter { watch in withdraw(from: watch) { $0.monitor == monitor } }
    }

    /// Adds a subscriber to the watch the kernel returned, unless that watch
    /// is being removed or has ended.
    mutating func add(_ subscriber: Subscriber, to watch: CInt) -> Added {
        guard !retiring.contains(watch), !removedWatches.contains(watch) else { return .retry }
        guard !endedWatches.contains(watch) else { return .gone }
        watches[watch, default: []].append(subscriber)
        watchesOf[SubscriberID(monitor: subscriber.monitor, index: subscriber.index), default: []].append(watch)
        if subscribersOf[subscriber.monitor]?.contains(subscriber.index) != true {
            subscribersOf[subscriber.monitor, default: []].append(subscriber.index)
        }
        return .added
    }

    /// Drops `watch` from the watches `id` is in.
    private mutating func forget(_ id: SubscriberID, in watch: CInt) {
        guard var list = watchesOf[id] else { return }
        list.removeAll { $0 == watch }
        watchesOf[id] = list.isEmpty ? nil : list
        guard list.isEmpty else { return }
        subscribersOf[id.monitor]?.removeAll { $0 == id.index }
        if subscribersOf[id.monitor]?.isEmpty == true { subscribersOf[id.monitor] = nil }
    }

    /// Remembers that `watch` ended, for ``add(_:to:)``.
    private mutating func ended(_ watch: CInt) {
        guard endedWatches.insert(watch).inserted else { return }
        endedOrder.append(watch)
        if endedOrder.count > Self.endedRemembered {
            endedWatches.remove(endedOrder.removeFirst())
        }
    }

    /// Queues the removal of a watch the kernel keeps on a file that left
    /// its path, once (see ``takeRemovals()``); an adder handed its number
    /// meanwhile is told to try again.
    private mutating func retire(_ watch: CInt) {
        guard retiring.insert(watch).inserted else { return }
        removals.append(watch)
    }

    /// Queues the removal of a watch ``remove(monitor:index:)`` retired,
    /// for the next reader to make (see ``takeRemovals()``).
    mutating func removeLater(_ watch: CInt) {
        removals.append(watch)
    }

    /// The kernel removed a retired watch. Its number is remembered: an
    /// adder handed it by a call made before the removal asks the kernel
    /// again (``add(_:to:)`` says retry), whose answer is a new watch or
    /// that the file is gone, rather than take the removal's end
    /// (`IN_IGNORED`) for its file's.
    mutating func retired(_ watch: CInt) {
        retiring.remove(watch)
        guard removedWatches.insert(watch).inserted else { return }
        removedOrder.append(watch)
        if removedOrder.count > Self.endedRemembered {
            removedWatches.remove(removedOrder.removeFirst())
        }
    }

    /// Hands `events` (read by `reader`) to the monitors that listen, then
    /// takes what `reader` was handed. Monitors handed something by another
    /// reader get their wake-up queued, once, for ``takeWakes()``.
    mutating func takeInbox(_ reader: UInt64, after events: [Event]) -> Inbox {
        for event in events { hand(event, readBy: reader) }
        guard let slot = inboxes.index(forKey: reader) else { return Inbox() }
        // Swapped out in place: the taken sets are not copied, and the
        // reader's inbox starts empty, keeping its wake-up.
        var taken = Inbox(wake: inboxes.values[slot].wake)
        swap(&taken, &inboxes.values[slot])
        return taken
    }

    /// A read of the queue begins: its ticket, for ``finishRead(_:by:events:)``.
    mutating func beginRead() -> UInt64 {
        lastRead += 1
        readsInFlight.append(lastRead)
        return lastRead
    }

    /// Hands out `events`, read under `ticket` by `reader`. Returns the
    /// reader's inbox, or, when a read that may have taken one of its events
    /// before its own read ended is still handing out, `nil` and the ticket
    /// to wait for: ask again with ``takeInbox(_:settledThrough:)``. Any read
    /// whose system call came before the end of `reader`'s began before
    /// now, so waiting for the reads begun so far is enough.
    mutating func finishRead(_ ticket: UInt64, by reader: UInt64, events: [Event]) -> (Inbox?, waitFor: UInt64) {
        readsInFlight.removeAll { $0 == ticket }
        let bound = lastRead
        return (takeInbox(reader, settledThrough: bound, after: events), bound)
    }

    /// The reader's inbox, after handing out `events`, once every read with
    /// a ticket up to `bound` has handed its events out; `nil` until then.
    mutating func takeInbox(_ reader: UInt64, settledThrough bound: UInt64, after events: [Event] = []) -> Inbox? {
        for event in events { hand(event, readBy: reader) }
        guard !readsInFlight.contains(where: { $0 <= bound }) else { return nil }
        return takeInbox(reader, after: [])
    }

    /// The wake-ups queued by ``takeInbox(_:after:)``, to call after unlocking.
    mutating func takeWakes() -> [@Sendable () -> Void] {
        guard !wakes.isEmpty else { return [] }
        defer { wakes = [] }
        return wakes
    }

    /// The watches to remove with `inotify_rm_watch` after unlocking, each
    /// then ``retired(_:)``: their file left its path and nobody follows
    /// it. The kernel would keep a renamed directory's watch wherever it
    /// went, and hand the same number back should it be renamed back,
    /// which an ended watch refuses (``add(_:to:)``): removed, the number
    /// is retried until then, and a new watch made after.
    mutating func takeRemovals() -> [CInt] {
        guard !removals.isEmpty else { return [] }
        defer { removals = [] }
        return removals
    }

    #if os(Linux)
        /// inotify's event bits this state tells apart.
        static let overflow = UInt32(IN_Q_OVERFLOW)
        /// The watched directory left its path: removed (`IN_DELETE_SELF`,
        /// sent at once, while `IN_IGNORED` waits until nothing holds the
        /// directory, and an open file inside it does), renamed
        /// (`IN_MOVE_SELF`), or its watch ended (`IN_IGNORED`).
        static let ending = UInt32(IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)
        /// The kernel ended the watch: its file is gone for good.
        static let removal = UInt32(IN_IGNORED)
        static let creation = UInt32(IN_CREATE | IN_MOVED_TO)
        /// An entry left the directory. A directory removed while a file in
        /// it is open sends no event of its own until that file is closed
        /// (the open file holds it), and `rm -rf` removes the entries
        /// first: their departure is the first sign.
        static let departure = UInt32(IN_DELETE | IN_MOVED_FROM)
        static let modification = UInt32(IN_MODIFY)
    #else
        static let (overflow, ending, removal, creation, modification, departure):
            (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32) = (0, 0, 0, 0, 0, 0)
    #endif

    private mutating func hand(_ event: Event, readBy reader: UInt64) {
        let (overflow, ending, creation, modification) = (
            Self.overflow, Self.ending, Self.creation, Self.modification
        )
        if event.mask & overflow != 0 {
            for monitor in inboxes.keys {
                inboxes[monitor]?.overflowed = true
                owe(monitor, readBy: reader)
            }
            return
        }
        // The directory left its path (removed, renamed, or its file system
        // unmounted): a directory made again under the same path is not
        // watched until its monitor watches it again. Not only on IN_IGNORED,
        // which comes once nothing holds the directory any more. Subscribers
        // that follow their file stay until the kernel ends the watch.
        let isLeaving = event.mask & ending != 0
        let isEnded = event.mask & Self.removal != 0
        guard let subscribers = watches[event.watch] else {
            if isEnded { ended(event.watch) } else if isLeaving { retire(event.watch) }
            return
        }
        var staying: [Subscriber] = []
        if isLeaving {
            staying = isEnded ? [] : subscribers.filter(\.followsItsFile)
            watches[event.watch] = staying.isEmpty ? nil : staying
            for subscriber in subscribers
            where !staying.contains(where: { $0.monitor == subscriber.monitor && $0.index == subscriber.index }) {
                forget(SubscriberID(monitor: subscriber.monitor, index: subscriber.index), in: event.watch)
            }
            if isEnded { ended(event.watch) } else if staying.isEmpty { retire(event.watch) }
        }
        // A write to a file matters only to monitors that asked for writes.
        let isWriteOnly = event.mask & ~modification == 0
        for subscriber in subscribers {
            let isLost = isLeaving && !(subscriber.followsItsFile && !isEnded)
            guard isLost || event.mask & subscriber.interest != 0 && (!isWriteOnly || subscriber.includesModifications)
            else { continue }
            guard let slot = inboxes.index(forKey: subscriber.monitor) else { continue }
            inboxes.values[slot].changed.insert(subscriber.index)
            if event.mask & creation != 0 {
                inboxes.values[slot].created.insert(subscriber.index)
                if subscriber.namesEntries { inboxes.values[slot].noteCreated(event.name, in: subscriber.index) }
            }
            if event.mask & Self.departure != 0 { inboxes.values[slot].emptied.insert(subscriber.index) }
            if isLost { inboxes.values[slot].lost.insert(subscriber.index) }
            owe(subscriber.monitor, readBy: reader)
        }
    }

    /// How many created entries' names an inbox keeps until its monitor
    /// takes them: past it, the monitor lists the directory instead.
    static let entriesRemembered = 65_536

    private mutating func owe(_ monitor: UInt64, readBy reader: UInt64) {
        guard monitor != reader, let inbox = inboxes[monitor], !inbox.wakeOwed, let wake = inbox.wake else { return }
        inboxes[monitor]?.wakeOwed = true
        wakes.append(wake)
    }
}

extension ChangeQueueState.Inbox {
    /// Keeps the name of an entry created in watch `index`, or marks the
    /// watch as overflowed (the name was not read, or too many are waiting).
    mutating func noteCreated(_ name: String?, in index: Int) {
        guard !entriesOverflowed.contains(index) else { return }
        guard let name, createdEntryCount < ChangeQueueState.entriesRemembered else {
            entriesOverflowed.insert(index)
            createdEntryCount -= createdEntries.removeValue(forKey: index)?.count ?? 0
            return
        }
        createdEntries[index, default: []].append(name)
        createdEntryCount += 1
    }
}
