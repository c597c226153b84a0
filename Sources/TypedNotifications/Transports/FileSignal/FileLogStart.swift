/// Where a ``FileSignalTransport`` starts reading a name's log when it has no
/// saved cursor for it: always for a plain observer, on the first run of a
/// durable identity.
public struct FileLogStart: Hashable, Sendable, CustomStringConvertible {
    enum Kind: Hashable, Sendable {
        case end
        case beginning
        case newest(Int)
    }

    let kind: Kind

    /// The log's end: only notifications posted after registration (the default).
    public static let end = FileLogStart(kind: .end)

    /// The oldest record the log still has (retention may have deleted older
    /// ones): everything kept, then what comes.
    public static let beginning = FileLogStart(kind: .beginning)

    /// The newest `count` records the log has, then what comes; all of them
    /// when it has fewer. A count below 0 is treated as 0 (the log's end).
    public static func newest(_ count: Int) -> FileLogStart {
        count > 0 ? FileLogStart(kind: .newest(count)) : .end
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
