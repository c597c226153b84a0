#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// An event that one thread signals once and another thread blocks on until
/// it has been signalled.
///
/// Built on a pthread mutex and condition variable rather than a dispatch
/// semaphore so that ThreadSanitizer sees the ordering it creates: what the
/// signalling thread wrote before `signal()` is visible after `wait()`.
@_spi(TransportAuthoring) public final class OneShotEvent: @unchecked Sendable {
    // Sendable: `signalled` and `waiting` are read and written only between
    // lock and unlock of `mutex`; the two pthread objects exist to be shared
    // between threads and their addresses never change.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var signalled = false
    private var waiting: [@Sendable () -> Void] = []

    /// Creates an event that has not been signalled.
    ///
    /// The corresponding C functions are `pthread_mutex_init` and `pthread_cond_init`.
    @_spi(TransportAuthoring) public init() {
        mutex.initialize(to: pthread_mutex_t())
        condition.initialize(to: pthread_cond_t())
        // Neither fails with these attributes on Linux or Darwin.
        pthread_mutex_init(mutex, nil)
        #if canImport(Darwin)
            // Darwin's timed wait below takes a relative time instead.
            pthread_cond_init(condition, nil)
        #else
            // Timed waits measure the monotonic clock: a step of the wall
            // clock (a time server, a person setting the time) must neither
            // end a wait early nor stretch it.
            var attributes = pthread_condattr_t()
            pthread_condattr_init(&attributes)
            pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
            pthread_cond_init(condition, &attributes)
            pthread_condattr_destroy(&attributes)
        #endif
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Marks the event signalled, wakes the threads blocked in ``wait()``,
    /// and runs what ``whenSignalled(_:)`` was given, on this thread, after
    /// unlocking. Later calls do nothing more.
    ///
    /// The corresponding C function is `pthread_cond_broadcast`.
    @_spi(TransportAuthoring) public func signal() {
        pthread_mutex_lock(mutex)
        signalled = true
        let bodies = waiting
        waiting = []
        pthread_cond_broadcast(condition)
        pthread_mutex_unlock(mutex)
        for body in bodies { body() }
    }

    /// Whether ``signal()`` has been called.
    @_spi(TransportAuthoring) public var isSignalled: Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return signalled
    }

    /// Runs `body` once the event is signalled: on the thread that signals
    /// it, or at once on this one when it has been.
    @_spi(TransportAuthoring) public func whenSignalled(_ body: @escaping @Sendable () -> Void) {
        pthread_mutex_lock(mutex)
        let now = signalled
        if !now { waiting.append(body) }
        pthread_mutex_unlock(mutex)
        if now { body() }
    }

    /// Blocks the calling thread until ``signal()`` has been called; returns at
    /// once if it already was.
    ///
    /// The corresponding C function is `pthread_cond_wait`.
    @_spi(TransportAuthoring) public func wait() {
        pthread_mutex_lock(mutex)
        // A loop, because pthread_cond_wait may wake spuriously.
        while !signalled {
            pthread_cond_wait(condition, mutex)
        }
        pthread_mutex_unlock(mutex)
    }

    /// Blocks the calling thread until ``signal()`` has been called or
    /// `nanoseconds` have passed on the monotonic clock (a step of the wall
    /// clock changes neither). Returns whether it was signalled.
    ///
    /// The corresponding C function is `pthread_cond_timedwait` (on Darwin,
    /// `pthread_cond_timedwait_relative_np`).
    @_spi(TransportAuthoring) public func wait(nanoseconds: UInt64) -> Bool {
        let deadline = SystemClock.monotonicNanoseconds() &+ min(nanoseconds, UInt64(Int64.max) / 2)
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !signalled {
            let now = SystemClock.monotonicNanoseconds()
            guard now < deadline else { return false }
            #if canImport(Darwin)
                let left = deadline - now
                var relative = timespec(tv_sec: Int(left / 1_000_000_000), tv_nsec: Int(left % 1_000_000_000))
                _ = pthread_cond_timedwait_relative_np(condition, mutex, &relative)
            #else
                var until = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
                _ = pthread_cond_timedwait(condition, mutex, &until)
            #endif
        }
        return true
    }
}
