/// Where a transport that keeps what is posted (the file log, a Redis
/// stream) starts reading a name when nothing says where it stopped: always
/// for a plain observer, on the first run of a durable identity (later runs
/// resume where it stopped).
public struct ReadStart: Hashable, Sendable {
    /// Where to start, for a transport's driver to switch over.
    @_spi(TransportAuthoring) public enum Kind: Hashable, Sendable {
        /// After what is there now.
        case end
        /// At the oldest notification kept.
        case beginning
        /// At the newest `count` kept, or the beginning when fewer are.
        case newest(Int)
    }

    /// Where to start.
    @_spi(TransportAuthoring) public let kind: Kind

    /// The end: only notifications posted after registration (the default).
    public static let end = ReadStart(kind: .end)

    /// The oldest notification still kept (retention may have removed older
    /// ones): everything kept, then what comes.
    public static let beginning = ReadStart(kind: .beginning)

    /// The newest `count` notifications kept, then what comes; all of them
    /// when fewer are kept. A count below 1 is the end.
    public static func newest(_ count: Int) -> ReadStart {
        count > 0 ? ReadStart(kind: .newest(count)) : .end
    }

    /// The choice, for logs.
    package var description: String {
        switch kind {
        case .end: "end"
        case .beginning: "beginning"
        case .newest(let count): "newest(\(count))"
        }
    }
}
