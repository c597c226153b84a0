/// Where a ``RedisStreamsTransport`` starts reading a name's stream: always
/// for a plain observer, on the first run of a durable identity (whose
/// consumer group then remembers where it is).
public struct RedisStreamStart: Hashable, Sendable, CustomStringConvertible {
    enum Kind: Hashable, Sendable {
        case end
        case beginning
        case newest(Int)
    }

    let kind: Kind

    /// The stream's end: only notifications posted after registration (the default).
    public static let end = RedisStreamStart(kind: .end)

    /// The oldest entry the stream still has (retention may have trimmed
    /// older ones): everything kept, then what comes.
    public static let beginning = RedisStreamStart(kind: .beginning)

    /// The newest `count` entries the stream has, then what comes; all of
    /// them when it has fewer. A count below 1 is the stream's end.
    public static func newest(_ count: Int) -> RedisStreamStart {
        count > 0 ? RedisStreamStart(kind: .newest(count)) : .end
    }

    /// The choice, for logs.
    public var description: String {
        switch kind {
        case .end: "end"
        case .beginning: "beginning"
        case .newest(let count): "newest(\(count))"
        }
    }
}
