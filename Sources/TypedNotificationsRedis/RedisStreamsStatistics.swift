import TypedNotifications

/// Counters of a ``RedisStreamsTransport`` since it was created.
public struct RedisStreamsStatistics: Hashable, Sendable {
    /// Entries added (`XADD` acknowledged by the server).
    public var posted: Int
    /// Posts refused or not acknowledged (server unreachable, error reply).
    public var failedPosts: Int
    /// Entries read and passed to the center.
    public var delivered: Int
    /// Entries that are no valid envelope of their stream's name, skipped
    /// (and, for a durable identity, acknowledged so they are not read again).
    public var corruptEntriesSkipped: Int
    /// Entries a durable identity acknowledged (`XACK`) once handled.
    public var acknowledged: Int
    /// Connections made again after one broke.
    public var reconnects: Int
    /// Redis Cluster redirections (`MOVED`, `ASK`) followed: commands sent
    /// again to the node that owns, or is importing, their name's slot.
    public var redirections: Int
    /// Entries trimmed from their streams (by ``RedisStreamsConfiguration/maximumLength``
    /// or ``RedisStreamsConfiguration/maximumAge``) after a reader's position
    /// before it read them, each reported as missed.
    public var trimmedUnread: Int
}

extension RedisStreamsStatistics: CountedStatistics {
    /// Each count, a slot of the live ``Counters``.
    package enum Count: Int, CaseIterable, Sendable {
        case posted, failedPosts, delivered, corruptEntriesSkipped, acknowledged, reconnects, redirections,
            trimmedUnread
    }

    /// A snapshot of `count(c)` for every count `c`.
    package init(_ count: (Count) -> Int) {
        self.init(
            posted: count(.posted),
            failedPosts: count(.failedPosts),
            delivered: count(.delivered),
            corruptEntriesSkipped: count(.corruptEntriesSkipped),
            acknowledged: count(.acknowledged),
            reconnects: count(.reconnects),
            redirections: count(.redirections),
            trimmedUnread: count(.trimmedUnread))
    }
}
