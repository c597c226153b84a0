/// A value reached only under a ``SystemMutex``: for the platform layer's
/// shared state, since ThreadSanitizer sees a pthread mutex and not the
/// futex of `Synchronization.Mutex` (it reports the accesses that mutex
/// orders as races).
package final class SystemLocked<Value>: @unchecked Sendable {
    // Sendable: `value` is read and written only inside `withLock`, between
    // lock and unlock of `mutex`, so one thread at a time, each seeing what
    // the one before it wrote.
    private let mutex = SystemMutex()
    private var value: Value

    /// Holds `value`.
    package init(_ value: Value) {
        self.value = value
    }

    deinit {
        mutex.deallocate()
    }

    /// Runs `body` on the value with the lock held. `body` makes no system
    /// call and calls no user code: decide here, act after.
    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        mutex.lock()
        defer { mutex.unlock() }
        return try body(&value)
    }
}
