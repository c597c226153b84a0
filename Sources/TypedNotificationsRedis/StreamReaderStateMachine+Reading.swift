@_spi(TransportAuthoring) import TypedNotifications

// What a stream reader's state machine reads of itself and of replies
// without changing anything: the commands due with the next read, the
// limits of what it remembers, and the parts of a reply.
extension StreamReaderStateMachine {
    /// The last entry this reader read: where a plain reader stands, the
    /// newest a durable one was handed.
    var lastRead: StreamEntryID {
        if case .after(let id) = position { return id }
        return lastDelivered
    }

    /// The counter raise due now, if any.
    func dueCounterRaise() -> Command? {
        guard isDurable, groupCounterBehind, let groupPosition, let accounted else { return nil }
        return .raiseCounter(position: groupPosition, entriesRead: accounted)
    }

    /// The group's position and count to record in Redis with the next read
    /// of new entries, when they changed since last recorded: each read
    /// keeps the count that replicas would otherwise lose up to date, one
    /// command more in the read's pipeline. Only where the group's position
    /// is known to be ``groupPosition``: this reader is the group's only
    /// consumer and read every reply since its last `>` read.
    func dueCounterRecord() -> Command? {
        guard isDurable, !positionUncertain, case .new = position, let groupPosition, let accounted,
            recorded?.position != groupPosition || recorded?.entriesRead != accounted
        else { return nil }
        return .raiseCounter(position: groupPosition, entriesRead: accounted)
    }

    /// Errors a later attempt may not get.
    static func isTransient(_ text: String) -> Bool {
        ["TRYAGAIN", "CLUSTERDOWN", "LOADING", "UNBLOCKED", "MASTERDOWN"].contains { text.hasPrefix($0) }
    }

    /// The `(id, fields)` of each entry of a read reply; fields are `nil` for
    /// a pending entry that was deleted from the stream.
    static func entries(in reply: RESPValue) -> [(StreamEntryID, [RESPValue]?)] {
        guard case .array(let streams?) = reply else { return [] }
        var result: [(StreamEntryID, [RESPValue]?)] = []
        for stream in streams {
            guard case .array(let pair?) = stream, pair.count == 2, case .array(let entries?) = pair[1] else {
                continue
            }
            for entry in entries {
                guard case .array(let parts?) = entry, parts.count == 2, case .bulkString(let idBytes?) = parts[0],
                    let id = StreamEntryID(idBytes)
                else { continue }
                if case .array(let fields) = parts[1] {
                    result.append((id, fields))
                } else {
                    result.append((id, nil))
                }
            }
        }
        return result
    }

    /// The limit of a name's reader: 4,096 entries, up to 196 KB.
    static let recentCountLimitOfName = 4_096
    /// The limit of a reader started for a namespace, which may read
    /// thousands of names: 64 entries, 3 KB.
    static let recentCountLimitInNamespace = 64

    /// How many counts a quiet reader of a namespace keeps (see
    /// ``forgetOlderCounts()``): 8 entries, 192 B.
    static let recentCountLimitWhileQuiet = 8
}
