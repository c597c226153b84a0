#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#else
#error("TypedNotifications does not support this platform yet.")
#endif

/// A value guarded by a `pthread_mutex_t`.
///
/// Used instead of `Synchronization.Mutex` because ThreadSanitizer cannot see
/// the futex-based `Mutex` of the Linux toolchain (it reports the accesses it
/// orders as races), while it intercepts `pthread_mutex_lock`; and because it
/// needs no recent Apple OS. Uncontended, both cost one atomic operation.
package final class Locked<Value> {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    /// Creates the lock around `value`.
    package init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        // Default attributes: a normal mutex. pthread_mutex_init cannot fail
        // with default attributes on Linux or Darwin.
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    ///
    /// Do not call out to code that may take this lock again, and keep `body`
    /// short: decide under the lock, act after it.
    ///
    /// The corresponding C functions are `pthread_mutex_lock` and `pthread_mutex_unlock`.
    @inlinable
    package func withLock<Result, Failure: Error>(
        _ body: (inout Value) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        lock()
        defer { unlock() }
        return try body(&valueStorage)
    }

    @usableFromInline
    func lock() { pthread_mutex_lock(mutex) }

    @usableFromInline
    func unlock() { pthread_mutex_unlock(mutex) }

    @usableFromInline
    var valueStorage: Value {
        _read { yield value }
        _modify { yield &value }
    }
}

// Sendable because every access to `value` happens between pthread_mutex_lock
// and pthread_mutex_unlock on `mutex`, which lives as long as the object, and
// only Sendable values can be put in or taken out.
extension Locked: @unchecked Sendable where Value: Sendable {}
