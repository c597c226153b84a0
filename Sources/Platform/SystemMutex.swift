#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// A heap-allocated `pthread_mutex_t` at a stable address.
///
/// Non-generic so that it costs no metadata lookups across modules; the core
/// wraps it in a generic `Locked` value box. Chosen over
/// `Synchronization.Mutex` because ThreadSanitizer cannot see the futex-based
/// `Mutex` of the Linux toolchain (it reports the accesses it orders as
/// races), while it intercepts `pthread_mutex_lock`.
package struct SystemMutex: @unchecked Sendable {
    // Sendable: a pthread mutex exists to be shared between threads; the
    // pointer itself is never reassigned.
    @usableFromInline
    let pointer: UnsafeMutablePointer<pthread_mutex_t>

    /// Allocates and initializes a normal mutex.
    ///
    /// The corresponding C function is `pthread_mutex_init`.
    package init() {
        pointer = .allocate(capacity: 1)
        pointer.initialize(to: pthread_mutex_t())
        // Cannot fail with default attributes on Linux or Darwin.
        pthread_mutex_init(pointer, nil)
    }

    /// Destroys and frees the mutex. Call once, when nothing can use it again.
    ///
    /// The corresponding C function is `pthread_mutex_destroy`.
    package func deallocate() {
        pthread_mutex_destroy(pointer)
        pointer.deinitialize(count: 1)
        pointer.deallocate()
    }

    /// The corresponding C function is `pthread_mutex_lock`.
    @inlinable
    package func lock() { pthread_mutex_lock(pointer) }

    /// The corresponding C function is `pthread_mutex_unlock`.
    @inlinable
    package func unlock() { pthread_mutex_unlock(pointer) }
}
