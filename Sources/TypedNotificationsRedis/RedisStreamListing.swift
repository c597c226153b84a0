@_spi(TransportAuthoring) import TypedNotifications

/// One notification name's stream on a Redis server, or one namespace's
/// announcements, for `tnotify ls`.
package struct RedisStreamSummary: Sendable, Hashable {
    /// A durable identity's consumer group on the stream.
    package struct Identity: Sendable, Hashable {
        /// The identity (the group's name).
        package var name: String
        /// Entries it read and has not acknowledged yet.
        package var pending: Int
        /// Entries added after the last one it read; `nil` when Redis cannot
        /// tell (entries were deleted or trimmed in between).
        package var behind: Int?
        /// Entries ever added up to the group's position (Redis's
        /// entries-read, raised by the transport past entries trimmed
        /// unread); `nil` when Redis cannot tell.
        package var entriesRead: Int?
    }

    /// The notification name whose stream this is, or for a namespace's
    /// announcements the namespace.
    package var name: String
    /// Entries the stream holds: for a namespace, the names in its set.
    package var length: Int
    /// Whether this is a namespace's announcements, each identity a durable
    /// namespace observer (a plain one leaves no trace on the server).
    package var isNamespace = false
    /// The durable identities reading it.
    package var identities: [Identity]
}

extension RedisStreamsTransport {
    /// Every stream of notifications under `keyPrefix` on the server, by
    /// name, with its length and the durable identities reading it, then
    /// every namespace's announcements with the durable identities that
    /// observe the namespace.
    ///
    /// Lists with `SCAN` (a few keys at a time, never blocking the server;
    /// on every master of a cluster) and reads each stream with `XLEN` and
    /// `XINFO GROUPS`.
    package static func streams(
        options: RedisConnectionOptions,
        keyPrefix: String = RedisStreamsConfiguration().keyPrefix
    ) throws(TypedNotificationError) -> [RedisStreamSummary] {
        var connections: [RedisConnectionOptions: RedisConnection] = [:]
        defer { for connection in connections.values { connection.shutDown() } }
        let connect = { (node: RedisConnectionOptions) throws(TypedNotificationError) -> RedisConnection in
            if let open = connections[node] { return open }
            let made = try RedisConnection.connect(node, clientName: "tnotify-ls")
            connections[node] = made
            return made
        }
        let router = ClusterRouter(seed: options)
        try router.learn(slotsOf: try connect(options))
        let head = keyPrefix + ":{"
        var keys: [String] = []
        for node in router.nodes {
            let connection = try connect(node)
            var cursor = "0"
            repeat {
                let reply = try connection.call(
                    "SCAN", cursor, "MATCH", keyPrefix + ":*}", "COUNT", "1000", "TYPE", "stream")
                guard case .array(let parts?) = reply, parts.count == 2, case .bulkString(let next?) = parts[0],
                    case .array(let found?) = parts[1]
                else { throw failure("\(reply)", doing: "list the streams under \(keyPrefix)") }
                for case .bulkString(let key?) in found { keys.append(String(decoding: key, as: UTF8.self)) }
                cursor = String(decoding: next, as: UTF8.self)
            } while cursor != "0"
        }
        var summaries: [RedisStreamSummary] = []
        let announcements = keyPrefix + ":new:{"
        for key in Set(keys).sorted() {
            // The name between the braces; a key that holds no valid name is
            // not one of ours.
            let isNamespace = key.hasPrefix(announcements)
            guard isNamespace || key.hasPrefix(head) else { continue }
            let name = String(key.dropFirst(isNamespace ? announcements.count : head.count).dropLast())
            guard (try? NotificationName(validating: name)) != nil else { continue }
            // A namespace counts its names in its set, not its announcements
            // (which may hold a name twice).
            let names = "\(keyPrefix):names:{\(name)}"
            let count = isNamespace ? RoutedCommand(key: names, "SCARD", names) : RoutedCommand(key: key, "XLEN", key)
            let replies = router.run(
                [count, RoutedCommand(key: key, "XINFO", "GROUPS", key)],
                connection: connect, release: { _ in })
            if let failure = replies.failure { throw failure }
            guard case .integer(let length) = replies.replies[0] else { continue }
            var identities: [RedisStreamSummary.Identity] = []
            if case .array(let groups?) = replies.replies[1] {
                for case .array(let fields?) in groups {
                    identities.append(identity(from: fields))
                }
            }
            summaries.append(
                RedisStreamSummary(name: name, length: Int(length), isNamespace: isNamespace, identities: identities))
        }
        return summaries.filter { !$0.isNamespace } + summaries.filter(\.isNamespace)
    }

    /// A group from the field-value pairs `XINFO GROUPS` gives for it.
    static func identity(from fields: [RESPValue]) -> RedisStreamSummary.Identity {
        var identity = RedisStreamSummary.Identity(name: "", pending: 0, behind: nil, entriesRead: nil)
        var index = 0
        while index + 1 < fields.count {
            defer { index += 2 }
            guard case .bulkString(let field?) = fields[index] else { continue }
            switch (String(decoding: field, as: UTF8.self), fields[index + 1]) {
            case ("name", .bulkString(let value?)): identity.name = String(decoding: value, as: UTF8.self)
            case ("pending", .integer(let value)): identity.pending = Int(value)
            case ("lag", .integer(let value)): identity.behind = Int(value)
            case ("entries-read", .integer(let value)): identity.entriesRead = Int(clamping: value)
            default: break
            }
        }
        return identity
    }
}
