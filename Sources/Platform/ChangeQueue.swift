import Synchronization

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
        private static let current = Mutex<ChangeQueue?>(nil)

        let descriptor: FileDescriptor
        let state = Mutex(ChangeQueueState())

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

        /// A new queue of its own.
        static func make() throws(ChangeMonitorError) -> ChangeQueue {
            SystemCalls.count()
            let descriptor = inotify_init1(CInt(IN_NONBLOCK | IN_CLOEXEC))
            guard descriptor != -1 else { throw ChangeMonitorError(creating: Errno.current) }
            return ChangeQueue(FileDescriptor(adopting: descriptor))
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
    }

    /// One event as read: its watch and its mask.
    struct Event {
        var watch: CInt
        var mask: UInt32
    }

    /// What a monitor has been handed since it last asked.
    struct Inbox {
        var changed: Set<Int> = []
        var created: Set<Int> = []
        var lost: Set<Int> = []
        var overflowed = false
        var wakeOwed = false
        var wake: (@Sendable () -> Void)?
    }

    private(set) var watches: [CInt: [Subscriber]] = [:]
    private(set) var retiring: Set<CInt> = []
    var inboxes: [UInt64: Inbox] = [:]
    private var nextMonitor: UInt64 = 0
    private var wakes: [@Sendable () -> Void] = []

    /// A new monitor's identifier.
    mutating func addMonitor() -> UInt64 {
        nextMonitor += 1
        inboxes[nextMonitor] = Inbox()
        return nextMonitor
    }

    /// Forgets a monitor; returns the watches nobody listens to now, which
    /// the caller removes (``retired(_:)`` once each is gone).
    mutating func removeMonitor(_ monitor: UInt64) -> [CInt] {
        inboxes[monitor] = nil
        var retire: [CInt] = []
        for (watch, subscribers) in watches where subscribers.contains(where: { $0.monitor == monitor }) {
            let left = subscribers.filter { $0.monitor != monitor }
            if left.isEmpty {
                watches[watch] = nil
                retiring.insert(watch)
                retire.append(watch)
            } else {
                watches[watch] = left
            }
        }
        return retire
    }

    /// Adds a subscriber to the watch the kernel returned; false when that
    /// watch is being removed, so the caller must add it again after.
    mutating func add(_ subscriber: Subscriber, to watch: CInt) -> Bool {
        guard !retiring.contains(watch) else { return false }
        watches[watch, default: []].append(subscriber)
        return true
    }

    /// The kernel removed a retired watch.
    mutating func retired(_ watch: CInt) {
        retiring.remove(watch)
    }

    /// Hands `events` (read by `reader`) to the monitors that listen, then
    /// takes what `reader` was handed. Monitors handed something by another
    /// reader get their wake-up queued, once, for ``takeWakes()``.
    mutating func takeInbox(_ reader: UInt64, after events: [Event]) -> Inbox {
        for event in events { hand(event, readBy: reader) }
        guard var inbox = inboxes[reader] else { return Inbox() }
        let taken = inbox
        inbox.changed = []
        inbox.created = []
        inbox.lost = []
        inbox.overflowed = false
        inbox.wakeOwed = false
        inboxes[reader] = inbox
        return taken
    }

    /// The wake-ups queued by ``takeInbox(_:after:)``, to call after unlocking.
    mutating func takeWakes() -> [@Sendable () -> Void] {
        defer { wakes = [] }
        return wakes
    }

    #if os(Linux)
        /// inotify's event bits this state tells apart.
        static let overflow = UInt32(IN_Q_OVERFLOW)
        static let ignored = UInt32(IN_IGNORED)
        static let creation = UInt32(IN_CREATE | IN_MOVED_TO)
        static let modification = UInt32(IN_MODIFY)
    #else
        static let (overflow, ignored, creation, modification): (UInt32, UInt32, UInt32, UInt32) = (0, 0, 0, 0)
    #endif

    private mutating func hand(_ event: Event, readBy reader: UInt64) {
        let (overflow, ignored, creation, modification) = (
            Self.overflow, Self.ignored, Self.creation, Self.modification
        )
        if event.mask & overflow != 0 {
            for monitor in inboxes.keys {
                inboxes[monitor]?.overflowed = true
                owe(monitor, readBy: reader)
            }
            return
        }
        guard let subscribers = watches[event.watch] else { return }
        // The directory is gone (removed, or its file system unmounted) and
        // the kernel dropped the watch: a directory made again under the same
        // path is not watched until its monitor watches it again.
        let isLost = event.mask & ignored != 0
        if isLost { watches[event.watch] = nil }
        // A write to a file matters only to monitors that asked for writes.
        let isWriteOnly = event.mask & ~modification == 0
        for subscriber in subscribers where !isWriteOnly || subscriber.includesModifications || isLost {
            guard inboxes[subscriber.monitor] != nil else { continue }
            inboxes[subscriber.monitor]?.changed.insert(subscriber.index)
            if event.mask & creation != 0 { inboxes[subscriber.monitor]?.created.insert(subscriber.index) }
            if isLost { inboxes[subscriber.monitor]?.lost.insert(subscriber.index) }
            owe(subscriber.monitor, readBy: reader)
        }
    }

    private mutating func owe(_ monitor: UInt64, readBy reader: UInt64) {
        guard monitor != reader, let inbox = inboxes[monitor], !inbox.wakeOwed, let wake = inbox.wake else { return }
        inboxes[monitor]?.wakeOwed = true
        wakes.append(wake)
    }
}
