import Synchronization

/// A statistics value made only of counts: ``NotificationMetrics`` and each
/// transport's statistics. Its live counters are a ``Counters`` of it.
@_spi(TransportAuthoring) public protocol CountedStatistics: Sendable {
    /// The counts, one slot of the live counters each (at most
    /// ``Counters/capacity``).
    associatedtype Count: RawRepresentable<Int>, CaseIterable, Sendable

    /// A snapshot made of `count(c)` for every count `c`.
    init(_ count: (Count) -> Int)
}

/// The live counters behind a statistics value, the one type every center
/// and transport counts with. Each slot is an independent relaxed atomic:
/// bumped from any thread without a lock, and read only as one
/// ``snapshot``, which is not one instant across slots.
@_spi(TransportAuthoring) public final class Counters<Statistics: CountedStatistics>: @unchecked Sendable {
    // Sendable: `slots` is a constant pointer to `capacity` atomics that
    // init initializes before the object can be shared and deinit
    // destroys after the last reference is gone; in between every access
    // is an atomic operation on one slot, never a plain read or write.
    // (A pointer, not an InlineArray: that needs macOS 26 and iOS 26, and
    // the package supports macOS 15 and iOS 18.)

    /// The most counts a statistics value can have.
    @_spi(TransportAuthoring) public static var capacity: Int { 16 }

    private let slots: UnsafeMutablePointer<Atomic<Int>>

    /// All counts zero.
    @_spi(TransportAuthoring) public init() {
        precondition(Statistics.Count.allCases.allSatisfy { (0..<Self.capacity).contains($0.rawValue) })
        slots = .allocate(capacity: Self.capacity)
        for index in 0..<Self.capacity {
            (slots + index).initialize(to: Atomic<Int>(0))
        }
    }

    deinit {
        slots.deinitialize(count: Self.capacity)
        slots.deallocate()
    }

    /// Adds `amount` (one if not given) to `count`.
    @inline(__always)
    @_spi(TransportAuthoring) public func add(_ amount: Int = 1, to count: Statistics.Count) {
        slots[count.rawValue].wrappingAdd(amount, ordering: .relaxed)
    }

    /// Subtracts `amount` (one if not given) from `count`, a level that
    /// goes down as well as up.
    @inline(__always)
    @_spi(TransportAuthoring) public func subtract(_ amount: Int = 1, from count: Statistics.Count) {
        slots[count.rawValue].wrappingSubtract(amount, ordering: .relaxed)
    }

    /// Adds a non-negative `amount` that another process may have chosen,
    /// stopping at `Int.max` instead of wrapping.
    @_spi(TransportAuthoring) public func addSaturating(_ amount: Int, to count: Statistics.Count) {
        slots[count.rawValue].addSaturating(amount)
    }

    /// Sets `count` to `value`: a last value rather than a sum.
    @_spi(TransportAuthoring) public func set(_ count: Statistics.Count, to value: Int) {
        slots[count.rawValue].store(value, ordering: .relaxed)
    }

    /// One count now.
    @_spi(TransportAuthoring) public subscript(_ count: Statistics.Count) -> Int {
        slots[count.rawValue].load(ordering: .relaxed)
    }

    /// Every count now, as the statistics value.
    @_spi(TransportAuthoring) public var snapshot: Statistics {
        Statistics { self[$0] }
    }
}
