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
/// On Linux, an inotify descriptor with one watch per directory: a change made
/// by another process is queued before that process's call returns, so asking
/// right after sees it. Elsewhere, each directory's modification time is
/// compared with the last one seen (one `lstat` per directory and question).
package final class DirectoryMonitor {
    #if os(Linux)
        private let inotify: FileDescriptor
        private var watches: [CInt: Int] = [:]
        private var buffer = [UInt8](repeating: 0, count: 4096)
    #endif
    private var paths: [String] = []
    private var lastModified: [Int: Int64] = [:]
    private var lost: Set<Int> = []
    private var created: Set<Int> = []

    private let includesModifications: Bool

    /// Creates a monitor watching nothing yet. With `includingModifications`,
    /// a write to a file in a watched directory counts as a change too.
    ///
    /// The corresponding C function is `inotify_init1`.
    package init(includingModifications: Bool = false) throws(Errno) {
        includesModifications = includingModifications
        #if os(Linux)
            let descriptor = inotify_init1(CInt(IN_NONBLOCK | IN_CLOEXEC))
            guard descriptor != -1 else { throw Errno.current }
            inotify = FileDescriptor(adopting: descriptor)
        #endif
    }

    /// Starts watching the directory at `path` for entries created, removed or
    /// renamed; returns its index, which ``changes()`` reports.
    ///
    /// The corresponding C function is `inotify_add_watch`.
    package func watch(_ path: String) throws(Errno) -> Int {
        let index = paths.count
        #if os(Linux)
            var mask =
                UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF)
                | UInt32(IN_ONLYDIR | IN_DONT_FOLLOW)
            // A write by another process to a file in the directory (an append to a log).
            if includesModifications { mask |= UInt32(IN_MODIFY) }
            SystemCalls.count()
            let descriptor = inotify_add_watch(inotify.rawValue, path, mask)
            guard descriptor != -1 else { throw Errno.current }
            watches[descriptor] = index
        #else
            if case .success(let info) = SystemCalls.linkStatus(path) { lastModified[index] = info.modifiedNanoseconds }
        #endif
        paths.append(path)
        return index
    }

    /// The indices whose directory went away since the last call, so their
    /// watch ended (inotify's `IN_IGNORED`); watch the path again to follow a
    /// directory made anew there. Also reported by ``changes()`` as changed.
    package func takeLostWatches() -> Set<Int> {
        defer { lost = [] }
        return lost
    }

    /// The indices of the directories where an entry was created or moved
    /// in since the last call; where changes are found by comparing times,
    /// every changed directory (a time does not say what changed).
    package func takeCreations() -> Set<Int> {
        defer { created = [] }
        return created
    }

    /// A descriptor that becomes readable when a change is waiting, for
    /// `poll`; `nil` where changes are found by comparing times instead.
    package var pollDescriptor: CInt? {
        #if os(Linux)
            inotify.rawValue
        #else
            nil
        #endif
    }

    /// The indices of the watched directories that changed since the last
    /// call; `nil` when the monitor lost track (its queue overflowed) and
    /// every directory must be treated as changed.
    package func changes() -> Set<Int>? {
        var changed = Set<Int>()
        #if os(Linux)
            while true {
                SystemCalls.count()
                let count = buffer.withUnsafeMutableBytes { raw in read(inotify.rawValue, raw.baseAddress, raw.count) }
                guard count > 0 else { break }
                // Room for one more event of the longest name was left: the
                // queue is drained (an event arriving later makes the
                // descriptor readable again), so no second read to learn it.
                let drained = count <= buffer.count - (16 + 256)
                var offset = 0
                let headerSize = 16
                while offset + headerSize <= count {
                    let (descriptor, mask, nameLength) = buffer.withUnsafeBytes { raw in
                        (
                            raw.loadUnaligned(fromByteOffset: offset, as: CInt.self),
                            raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self),
                            Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                        )
                    }
                    if mask & UInt32(IN_Q_OVERFLOW) != 0 { return nil }
                    if let index = watches[descriptor] {
                        changed.insert(index)
                        if mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0 { created.insert(index) }
                        // The directory is gone (removed, or its file system
                        // unmounted) and the kernel dropped the watch: a
                        // directory made again under the same path is not
                        // watched until ``watch(_:)`` is called for it again.
                        if mask & UInt32(IN_IGNORED) != 0 {
                            watches[descriptor] = nil
                            lost.insert(index)
                        }
                    }
                    offset += headerSize + nameLength
                }
                if drained { break }
            }
        #else
            for (index, path) in paths.enumerated() {
                guard case .success(let info) = SystemCalls.linkStatus(path) else {
                    changed.insert(index)
                    continue
                }
                let seen = lastModified[index]
                if seen != info.modifiedNanoseconds {
                    changed.insert(index)
                    created.insert(index)
                    lastModified[index] = info.modifiedNanoseconds
                }
            }
        #endif
        return changed
    }
}
