import NotificationPlatform

/// A value guarded by a mutex.
///
/// Keep the closure short and never call out from it: decide under the lock,
/// act after it.
package final class Locked<Value> {
    private let mutex = SystemMutex()
    private var value: Value

    /// Creates the lock around `value`.
    package init(_ value: Value) {
        self.value = value
    }

    deinit {
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    package func withLock<Result, Failure: Error>(
        _ body: (inout Value) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        mutex.lock()
        defer { mutex.unlock() }
        return try body(&value)
    }
}

// Sendable: every access to `value` happens inside `withLock`, between
// lock and unlock of `mutex`, which lives as long as the object; only
// Sendable values can be put in or taken out.
extension Locked: @unchecked Sendable where Value: Sendable {}
