import NotificationPlatform
@_spi(TransportAuthoring) import TypedNotifications

/// Reads one name's stream on its own connection, for a ``RedisStreamsTransport``.
final class StreamReader: @unchecked Sendable {
    // Sendable: made by `subscribe`, then handed to the event loop in one
    // queued job; from then on every `var` is read and written only by jobs,
    // timers and handlers of that loop, which run one at a time. Other
    // threads read only the `let` name and key.

    /// Where the next read starts.
    enum Position {
        /// A plain observer: the entries after this ID.
        case after(StreamEntryID)
        /// A durable identity: its pending entries after this ID (delivered
        /// before, never acknowledged), each a redelivery.
        case pendingAfter(StreamEntryID)
        /// A durable identity: entries no one in its group has read yet.
        case new
    }

    let name: NotificationName
    let key: [UInt8]
    var connection: RedisConnection?
    var position: Position
    var receiver: TransportReceiver?
    var decoder = EnvelopeDecoder()
    /// A read was sent and its reply has not come.
    var awaitingReply = false
    /// When the read now waiting was sent, for the transport's watchdog.
    var requestedAt: UInt64 = 0
    /// The newest entry handed to the center, so a durable reader that
    /// reconnects reads again only what came after it.
    var lastDelivered = StreamEntryID.zero
    var backoff = ConnectBackoff()
    /// The node an `ASK` sent reads to while the name's slot migrates
    /// there; `nil`: the node the slot map names.
    var askedNode: RedisNodeAddress?
    private(set) var isCancelled = false

    init(name: NotificationName, key: [UInt8], connection: RedisConnection, position: Position) {
        self.name = name
        self.key = key
        self.connection = connection
        self.position = position
    }

    /// Stops for good and closes the connection. On the loop.
    func cancel(on loop: EventLoop?) {
        isCancelled = true
        dropConnection(on: loop)
    }

    /// Stops watching the connection and closes it. On the loop.
    func dropConnection(on loop: EventLoop?) {
        guard let connection else { return }
        loop?.deregister(connection.descriptor)
        self.connection = nil
    }
}
