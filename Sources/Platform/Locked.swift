/// A value guarded by a mutex: the one lock every module of the package uses.
///
/// A pthread mutex (``SystemMutex``), not `Synchronization.Mutex`, because
/// ThreadSanitizer sees a pthread mutex and not that one's futex (it
/// reports the accesses the futex orders as races).
///
/// Keep the closure short and never call out from it: make no system call
/// and call no user code under the lock. Decide under it, act after it.
@_spi(TransportAuthoring) public final class Locked<Value> {
    private let mutex = SystemMutex()
    private var value: Value

    /// Creates the lock around `value`.
    @_spi(TransportAuthoring) public init(_ value: sending Value) {
        self.value = value
    }

    deinit {
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    @_spi(TransportAuthoring) public func withLock<Result, Failure: Error>(
        _ body: (inout sending Value) throws(Failure) -> sending Result
    ) throws(Failure) -> sending Result {
        mutex.lock()
        defer { mutex.unlock() }
        return try body(&value)
    }
}

// Sendable for any value, as the standard library's Mutex is: every access to
// `value` happens inside `withLock`, between lock and unlock of `mutex`, which
// lives as long as the object; and values enter and leave only as `sending`,
// so the compiler proves no non-Sendable state is reachable from outside.
extension Locked: @unchecked Sendable {}
