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

@_spi(TransportAuthoring) extension NotificationMetrics: CountedStatistics {
    /// Each count, a slot of the live ``Counters``.
    public enum Count: Int, CaseIterable, Sendable {
        case posted, received, delivered, dropped, sequenceGaps, undecodable, activeObservers
    }

    /// A snapshot of `count(c)` for every count `c`.
    public init(_ count: (Count) -> Int) {
        self.init(
            posted: count(.posted),
            received: count(.received),
            delivered: count(.delivered),
            dropped: count(.dropped),
            sequenceGaps: count(.sequenceGaps),
            undecodable: count(.undecodable),
            activeObservers: count(.activeObservers))
    }
}
