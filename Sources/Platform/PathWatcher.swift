import CTypedNotifications
import Foundation
import Synchronization

/// What a watch of a file or directory reports.
package struct PathEvents: OptionSet, Sendable {
    package let rawValue: UInt8

    package init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    /// The file itself was removed, or moved away from its path.
    package static let removedOrMoved = PathEvents(rawValue: 1 << 0)
    /// Its link count or another attribute changed: one of its hard links
    /// was made or removed, say.
    package static let attributes = PathEvents(rawValue: 1 << 1)
    /// An entry was made, removed or moved in or out of the directory.
    package static let entries = PathEvents(rawValue: 1 << 2)
}

/// Calls back when a watched file or directory changes, from one thread per
/// process that sleeps in the system's change queue until a change comes:
/// inotify on Linux (``PathWatchQueue``'s inotify file), `EVFILT_VNODE` on a
/// kqueue on Apple platforms (its kqueue file). An idle process makes no
/// system call for it.
///
/// Each watch costs the process one kernel watch (Linux: one per file and
/// instance, shared by watches of the same file) or one descriptor (Apple),
/// never a thread: every watch of the process is served by the same thread,
/// made at the first watch. Callbacks run on that thread, after its lock
/// is released; they must be quick (hand the work to an event loop), and a
/// change may be reported more than once, or reported as a change of every
/// watch when the kernel's queue overflowed, so a callback looks at what
/// it cares about rather than trusting the event.
package final class PathWatcher: Sendable {
    private let queue: PathWatchQueue
    private let state = Locked(PathWatcherState())
    private let broadcastCount = Atomic<Int>(0)

    private static let current = Locked<PathWatcher?>(nil)

    private init(_ queue: PathWatchQueue) {
        self.queue = queue
    }

    /// The process's watcher, made (with its thread) on first use. A
    /// failure is not kept: the next caller tries again.
    package static func shared() throws(ChangeMonitorError) -> PathWatcher {
        let existing = current.withLock { $0 }
        if let existing { return existing }
        let made = PathWatcher(try PathWatchQueue())
        let (watcher, isNew) = current.withLock { current -> (PathWatcher, Bool) in
            if let current { return (current, false) }
            current = made
            return (made, true)
        }
        if isNew {
            let thread = Thread { watcher.run() }
            thread.name = "TypedNotifications.PathWatcher"
            thread.start()
        }
        return watcher
    }

    /// Watches the file or directory at `path` (a symbolic link itself, not
    /// what it points to) for `events`, calling `changed` on the watcher's
    /// thread when one happens, until the returned watch is cancelled or
    /// released.
    package func watch(
        _ path: String, for events: PathEvents, _ changed: @escaping @Sendable () -> Void
    ) throws(ChangeMonitorError) -> PathWatch {
        while true {
            let key = try queue.add(path, events: events)
            let added = state.withLock { state -> (token: UInt64, early: Bool)? in
                state.add(Listener(events: events, changed: changed), to: key, shared: PathWatchQueue.sharesWatches)
            }
            // The last watch of that file is being removed right now: once
            // it is gone, adding makes a new one.
            guard let added else {
                sched_yield()
                continue
            }
            // A change reported between the kernel's watch and the listener.
            if added.early { changed() }
            return PathWatch(watcher: self, key: key, token: added.token)
        }
    }

    /// Calls `changed` on the watcher's thread when a file system is
    /// mounted or unmounted anywhere in the process's view (Linux: a mount
    /// over a watched directory sends inotify nothing), and when the
    /// kernel's queue overflowed, until the returned watch is cancelled or
    /// released. Never on Apple platforms. The callback decides, with a few
    /// `lstat`s, whether the mount concerns it: it runs for every mount.
    package func watchMounts(_ changed: @escaping @Sendable () -> Void) -> PathWatch {
        let token = state.withLock { state in
            state.add(Listener(events: [], changed: changed), to: PathWatcherState.mountKey, shared: false)?.token ?? 0
        }
        return PathWatch(watcher: self, key: PathWatcherState.mountKey, token: token)
    }

    /// Ends one listener; removes the kernel's watch once nobody listens.
    fileprivate func cancel(key: Int, token: UInt64) {
        guard state.withLock({ $0.remove(token, from: key) }), key != PathWatcherState.mountKey else { return }
        queue.remove(key)
        state.withLock { $0.removed(key) }
    }

    /// How many times every watch was called at once, the kernel's queue
    /// having overflowed. For tests and diagnostics.
    package var broadcasts: Int { broadcastCount.load(ordering: .acquiring) }

    private func run() {
        ctn_name_current_thread("PathWatcher")
        var reports: [PathWatchReport] = []
        while true {
            reports.removeAll(keepingCapacity: true)
            guard queue.wait(into: &reports) else { return }
            if reports.contains(where: { if case .overflowed = $0 { true } else { false } }) {
                broadcastCount.add(1, ordering: .releasing)
            }
            let callbacks = state.withLock { $0.callbacks(for: reports) }
            for changed in callbacks { changed() }
        }
    }
}

