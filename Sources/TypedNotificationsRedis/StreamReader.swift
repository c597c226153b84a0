import NotificationPlatform
import Synchronization
@_spi(TransportAuthoring) import TypedNotifications

/// Reads one name's stream on its own connection, for a ``RedisStreamsTransport``.
final class StreamReader: @unchecked Sendable {
    // Sendable: made by `subscribe`, then handed to the event loop in one
    // queued job; from then on every `var` is read and written only by jobs,
    // timers and handlers of that loop, which run one at a time. Other
    // threads read only the `let` name and key, and `server`, a Mutex.

    let name: NotificationName
    let key: [UInt8]
    var connection: RedisConnection?
    /// Every decision about reads, replies, trims and reconnects.
    var machine: StreamReaderStateMachine
    var receiver: TransportReceiver?
    var decoder = EnvelopeDecoder()
    /// When the read now waiting was sent, for the transport's watchdog.
    var requestedAt: UInt64 = 0
    var backoff = ConnectBackoff()
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

    init(name: NotificationName, key: [UInt8], connection: RedisConnection, machine: StreamReaderStateMachine) {
        self.name = name
        self.key = key
        self.connection = connection
        self.machine = machine
        _ = adopt(connection)
    }

    /// Stops for good and closes the connection. On the loop.
    func cancel(on loop: EventLoop?) {
        isCancelled = true
        dropConnection(on: loop)
    }

    /// Stops watching the connection and closes it. On the loop.
    func dropConnection(on loop: EventLoop?) {
        machine.connectionLost()
        guard let connection else { return }
        loop?.deregister(connection.descriptor)
        self.connection = nil
    }
}
