/// Moves notifications between centers: within a process, or between
/// processes on one host.
///
/// A center owns its transport. It calls ``open(as:receiver:)`` once, then
/// ``subscribe(to:)`` when it gains its first observer of a name and
/// ``unsubscribe(from:)`` when it loses its last, ``send(_:)`` for every post,
/// and ``close()`` once at the end. The center serializes ``subscribe(to:)``
/// and ``unsubscribe(from:)`` with its observer table, and ``send(_:)`` with
/// its other sends, so a transport sees one post at a time and in post order.
///
/// A transport never sees a typed value unless it hands values over in one
/// process (``payloadForm`` is ``TransportPayloadForm/value``); a
/// cross-process transport gets the payload as bytes and returns received
/// payloads as bytes, which the center decodes.
public protocol NotificationTransport: Sendable {
    /// Whether the center should give this transport values or encoded bytes.
    var payloadForm: TransportPayloadForm { get }

    /// Starts the transport for the center identified by `sender`; from now on
    /// it passes every message it receives for a subscribed name to `receiver`.
    func open(as sender: NotificationSender, receiver: TransportReceiver) throws(TypedNotificationError)

    /// Starts receiving messages of `name`. Once this returns, a message of
    /// that name sent anywhere the transport reaches is passed to the receiver.
    func subscribe(to name: NotificationName) throws(TypedNotificationError)

    /// Stops receiving messages of `name`.
    func unsubscribe(from name: NotificationName)

    /// Sends one message to every subscriber of its name that the transport
    /// reaches, including this transport's own receiver when it subscribed.
    ///
    /// Must not block on a slow receiver. When the message reached some
    /// receivers but not others, throw ``TypedNotificationError/Code/undelivered``
    /// naming the others: the center then still counts the message as sent.
    func send(_ message: TransportMessage) throws(TypedNotificationError)

    /// Stops receiving, releases the receiver and frees the transport's
    /// resources. Idempotent.
    func close()
}

/// Whether a transport carries values or bytes.
public enum TransportPayloadForm: Sendable {
    /// Values are handed over as they are, never encoded.
    case value
    /// The center sends each notification as a complete ``NotificationEnvelope``
    /// (``TransportPayload/encoded(_:)``), ready to write as it is; the transport
    /// decodes what it receives with an ``EnvelopeDecoder``.
    case encoded
}

/// A notification's payload as a transport carries it.
public enum TransportPayload: Sendable {
    /// The posted value itself (in-process transports only).
    case value(any TypedNotification)
    /// The complete envelope, with the value's ``DarwinPayload`` bytes inside.
    case encoded(EncodedNotification)
}

/// One notification on its way through a transport.
public struct TransportMessage: Sendable {
    /// The notification's name.
    public var name: NotificationName
    /// The posting center.
    public var sender: NotificationSender
    /// The sender's count of posts of this name, from 1.
    public var sequence: UInt64
    /// When it was posted.
    public var timestamp: NotificationTimestamp
    /// The payload, as a value or as bytes.
    public var payload: TransportPayload

    /// Creates a message.
    public init(
        name: NotificationName,
        sender: NotificationSender,
        sequence: UInt64,
        timestamp: NotificationTimestamp,
        payload: TransportPayload
    ) {
        self.name = name
        self.sender = sender
        self.sequence = sequence
        self.timestamp = timestamp
        self.payload = payload
    }
}

/// Notifications posted to a receiver that will never arrive, as a poster
/// recorded them: how many, of which name, and, when known, whose and up to
/// which sequence number.
public struct MissedNotifications: Sendable, Hashable {
    /// How many were lost.
    public var count: Int
    /// Their name.
    public var name: NotificationName
    /// The center that posted them, when known.
    public var sender: NotificationSender?
    /// The sender's sequence number of the last one lost, when known. With
    /// ``sender``, it lets the center count each loss once: a later
    /// notification of that sender does not report the same gap again.
    public var lastSequence: UInt64?

    /// Creates a report of `count` lost notifications of `name`, from
    /// `sender` up to `lastSequence` when those are known.
    public init(count: Int, name: NotificationName, sender: NotificationSender? = nil, lastSequence: UInt64? = nil) {
        self.count = count
        self.name = name
        self.sender = sender
        self.lastSequence = lastSequence
    }
}

/// Where a transport hands the messages it receives: the owning center.
public struct TransportReceiver: Sendable {
    private let body: @Sendable (TransportMessage) -> Void
    private let missedBody: @Sendable (MissedNotifications) -> Void

    /// Wraps the function that takes received messages; reports of missed
    /// notifications are ignored.
    public init(_ body: @escaping @Sendable (TransportMessage) -> Void) {
        self.body = body
        self.missedBody = { _ in }
    }

    /// Wraps the function that takes received messages and the one that
    /// takes reports of notifications that were posted to this receiver but
    /// will never arrive.
    public init(
        receive: @escaping @Sendable (TransportMessage) -> Void,
        missed: @escaping @Sendable (MissedNotifications) -> Void
    ) {
        self.body = receive
        self.missedBody = missed
    }

    /// Passes one received message to the center. Never blocks for long: the
    /// center only queues it for its observers.
    public func receive(_ message: TransportMessage) {
        body(message)
    }

    /// Tells the center that notifications were posted to it and will never
    /// arrive (a poster recorded them as dropped); the center adds them to
    /// the next delivery's ``NotificationDelivery/missed``, once: when the
    /// report names the sender and its last lost sequence number, a later
    /// notification of that sender does not count the same gap again.
    public func missed(_ report: MissedNotifications) {
        guard report.count > 0 else { return }
        missedBody(report)
    }
}
