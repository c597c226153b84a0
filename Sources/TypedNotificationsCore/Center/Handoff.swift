import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Blocks one thread until another hands it a value, once.
///
/// Where the value usually comes within microseconds, the waiting thread
/// first watches an atomic flag for up to `spinningFor` nanoseconds and only
/// then blocks on an event, so it usually returns without the futex sleep
/// and wake-up that blocking costs.
final class Handoff<Value: Sendable>: @unchecked Sendable {
    // Sendable: `value` is written once, by the one thread that calls
    // `hand`, before its releasing store to `handed`, and read by the waiting
    // thread only after an acquiring load saw that store (directly, or after
    // `event.wait()`, which returns only after `hand` signalled it).
    private let handed = Atomic<Bool>(false)
    private let event = OneShotEvent()
    private var value: Value
    private let spinNanoseconds: UInt64

    /// A hand-off holding `placeholder` until a value is handed.
    init(placeholder: Value, spinningFor spinNanoseconds: UInt64 = 0) {
        value = placeholder
        self.spinNanoseconds = spinNanoseconds
    }

    /// Hands `value` to the waiting thread and wakes it. Called once.
    func wake(_ value: Value) {
        self.value = value
        handed.store(true, ordering: .releasing)
        event.signal()
    }

    /// Blocks until a value is handed, and returns it.
    func wait() -> Value {
        if spinNanoseconds > 0 {
            let deadline = SystemClock.monotonicNanoseconds() &+ spinNanoseconds
            var spins = 0
            while !handed.load(ordering: .acquiring) {
                spins &+= 1
                if spins & 63 == 0, SystemClock.monotonicNanoseconds() >= deadline { break }
            }
        }
        if !handed.load(ordering: .acquiring) { event.wait() }
        return value
    }
}
