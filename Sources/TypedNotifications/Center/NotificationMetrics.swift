import Synchronization

/// Counters a center keeps so that nothing it loses goes unnoticed.
public struct NotificationMetrics: Hashable, Sendable {
    /// Notifications this center posted successfully.
    public var posted: Int
    /// Messages the transport handed to this center for names it observes.
    public var received: Int
    /// Notifications handed to handlers and to async sequence iterators.
    public var delivered: Int
    /// Notifications dropped because an observer's buffer was full.
    public var dropped: Int
    /// Notifications missing from a sender's sequence numbers (cross-process).
    public var sequenceGaps: Int
    /// Payloads an observer could not decode into its type.
    public var undecodable: Int
    /// Observers registered now: handlers and async sequences.
    public var activeObservers: Int
}

/// The live counters behind ``NotificationMetrics``. Relaxed atomics: each is
/// an independent count, read only as a snapshot.
final class MetricsCounters: Sendable {
    let posted = Atomic<Int>(0)
    let received = Atomic<Int>(0)
    let delivered = Atomic<Int>(0)
    let dropped = Atomic<Int>(0)
    let sequenceGaps = Atomic<Int>(0)
    let undecodable = Atomic<Int>(0)
    let activeObservers = Atomic<Int>(0)

    var snapshot: NotificationMetrics {
        NotificationMetrics(
            posted: posted.load(ordering: .relaxed),
            received: received.load(ordering: .relaxed),
            delivered: delivered.load(ordering: .relaxed),
            dropped: dropped.load(ordering: .relaxed),
            sequenceGaps: sequenceGaps.load(ordering: .relaxed),
            undecodable: undecodable.load(ordering: .relaxed),
            activeObservers: activeObservers.load(ordering: .relaxed)
        )
    }
}
