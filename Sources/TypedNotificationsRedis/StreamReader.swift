import NotificationPlatform
import Synchronization
@_spi(TransportAuthoring) import TypedNotifications

/// Reads one name's stream on its own connection, for a ``RedisStreamsTransport``.
final class StreamReader: @unchecked Sendable {
    // Sendable: made by `subscribe`, then handed to the event loop in one
    // queued job; from then on every `var` is read and written only by jobs,
    // timers and handlers of that loop, which run one at a time. Other
    // threads read only the `let` name and key, and `server`, a Mutex.

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
    /// What the replies still to come answer, in the order sent.
    enum Reply {
        /// `ASKING`, before a command to a node importing the slot.
        case asking
        /// `XINFO STREAM`, sent just before a read.
        case streamInfo
        /// `XGROUP SETID … ENTRIESREAD`, raising the group's counter.
        case counterRaise
        /// The read.
        case read
    }

    /// A read was sent and its reply has not come.
    var awaitingReply = false
    var expected: [Reply] = []
    /// How many entries were ever added to the stream up to where the
    /// reader is: up to its position for a plain observer, the group's
    /// entries-read for a durable identity. Trimming that removed more than
    /// this removed entries the reader never read. `nil` until known.
    var accounted: Int?
    /// How many entries the stream had lost to trimming (entries-added
    /// minus length, from `XINFO STREAM`) just before the read now waiting.
    var removedBeforeRead: Int?
    /// The newest entry a durable identity's group handed this reader with
    /// `>`: the group's position.
    var groupPosition: StreamEntryID?
    /// The group's entries-read in Redis is below ``accounted`` (trimmed
    /// entries were counted as missed): raised before the next read, so a
    /// later run does not count them again.
    var groupCounterBehind = false
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

    /// Whether the reader is being stopped, and which server connection it
    /// reads on, under one lock, so a thread stopping it and the loop
    /// connecting it again agree: either the loop sees the stop and reads
    /// no more, or the stopping thread sees the new connection and ends it.
    struct ServerSide {
        var stopping = false
        /// The node and the server's client ID of the reader's connection,
        /// when it asked for its ID (durable readers).
        var connection: (node: RedisConnectionOptions, clientID: Int)?
    }

    /// See ``ServerSide``.
    let server = Mutex(ServerSide())

    /// Records the reader's new connection, unless it is being stopped:
    /// then returns `false` and the connection must not be read from.
    func adopt(_ connection: RedisConnection) -> Bool {
        server.withLock { server in
            guard !server.stopping else { return false }
            server.connection = connection.clientID.map { (connection.options, $0) }
            return true
        }
    }

    /// Marks the reader as being stopped; returns its connection's node and
    /// client ID, to end it at the server.
    func markStopping() -> (node: RedisConnectionOptions, clientID: Int)? {
        server.withLock { server in
            server.stopping = true
            return server.connection
        }
    }

    init(
        name: NotificationName, key: [UInt8], connection: RedisConnection, position: Position, accounted: Int?
    ) {
        self.name = name
        self.key = key
        self.connection = connection
        self.position = position
        self.accounted = accounted
        _ = adopt(connection)
    }

    /// Stops for good and closes the connection. On the loop.
    func cancel(on loop: EventLoop?) {
        isCancelled = true
        dropConnection(on: loop)
    }

    /// Stops watching the connection and closes it. On the loop.
    func dropConnection(on loop: EventLoop?) {
        expected.removeAll()
        removedBeforeRead = nil
        guard let connection else { return }
        loop?.deregister(connection.descriptor)
        self.connection = nil
    }
}
