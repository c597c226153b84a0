#if os(Linux)
    #if canImport(Glibc)
        import Glibc
    #elseif canImport(Musl)
        import Musl
    #endif

    /// ``PathWatcher``'s change queue on Linux: an inotify instance of its
    /// own, read with a blocking `read` by the watcher's thread. A watch is
    /// the kernel's watch descriptor, which every watch of the same file in
    /// the instance shares (`IN_MASK_ADD` keeps what each asked for).
    final class PathWatchQueue: Sendable {
        private let descriptor: CInt

        /// Watches of one file share its kernel watch.
        static let sharesWatches = true

        /// The corresponding C function is `inotify_init1`.
        init() throws(ChangeMonitorError) {
            SystemCalls.count()
            let made = inotify_init1(CInt(IN_CLOEXEC))
            guard made != -1 else { throw ChangeMonitorError(creating: Errno.current) }
            descriptor = made
        }

        deinit {
            close(descriptor)
        }

        /// The corresponding C function is `inotify_add_watch`.
        func add(_ path: String, events: PathEvents) throws(ChangeMonitorError) -> Int {
            var mask = UInt32(IN_DONT_FOLLOW | IN_MASK_ADD)
            if events.contains(.removedOrMoved) { mask |= UInt32(IN_DELETE_SELF | IN_MOVE_SELF) }
            if events.contains(.attributes) { mask |= UInt32(IN_ATTRIB) }
            if events.contains(.entries) { mask |= UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) }
            SystemCalls.count()
            let watch = inotify_add_watch(descriptor, path, mask)
            guard watch != -1 else { throw ChangeMonitorError(watching: Errno.current) }
            return Int(watch)
        }

        /// The corresponding C function is `inotify_rm_watch`.
        func remove(_ key: Int) {
            SystemCalls.count()
            _ = inotify_rm_watch(descriptor, Int32(truncatingIfNeeded: key))
        }

        /// Sleeps until events come and appends them to `reports`. Returns
        /// `false` if the queue cannot be read any more.
        ///
        /// The corresponding C function is `read`.
        func wait(into reports: inout [PathWatchReport]) -> Bool {
            // Room for many events, each at least 16 bytes, and for one of
            // the longest name (NAME_MAX + 1 bytes past its header).
            let capacity = 16_384
            return withUnsafeTemporaryAllocation(byteCount: capacity, alignment: 8) { buffer -> Bool in
                guard
                    case .success(let count) = SystemCalls.retrying({ read(descriptor, buffer.baseAddress, capacity) })
                else { return false }
                var offset = 0
                let header = 16
                while offset + header <= count {
                    let watch = buffer.loadUnaligned(fromByteOffset: offset, as: Int32.self)
                    let mask = buffer.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                    let length = Int(buffer.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                    offset += header + length
                    if mask & UInt32(IN_Q_OVERFLOW) != 0 {
                        reports.append(.overflowed)
                        continue
                    }
                    var events: PathEvents = []
                    if mask & UInt32(IN_DELETE_SELF | IN_MOVE_SELF) != 0 { events.insert(.removedOrMoved) }
                    if mask & UInt32(IN_ATTRIB) != 0 { events.insert(.attributes) }
                    if mask & UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) != 0 {
                        events.insert(.entries)
                    }
                    let ended = mask & UInt32(IN_IGNORED | IN_UNMOUNT) != 0
                    if ended { events.insert(.removedOrMoved) }
                    reports.append(.changed(key: Int(watch), events: events, ended: ended))
                }
                return true
            }
        }
    }
#endif
