import CTypedNotifications

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// Waits until registered descriptors are readable, or until another thread
/// wakes it: `epoll` and an `eventfd` on Linux, `kqueue` and a user event on
/// Apple platforms. Level-triggered, so a handler that reads only part of
/// what is waiting is told again.
///
/// Only ``EventLoop`` uses it: one thread waits (``wait(milliseconds:into:)``
/// uses a buffer of the poller's own), any thread adds, removes and wakes.
final class EventPoller {
    private static let capacity = 64
    private let queue: FileDescriptor
    #if canImport(Darwin)
        private let events: UnsafeMutablePointer<kevent>
    #else
        private let wakeDescriptor: FileDescriptor
        private let events: UnsafeMutablePointer<epoll_event>
    #endif

    /// Creates the poller.
    ///
    /// The corresponding C functions are `epoll_create1` and `eventfd` (Linux)
    /// or `kqueue` (Apple platforms).
    init() throws(Errno) {
        #if canImport(Darwin)
            let queue = try SystemCalls.retrying { kqueue() }.map(FileDescriptor.init(adopting:)).get()
            var change = kevent(
                ident: 0, filter: Int16(EVFILT_USER), flags: UInt16(EV_ADD | EV_CLEAR), fflags: 0, data: 0,
                udata: nil)
            if case .failure(let error) = SystemCalls.retrying({ kevent(queue.rawValue, &change, 1, nil, 0, nil) }) {
                throw error
            }
            self.queue = queue
            self.events = .allocate(capacity: EventPoller.capacity)
        #else
            let queue = try SystemCalls.retrying { epoll_create1(CInt(EPOLL_CLOEXEC)) }.map(
                FileDescriptor.init(adopting:)
            )
            .get()
            let wake = try SystemCalls.retrying { eventfd(0, CInt(EFD_CLOEXEC | EFD_NONBLOCK)) }
                .map(FileDescriptor.init(adopting:)).get()
            var event = epoll_event()
            event.events = EPOLLIN.rawValue
            event.data.fd = wake.rawValue
            if case .failure(let error) = SystemCalls.retrying({
                epoll_ctl(queue.rawValue, EPOLL_CTL_ADD, wake.rawValue, &event)
            }) {
                throw error
            }
            self.queue = queue
            self.wakeDescriptor = wake
            self.events = .allocate(capacity: EventPoller.capacity)
        #endif
    }

    deinit {
        events.deallocate()
    }

    /// Starts watching `descriptor` for readability. With `exclusive`, a
    /// descriptor that other pollers watch too (the shared inotify queue)
    /// wakes one of them per event rather than every one (`EPOLLEXCLUSIVE`).
    ///
    /// The corresponding C function is `epoll_ctl` (Linux) or `kevent` (Apple platforms).
    func add(_ descriptor: CInt, exclusive: Bool = false) -> Result<Void, Errno> {
        #if canImport(Darwin)
            var change = kevent(
                ident: UInt(descriptor), filter: Int16(EVFILT_READ), flags: UInt16(EV_ADD | EV_ENABLE), fflags: 0,
                data: 0, udata: nil)
            return SystemCalls.retrying { kevent(queue.rawValue, &change, 1, nil, 0, nil) }.map { _ in }
        #else
            var event = epoll_event()
            event.events = EPOLLIN.rawValue | (exclusive ? EPOLLEXCLUSIVE.rawValue : 0)
            event.data.fd = descriptor
            return SystemCalls.retrying { epoll_ctl(queue.rawValue, EPOLL_CTL_ADD, descriptor, &event) }.map { _ in }
        #endif
    }

    /// Stops watching `descriptor`.
    ///
    /// The corresponding C function is `epoll_ctl` (Linux) or `kevent` (Apple platforms).
    func remove(_ descriptor: CInt) {
        #if canImport(Darwin)
            var change = kevent(
                ident: UInt(descriptor), filter: Int16(EVFILT_READ), flags: UInt16(EV_DELETE), fflags: 0, data: 0,
                udata: nil)
            _ = SystemCalls.retrying { kevent(queue.rawValue, &change, 1, nil, 0, nil) }
        #else
            var event = epoll_event()
            _ = SystemCalls.retrying { epoll_ctl(queue.rawValue, EPOLL_CTL_DEL, descriptor, &event) }
        #endif
    }

    /// Makes the current or next ``wait(milliseconds:into:)`` return.
    ///
    /// The corresponding C function is `write` on the eventfd (Linux) or
    /// `kevent` with `NOTE_TRIGGER` (Apple platforms).
    func wake() {
        #if canImport(Darwin)
            var change = kevent(
                ident: 0, filter: Int16(EVFILT_USER), flags: 0, fflags: UInt32(NOTE_TRIGGER), data: 0, udata: nil)
            _ = SystemCalls.retrying { kevent(queue.rawValue, &change, 1, nil, 0, nil) }
        #else
            var one: UInt64 = 1
            _ = SystemCalls.retrying { write(wakeDescriptor.rawValue, &one, 8) }
        #endif
    }

    /// Waits at most `milliseconds` (-1: without limit) and puts the
    /// descriptors that are readable into `ready`; a wake-up is consumed and
    /// not listed.
    ///
    /// The corresponding C function is `epoll_wait` (Linux) or `kevent` (Apple platforms).
    func wait(milliseconds: CInt, into ready: inout [CInt]) {
        ready.removeAll(keepingCapacity: true)
        #if canImport(Darwin)
            var limit = timespec(tv_sec: Int(milliseconds / 1000), tv_nsec: Int(milliseconds % 1000) * 1_000_000)
            let count = withUnsafePointer(to: &limit) { limitPointer in
                SystemCalls.retrying {
                    kevent(
                        queue.rawValue, nil, 0, events, CInt(EventPoller.capacity),
                        milliseconds < 0 ? nil : limitPointer)
                }
            }
            guard case .success(let found) = count else { return }
            for index in 0..<Int(found) where events[index].filter == Int16(EVFILT_READ) {
                ready.append(CInt(events[index].ident))
            }
        #else
            let count = SystemCalls.retrying {
                epoll_wait(queue.rawValue, events, CInt(EventPoller.capacity), milliseconds)
            }
            guard case .success(let found) = count else { return }
            for index in 0..<Int(found) {
                let event = events[index]
                if event.data.fd == wakeDescriptor.rawValue {
                    var count: UInt64 = 0
                    _ = read(wakeDescriptor.rawValue, &count, 8)
                } else {
                    ready.append(event.data.fd)
                }
            }
        #endif
    }
}
