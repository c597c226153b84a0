import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Reads one name's stream on its own connection, for a ``RedisStreamsTransport``.
///
/// Made by `subscribe`, then handed to the event loop: its connection,
/// machine and the rest are the loop's (``LoopBound`` checks every access);
/// other threads use only the name, the key and ``server``.
final class StreamReader: Sendable {
    let name: NotificationName
    let key: [UInt8]
    /// The namespace whose discovery stream this reads, its entries the
    /// names first posted in it; `nil` for a name's stream.
    let discovers: NotificationNamespace?
    private let onLoop: LoopBound<LoopState>

    /// What only the event loop touches.
    private final class LoopState {
        var connection: RedisConnection?
        var machine: StreamReaderStateMachine
        var receiver: TransportReceiver?
        var requestedAt: UInt64 = 0
        var backoff = ConnectBackoff()
        var isCancelled = false
        var idleState = IdleReaders.Membership.reading
        var waitAfter = StreamEntryID.zero
        var wasRefused = false
        var held: HeldEntries?

        init(connection: RedisConnection?, machine: StreamReaderStateMachine) {
            self.connection = connection
            self.machine = machine
        }
    }

    var connection: RedisConnection? {
        get { onLoop.value.connection }
        set { onLoop.value.connection = newValue }
    }
    /// Every decision about reads, replies, trims and reconnects.
    var machine: StreamReaderStateMachine {
        get { onLoop.value.machine }
        _modify { yield &onLoop.value.machine }
    }
    var receiver: TransportReceiver? {
        get { onLoop.value.receiver }
        set { onLoop.value.receiver = newValue }
    }
    /// When the read now waiting was sent, for the transport's watchdog.
    var requestedAt: UInt64 {
        get { onLoop.value.requestedAt }
        set { onLoop.value.requestedAt = newValue }
    }
    var backoff: ConnectBackoff {
        get { onLoop.value.backoff }
        _modify { yield &onLoop.value.backoff }
    }
    var isCancelled: Bool { onLoop.value.isCancelled }
    /// Redis refused its last read (its key is not a stream): the error in
    /// `readerErrors` stays until a read succeeds.
    var wasRefused: Bool {
        get { onLoop.value.wasRefused }
        set { onLoop.value.wasRefused = newValue }
    }
    /// Entries read that its observers had no room for yet: handed out
    /// before the next read is sent (see `handOutHeld`).
    var held: HeldEntries? {
        get { onLoop.value.held }
        set { onLoop.value.held = newValue }
    }
    /// While quiet, the entry after which the one that wakes it will come.
    var waitAfter: StreamEntryID {
        get { onLoop.value.waitAfter }
        set { onLoop.value.waitAfter = newValue }
    }
    /// Whether the reader reads on a connection of its own or waits among
    /// the quiet ones; on the loop.
    var idleState: IdleReaders.Membership {
        get { onLoop.value.idleState }
        set { onLoop.value.idleState = newValue }
    }

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
    let server = Locked(ServerSide())

    /// Records the reader's new connection, unless it is being stopped:
    /// then returns `false` and the connection must not be read from.
    func adopt(_ connection: RedisConnection) -> Bool {
        server.withLock { server in
            guard !server.stopping else { return false }
            server.connection = connection.clientID.map { (connection.options, $0) }
            return true
        }
    }

    /// Forgets the reader's connection at the server, which it handed to
    /// another reader or a watch: stopping it must not end that one.
    func disown() {
        server.withLock { $0.connection = nil }
    }

    /// Whether the reader is being stopped: what it read is not handed out.
    var isStopping: Bool { server.withLock { $0.stopping } }

    /// Marks the reader as being stopped; returns its connection's node and
    /// client ID, to end it at the server.
    func markStopping() -> (node: RedisConnectionOptions, clientID: Int)? {
        server.withLock { server in
            server.stopping = true
            return server.connection
        }
    }

    /// A reader of `key`, on `connection` if it has one yet (else it
    /// connects when it is started, on the loop).
    init(
        name: NotificationName, key: [UInt8], connection: RedisConnection?, machine: StreamReaderStateMachine,
        loop: EventLoop, discovers: NotificationNamespace? = nil
    ) {
        self.name = name
        self.key = key
        self.discovers = discovers
        onLoop = LoopBound(LoopState(connection: connection, machine: machine), on: loop)
        if let connection { _ = adopt(connection) }
    }

    /// Stops for good and closes the connection. On the loop.
    func cancel() {
        onLoop.value.isCancelled = true
        dropConnection()
    }

    /// Stops watching the connection and closes it. On the loop.
    func dropConnection() {
        machine.connectionLost()
        guard let connection else { return }
        onLoop.loop.deregister(connection.descriptor)
        self.connection = nil
    }
}

/// A read's entries not handed out yet, oldest first.
struct HeldEntries {
    var entries: ArraySlice<(StreamEntryID, [RESPValue]?)>
    var isRedelivery: Bool
}

/// The event loop's envelope decoder, one for all its readers.
final class EnvelopeDecoderBox {
    var decoder = EnvelopeDecoder()

    /// Decodes one envelope (see ``EnvelopeDecoder/decode(_:)``).
    func decode(_ bytes: [UInt8]) throws(TypedNotificationError) -> TransportMessage {
        try decoder.decode(bytes)
    }

    /// What an envelope over the payload limit says of itself (see
    /// ``EnvelopeDecoder/oversized(_:)``).
    func oversized(_ bytes: UnsafeRawBufferPointer) -> MissedNotifications? {
        decoder.oversized(bytes)
    }
}
