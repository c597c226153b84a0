@_spi(TransportAuthoring) import TypedNotifications

/// A stream's counters at one moment, from `XINFO STREAM`: what a reader
/// needs to tell how many entries were trimmed before it read them.
struct StreamSnapshot: Hashable, Sendable {
    /// Entries ever added (`entries-added`, Redis 7 and later).
    var added = 0
    /// Entries the stream holds now.
    var length = 0
    /// The ID of the newest entry ever added, even if trimmed since.
    var lastGenerated = StreamEntryID.zero
    /// The ID of the oldest entry the stream holds; `nil` when it is empty.
    var firstEntry: StreamEntryID?

    /// Entries no longer in the stream: trimmed (or deleted), the oldest first.
    var removed: Int { max(0, added - length) }

    /// An empty stream: the reply to a stream that does not exist.
    init() {}

    /// Reads an `XINFO STREAM` reply; `nil` for an error reply other than
    /// "no such key" (an empty snapshot), or one without `entries-added`
    /// (a server before Redis 7).
    init?(_ reply: RESPValue) {
        if case .error(let text) = reply {
            guard text.contains("no such key") else { return nil }
            return
        }
        guard case .array(let fields?) = reply else { return nil }
        var found = 0
        var index = 0
        while index + 1 < fields.count {
            defer { index += 2 }
            guard case .bulkString(let field?) = fields[index] else { continue }
            switch (String(decoding: field, as: UTF8.self), fields[index + 1]) {
            case ("entries-added", .integer(let value)):
                added = Int(clamping: value)
                found += 1
            case ("length", .integer(let value)):
                length = Int(clamping: value)
                found += 1
            case ("last-generated-id", .bulkString(let id?)):
                lastGenerated = StreamEntryID(id) ?? .zero
            case ("first-entry", .array(let entry?)):
                if case .bulkString(let id?)? = entry.first { firstEntry = StreamEntryID(id) }
            default:
                break
            }
        }
        guard found == 2 else { return nil }
    }
}