/// One listener of a ``PathWatcher``; cancelled when released.
package final class PathWatch: Sendable {
    private let watcher: PathWatcher
    private let key: Int
    private let token: UInt64
    private let isCancelled = Atomic<Bool>(false)

    fileprivate init(watcher: PathWatcher, key: Int, token: UInt64) {
        self.watcher = watcher
        self.key = key
        self.token = token
    }

    /// Stops the callbacks; one already running may still end. Idempotent.
    package func cancel() {
        guard !isCancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        watcher.cancel(key: key, token: token)
    }

    deinit {
        cancel()
    }
}

/// What one wait of a ``PathWatchQueue`` found.
enum PathWatchReport {
    /// The kernel dropped events: every watch may have changed.
    case overflowed
    /// A file system was mounted or unmounted: for the mount watches.
    case mounted
    /// The watch `key` saw `events`; `ended` when the kernel ended the
    /// watch (its file is gone).
    case changed(key: Int, events: PathEvents, ended: Bool)
}

private struct Listener {
    let events: PathEvents
    let changed: @Sendable () -> Void
}

/// The listeners of one watch. Most watches have one (a socket's own file,
/// a spool directory): kept inline, with no table of its own, which a
/// thousand hubs each watching a few such paths would pay for.
private enum Listeners {
    case one(token: UInt64, Listener)
    case many([UInt64: Listener])

    mutating func add(_ listener: Listener, token: UInt64) {
        switch self {
        case .one(let first, let firstListener):
            self = .many([first: firstListener, token: listener])
        case .many(var all):
            // Let go of this copy first, so the table grows in place.
            self = .one(token: token, listener)
            all[token] = listener
            self = .many(all)
        }
    }

    /// Removes `token`'s listener: whether it was here, and whether any
    /// is left (the caller forgets an empty one).
    mutating func remove(_ token: UInt64) -> (removed: Bool, empty: Bool) {
        switch self {
        case .one(let only, _):
            return (only == token, only == token)
        case .many(var all):
            // Let go of this copy first, so the table shrinks in place.
            self = .one(token: 0, Listener(events: [], changed: {}))
            let removed = all.removeValue(forKey: token) != nil
            if all.count == 1, let (last, listener) = all.first {
                self = .one(token: last, listener)
            } else {
                self = .many(all)
            }
            return (removed, all.isEmpty)
        }
    }

    func visit(_ body: (UInt64, Listener) -> Void) {
        switch self {
        case .one(let token, let listener): body(token, listener)
        case .many(let all): for (token, listener) in all { body(token, listener) }
        }
    }
}

/// Who listens to which kernel watch. A value: decided under the lock, the
/// system calls made after.
private struct PathWatcherState {
    /// The key of the mount watches: never a kernel watch's.
    static let mountKey = Int.min
    private var listeners: [Int: Listeners] = [:]
    private var removing: Set<Int> = []
    private var nextToken: UInt64 = 0
    // Changes of keys nobody listens to yet: a watch's change can be read
    // between the kernel's watch and its listener. Kept for a few keys.
    private var early: Set<Int> = []
    private static let earlyRemembered = 256

    /// Adds a listener to the watch `key`; `nil` while a `shared` watch
    /// (one the kernel hands every watch of a file) is being removed: the
    /// caller adds it again. A watch of its own (a descriptor) is new even
    /// when its number was just let go.
    /// Also says whether a change of `key` was reported before anybody
    /// listened: the caller calls the listener once.
    mutating func add(_ listener: Listener, to key: Int, shared: Bool) -> (token: UInt64, early: Bool)? {
        if shared {
            guard !removing.contains(key) else { return nil }
        } else {
            removing.remove(key)
        }
        nextToken &+= 1
        if listeners[key] == nil {
            listeners[key] = .one(token: nextToken, listener)
        } else {
            listeners[key]?.add(listener, token: nextToken)
        }
        return (nextToken, early.remove(key) != nil)
    }

    /// Removes a listener; returns whether the kernel's watch must go (then
    /// ``removed(_:)`` once it has).
    mutating func remove(_ token: UInt64, from key: Int) -> Bool {
        guard let (removed, empty) = listeners[key]?.remove(token), removed, empty else { return false }
        listeners[key] = nil
        removing.insert(key)
        return true
    }

    mutating func removed(_ key: Int) {
        removing.remove(key)
    }

    /// The callbacks `reports` call for, each once. A watch the kernel
    /// ended (its file gone) loses its listeners.
    mutating func callbacks(for reports: [PathWatchReport]) -> [@Sendable () -> Void] {
        // Tokens are unique across watches.
        var called: Set<UInt64> = []
        var callbacks: [@Sendable () -> Void] = []
        func call(_ token: UInt64, _ listener: Listener) {
            guard called.insert(token).inserted else { return }
            callbacks.append(listener.changed)
        }
        for report in reports {
            switch report {
            case .overflowed:
                for keyed in listeners.values { keyed.visit(call) }
            case .mounted:
                listeners[Self.mountKey]?.visit(call)
            case .changed(let key, let events, let ended):
                guard listeners[key] != nil else {
                    if early.count >= Self.earlyRemembered { early.removeAll() }
                    early.insert(key)
                    continue
                }
                listeners[key]?.visit { token, listener in
                    if !listener.events.isDisjoint(with: events) || ended { call(token, listener) }
                }
                if ended { listeners[key] = nil }
            }
        }
        return callbacks
    }
}
