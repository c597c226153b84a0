/// Limits and policies of a ``RedisStreamsTransport``.
public struct RedisStreamsConfiguration: Sendable, Hashable {
    /// The start of every key: a name's stream is `<prefix>:{<name>}`. The
    /// braces are a Redis Cluster hash tag, so each name's stream lives in
    /// one slot and names spread over the nodes. Follows the rules of
    /// notification names; `"tn"` by default.
    public var keyPrefix: String
    /// Entries a stream keeps, about (Redis trims whole nodes of its radix
    /// tree, so a stream may briefly hold a little more); `nil`: no limit by length.
    public var maximumLength: Int?
    /// How long entries are kept, about: each post trims entries older than
    /// this, at most once a second per name, by the poster's clock against
    /// the IDs the server gave them; whole nodes of the stream go, so a few
    /// older entries may stay beside newer ones. At least one second;
    /// `nil`: no limit by age. A stream nobody posts to is not trimmed.
    public var maximumAge: Duration?
    /// The most entries one read asks for.
    public var readBatchSize: Int
    /// How long one blocking read waits before it is renewed: 10 s by
    /// default, so an idle reader sends one read each 10 s and wakes only
    /// for its answer. A reader whose read goes unanswered this long plus
    /// the command timeout treats its connection as broken and reconnects,
    /// so a server that stopped answering is noticed within that time (a
    /// closed connection, at once).
    public var blockTimeout: Duration
    /// How long a post (or a subscribe) in a Redis Cluster waits for its
    /// name's slot to have a master again when its node cannot be reached or
    /// the cluster says it is down (a master died and its replicas are
    /// electing one): the post
    /// asks the cluster for its slot map again and again, and goes to the
    /// promoted replica once there is one. Past this it fails with
    /// ``TypedNotifications/TypedNotificationError/Code/unreachable``, saying
    /// so. Only a post that was not written waits: one whose connection broke
    /// after it was written fails at once, as it may have been stored. 20 s
    /// by default, which covers an election under Redis's default
    /// `cluster-node-timeout` of 15 s; `.zero` fails at once, which suits a
    /// cluster without replicas (there is no one to promote). A standalone
    /// server is never waited for: a post fails at once while it is down.
    public var failoverWait: Duration
    /// When a post counts as done: once the master stored it (the default),
    /// or once replicas confirmed they hold it too. See ``PostAcknowledgement``.
    public var acknowledgement: PostAcknowledgement

    /// Creates a configuration: 100,000 entries per name, no age limit,
    /// reads of 256 that block up to 10 s, posts that wait up to 20 s for a
    /// cluster's failover.
    public init(
        keyPrefix: String = "tn",
        maximumLength: Int? = 100_000,
        maximumAge: Duration? = nil,
        readBatchSize: Int = 256,
        blockTimeout: Duration = .seconds(10),
        failoverWait: Duration = .seconds(20),
        acknowledgement: PostAcknowledgement = .master
    ) {
        self.keyPrefix = keyPrefix
        self.maximumLength = maximumLength
        self.maximumAge = maximumAge
        self.readBatchSize = readBatchSize
        self.blockTimeout = blockTimeout
        self.failoverWait = failoverWait
        self.acknowledgement = acknowledgement
    }
}

/// When a post to Redis counts as done, and what a failover can then take.
///
/// Redis replicates asynchronously: a master answers an `XADD` before its
/// replicas have the entry. A master that dies in that moment, its replica
/// promoted, takes the entry with it, and its post had returned success.
/// As with Kafka's `acks`, the choice is between a faster post and a
/// stronger promise:
///
/// | setting | a post returns | a failover right after can lose it |
/// |---|---|---|
/// | ``master`` | once the master stored it (one round trip) | yes, silently to the poster |
/// | ``replicas(_:timeout:)`` | once `count` replicas confirmed it too (`WAIT`, in the same round trip) | no: if they did not confirm in time, the post fails with ``TypedNotifications/TypedNotificationError/Code/notReplicated`` instead |
///
/// A post that fails with `notReplicated` *was* stored on the master: it
/// may reach observers, or be lost in a failover. It keeps its place and is
/// never sent again, so the posts after it are not duplicated; the caller
/// decides whether to post it again. `WAIT` is not consensus: a replica
/// that confirmed and is then not the one promoted can still lose it (see
/// *Across hosts*).
public enum PostAcknowledgement: Sendable, Hashable {
    /// The master stored the entry: what Redis offers by default.
    case master
    /// The master stored the entry and at least `count` of its replicas
    /// confirmed it within `timeout` (at least a millisecond).
    case replicas(Int, timeout: Duration)
}

extension PostAcknowledgement {
    /// Within range: 1 to 1,000 replicas, a timeout of at least 1 ms (`WAIT`
    /// with 0 would wait forever).
    var isValid: Bool {
        guard case .replicas(let count, let timeout) = self else { return true }
        return (1...1_000).contains(count) && timeout >= .milliseconds(1)
    }
}
