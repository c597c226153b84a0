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
    /// How long one blocking read waits before it is renewed. A reader whose
    /// read goes unanswered this long plus the command timeout treats its
    /// connection as broken and reconnects, so a dead server is noticed.
    public var blockTimeout: Duration

    /// Creates a configuration: 100,000 entries per name, no age limit, reads of 256.
    public init(
        keyPrefix: String = "tn",
        maximumLength: Int? = 100_000,
        maximumAge: Duration? = nil,
        readBatchSize: Int = 256,
        blockTimeout: Duration = .seconds(2)
    ) {
        self.keyPrefix = keyPrefix
        self.maximumLength = maximumLength
        self.maximumAge = maximumAge
        self.readBatchSize = readBatchSize
        self.blockTimeout = blockTimeout
    }
}
