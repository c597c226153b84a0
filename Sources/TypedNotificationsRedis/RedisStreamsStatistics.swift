@_spi(TransportAuthoring) import TypedNotifications

/// Counters of a ``RedisStreamsTransport`` since it was created.
public struct RedisStreamsStatistics: Hashable, Sendable {
    /// Entries added (`XADD` acknowledged by the server).
    public var posted: Int
    /// Posts refused or not acknowledged (server unreachable, error reply).
    public var failedPosts: Int
    /// Posts stored by the master that fewer replicas than
    /// ``RedisStreamsConfiguration/acknowledgement`` asks for confirmed in
    /// time; counted in ``posted`` too, and failed with
    /// ``TypedNotifications/TypedNotificationError/Code/notReplicated``.
    public var unconfirmedPosts: Int
    /// Entries read and passed to the center.
    public var delivered: Int
    /// Entries that are no valid envelope of their stream's name, skipped
    /// (and, for a durable identity, acknowledged so they are not read again).
    public var corruptEntriesSkipped: Int
    /// Entries whose payload was over the center's
    /// `maximumPayloadSize` (``TypedNotifications/NotificationHub/init(endpoint:transport:maximumPayloadSize:)``):
    /// refused (never decoded), acknowledged, and reported to the center as
    /// undecodable and missed.
    public var refusedOversized: Int
    /// Entries a durable identity acknowledged (`XACK`) once handled.
    public var acknowledged: Int
    /// Connections made again after one broke.
    public var reconnects: Int
    /// Tries to connect a reader again that failed (its node unreachable,
    /// down, or not yet replaced by a promoted replica); see
    /// ``RedisStreamsTransport/readerErrors``.
    public var failedReconnects: Int
    /// Redis Cluster redirections (`MOVED`, `ASK`) followed: commands sent
    /// again to the node that owns, or is importing, their name's slot.
    public var redirections: Int
    /// Entries trimmed from their streams (by `RedisStreamsConfiguration.maximumLength`
    /// or ``RedisStreamsConfiguration/maximumAge``) after a reader's position
    /// before it read them, each reported as missed.
    public var trimmedUnread: Int
    /// Entries a stream lost going backwards, as its readers saw it: its
    /// count of entries ever added went down between two reads (a failover
    /// to a replica that did not have them yet, or the stream deleted and
    /// made again). Not reported as missed: which of them a reader had read
    /// cannot be known; posts that must survive a failover wait for their
    /// replicas (``RedisStreamsConfiguration/acknowledgement``).
    public var rewoundEntries: Int
    /// Times a reader of a namespace's name went quiet and gave up its
    /// connection to wait with other quiet names on one (not in a cluster):
    /// a plain observer's names start quiet; then once per read that found
    /// nothing.
    public var parkedReaders: Int
    /// Times a quiet reader woke to read on a connection of its own: its
    /// name was posted to, or the connection it waited on failed.
    public var wokenReaders: Int
}

@_spi(TransportAuthoring) extension RedisStreamsStatistics: CountedStatistics {
    /// Each count, a slot of the live ``Counters``.
    public enum Count: Int, CaseIterable, Sendable {
        case posted, failedPosts, unconfirmedPosts, delivered, corruptEntriesSkipped, acknowledged, reconnects,
            failedReconnects,
            redirections, trimmedUnread, rewoundEntries, refusedOversized, parkedReaders, wokenReaders
    }

    /// A snapshot of `count(c)` for every count `c`.
    public init(_ count: (Count) -> Int) {
        self.init(
            posted: count(.posted),
            failedPosts: count(.failedPosts),
            unconfirmedPosts: count(.unconfirmedPosts),
            delivered: count(.delivered),
            corruptEntriesSkipped: count(.corruptEntriesSkipped),
            refusedOversized: count(.refusedOversized),
            acknowledged: count(.acknowledged),
            reconnects: count(.reconnects),
            failedReconnects: count(.failedReconnects),
            redirections: count(.redirections),
            trimmedUnread: count(.trimmedUnread),
            rewoundEntries: count(.rewoundEntries),
            parkedReaders: count(.parkedReaders),
            wokenReaders: count(.wokenReaders))
    }
}
