import Synchronization

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

/// The live counters behind ``RedisStreamsStatistics``.
final class RedisStreamsCounters: Sendable {
    let posted = Atomic<Int>(0)
    let failedPosts = Atomic<Int>(0)
    let delivered = Atomic<Int>(0)
    let corruptEntriesSkipped = Atomic<Int>(0)
    let acknowledged = Atomic<Int>(0)
    let reconnects = Atomic<Int>(0)
    let redirections = Atomic<Int>(0)
    let trimmedUnread = Atomic<Int>(0)

    var snapshot: RedisStreamsStatistics {
        RedisStreamsStatistics(
            posted: posted.load(ordering: .relaxed),
            failedPosts: failedPosts.load(ordering: .relaxed),
            delivered: delivered.load(ordering: .relaxed),
            corruptEntriesSkipped: corruptEntriesSkipped.load(ordering: .relaxed),
            acknowledged: acknowledged.load(ordering: .relaxed),
            reconnects: reconnects.load(ordering: .relaxed),
            redirections: redirections.load(ordering: .relaxed),
            trimmedUnread: trimmedUnread.load(ordering: .relaxed))
    }
}
