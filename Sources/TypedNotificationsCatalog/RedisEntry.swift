import TypedNotifications
import TypedNotificationsRedis

extension RedisStreamsTransport: ReportsReaderErrors {}

extension TransportEntry {
    /// Redis Streams, across hosts.
    package static let redis = TransportEntry(
        name: "redis", typeName: "RedisStreamsTransport", meeting: .server(defaultURL: "redis://127.0.0.1:6379"),
        keepsPosts: true,
        make: { (place, request) throws(TypedNotificationError) in
            var configuration = RedisStreamsConfiguration()
            if let count = request.keepAtMost { configuration.maximumLength = count }
            return try RedisStreamsTransport(
                url: place.text, identity: request.identity, firstRead: request.firstRead,
                configuration: configuration)
        },
        list: { (url) throws(TypedNotificationError) in
            let streams = try RedisStreamsTransport.streams(options: try RedisConnectionOptions(url: url))
            guard !streams.isEmpty else { return ["no streams"] }
            var lines: [String] = []
            for stream in streams {
                if stream.isNamespace {
                    // Only durable namespace observers leave a trace here.
                    guard !stream.identities.isEmpty else { continue }
                    lines.append("\(stream.name).*  namespace, \(stream.length) names announced")
                    for identity in stream.identities {
                        lines.append("  identity \(identity.name) observes it: \(identity.pending) names being started")
                    }
                    continue
                }
                lines.append("\(stream.name)  \(stream.length) entries")
                for identity in stream.identities {
                    let behind =
                        identity.behind.map { "\($0) behind" } ?? "behind by an unknown count (entries trimmed)"
                    lines.append("  identity \(identity.name): \(identity.pending) pending, \(behind)")
                }
            }
            return lines
        },
        noGarbage:
            "gc has nothing to do on Redis: every post trims its stream (maximumLength, maximumAge) and a reader leaves nothing behind",
        describe: { url in (try? RedisConnectionOptions(url: url).redactedDescription) ?? url }
    )
}
