#if canImport(Darwin)
    import Darwin

    /// The struct `kevent`, named apart from the function of that name.
    private typealias KernelEvent = kevent

    /// ``PathWatcher``'s change queue on Apple platforms: a kqueue of its
    /// own, waited on by the watcher's thread with no timeout. A watch is a
    /// descriptor opened for events only (`O_EVTONLY`, which does not keep a
    /// volume from unmounting) with an `EVFILT_VNODE` filter; closing it
    /// ends the filter.
    final class PathWatchQueue: Sendable {
        private let descriptor: CInt

        /// Each watch has a descriptor of its own.
        static let sharesWatches = false

        private static let removedOrMoved = UInt32(NOTE_DELETE | NOTE_RENAME | NOTE_REVOKE)
        private static let attributes = UInt32(NOTE_ATTRIB | NOTE_LINK)
        private static let entries = UInt32(NOTE_WRITE | NOTE_LINK)

        /// The corresponding C function is `kqueue`.
        init() throws(ChangeMonitorError) {
            SystemCalls.count()
            let made = kqueue()
            guard made != -1 else { throw ChangeMonitorError(creating: Errno.current) }
            descriptor = made
        }

        deinit {
            close(descriptor)
        }

        /// The corresponding C functions are `open` and `kevent`.
        func add(_ path: String, events: PathEvents) throws(ChangeMonitorError) -> Int {
            SystemCalls.count()
            // O_SYMLINK: a symbolic link itself, as inotify's IN_DONT_FOLLOW.
            let file = open(path, O_EVTONLY | O_SYMLINK | O_CLOEXEC)
            guard file != -1 else { throw ChangeMonitorError(watching: Errno.current) }
            var flags: UInt32 = 0
            if events.contains(.removedOrMoved) { flags |= Self.removedOrMoved }
            if events.contains(.attributes) { flags |= Self.attributes }
            if events.contains(.entries) { flags |= Self.entries }
            var change = kevent(
                ident: UInt(file), filter: Int16(EVFILT_VNODE), flags: UInt16(EV_ADD | EV_CLEAR), fflags: flags,
                data: 0, udata: nil)
            SystemCalls.count()
            guard kevent(descriptor, &change, 1, nil, 0, nil) != -1 else {
                let error = Errno.current
                close(file)
                throw ChangeMonitorError(watching: error)
            }
            return Int(file)
        }

        /// Closing the descriptor ends its filter.
        ///
        /// The corresponding C function is `close`.
        func remove(_ key: Int) {
            SystemCalls.count()
            close(CInt(truncatingIfNeeded: key))
        }

        /// Sleeps until events come and appends them to `reports`. Returns
        /// `false` if the queue cannot be waited on any more.
        ///
        /// The corresponding C function is `kevent`.
        func wait(into reports: inout [PathWatchReport]) -> Bool {
            var events = [KernelEvent](repeating: KernelEvent(), count: 32)
            SystemCalls.count()
            let count = kevent(descriptor, nil, 0, &events, CInt(events.count), nil)
            guard count >= 0 else { return errno == EINTR }
            for event in events.prefix(Int(count)) {
                var changed: PathEvents = []
                if event.fflags & Self.removedOrMoved != 0 { changed.insert(.removedOrMoved) }
                if event.fflags & Self.attributes != 0 { changed.insert(.attributes) }
                if event.fflags & Self.entries != 0 { changed.insert(.entries) }
                reports.append(.changed(key: Int(event.ident), events: changed, ended: false))
            }
            return true
        }
    }
#endif
