import Synchronization

/// Moves notifications between centers: within a process, or between
/// processes on one host.
///
/// An app names a transport (``NotificationHub`` is generic over one) and
/// reads what the transport offers (its statistics, say), but never calls
/// what the protocol requires: a hub does. The requirements are SPI, for
/// whoever writes a transport: `@_spi(TransportAuthoring) import TypedNotifications`
/// (see <doc:WritingATransport>).
///
/// A center owns its transport. It calls `open(as:receiver:)` once, then
/// `subscribe(to:)` when it gains its first observer of a name and
/// `unsubscribe(from:)` when it loses its last, `send(_:)` for a post
/// (`send(batch:)` for posts that queued up behind another), and
/// `close()` once at the end, possibly while a send is in progress. The
/// center serializes `subscribe(to:)` and `unsubscribe(from:)` with its
/// observer table, and its sends with each other, without holding a lock
/// across them: a transport sees one send at a time, in post order.
///
/// A transport never sees a typed value unless it hands values over in one
/// process (`payloadForm` is `TransportPayloadForm/value`); a
/// cross-process transport gets the payload as bytes and returns received
/// payloads as bytes, which the center decodes.
public protocol NotificationTransport: Sendable {
    /// Whether the center should give this transport values or encoded bytes.
    @_spi(TransportAuthoring) var payloadForm: TransportPayloadForm { get }

    /// Starts the transport for the center identified by `sender`; from now on
    /// it passes every message it receives for a subscribed name to `receiver`.
    @_spi(TransportAuthoring) func open(as sender: NotificationSender, receiver: TransportReceiver)
        throws(TypedNotificationError)

    /// Starts receiving messages of the name or namespace `selector` says.
    /// Once this returns, a message of a name it selects, sent anywhere the
    /// transport reaches, is passed to the receiver, including a name never
    /// sent before. A message that several subscriptions select is passed
    /// once.
    ///
    /// - Throws: ``TypedNotificationError/Code/unsupported`` for a
    ///   namespace, from a transport that serves single names only.
    @_spi(TransportAuthoring) func subscribe(to selector: NotificationSelector) throws(TypedNotificationError)

    /// Stops receiving messages that only `selector` selected.
    @_spi(TransportAuthoring) func unsubscribe(from selector: NotificationSelector)

    /// Sends one message to every subscriber of its name that the transport
    /// reaches, including this transport's own receiver when it subscribed.
    ///
    /// Must not block on a slow receiver. When the message reached some
    /// receivers but not others, throw ``TypedNotificationError/Code/undelivered``
    /// naming the others: the center then still counts the message as sent.
    @_spi(TransportAuthoring) func send(_ message: TransportMessage) throws(TypedNotificationError)

    /// Sends several messages in order, as `send(_:)` would one after
    /// another, and stops at the first that fails.
    ///
    /// The center calls this instead of `send(_:)` with posts that queued
    /// up while its previous send was in progress, so a transport that can
    /// take several at once does it for the price of one: the file transport
    /// appends a batch under one lock with one write. The default calls
    /// `send(_:)` for each.
    @_spi(TransportAuthoring) func send(batch messages: [TransportMessage]) -> TransportBatchResult

    /// Starts closing: stops receiving, releases the receiver and frees the
    /// transport's resources. Never waits on another thread (a handler
    /// running on the transport's thread, a server's reply): what must
    /// happen after that wait happens after `close()` returned, and
    /// `whenClosed(_:)` says when it is done. Idempotent.
    @_spi(TransportAuthoring) func close()

    /// Calls `body` once what `close()` started is done: the transport's
    /// thread has finished, and what its guarantees promise at close (a
    /// durable reader's reads ended, its last acknowledgements sent, its
    /// cursors saved) is true. On whichever thread finishes the close, or
    /// at once on the caller when it is done already. The default calls
    /// `body` at once: a transport whose close is done when it returns.
    @_spi(TransportAuthoring) func whenClosed(_ body: @escaping @Sendable () -> Void)

    /// The executor of the thread that receives, if the transport has one.
    /// A center runs the handlers of its own ``NotificationExecutor`` there,
    /// so a received message reaches them without waking another thread.
    ///
    /// Jobs enqueued on it must run one at a time, in order, and keep running
    /// after `close()`. `nil` (the default): the center's executor runs on
    /// the shared pool.
    @_spi(TransportAuthoring) var deliveryExecutor: (any TaskExecutor & SerialExecutor)? { get }

    /// Whether the transport itself reports every notification its receiver
    /// will never get, through `TransportReceiver/missed(_:)`, so the
    /// center does not also count gaps in each sender's sequence numbers
    /// (it would count them twice).
    ///
    /// `false` (the default): the center counts a gap in a sender's numbers
    /// as missed. A log that knows how many entries were trimmed before a
    /// reader got to them, even of senders the reader never heard from,
    /// says `true` (the Redis Streams transport does).
    @_spi(TransportAuthoring) var reportsEveryMissedNotification: Bool { get }
}

extension NotificationTransport {
    /// Calls `body` at once: a close that is done when it returns.
    @_spi(TransportAuthoring) public func whenClosed(_ body: @escaping @Sendable () -> Void) { body() }

    /// No executor of its own: handlers on a center's executor run on the shared pool.
    @_spi(TransportAuthoring) public var deliveryExecutor: (any TaskExecutor & SerialExecutor)? { nil }

    /// `false`: the center counts gaps in each sender's sequence numbers.
    @_spi(TransportAuthoring) public var reportsEveryMissedNotification: Bool { false }

    /// Calls `send(_:)` for each message, in order, until one fails.
    @_spi(TransportAuthoring) public func send(batch messages: [TransportMessage]) -> TransportBatchResult {
        var result = TransportBatchResult()
        for (index, message) in messages.enumerated() {
            do throws(TypedNotificationError) {
                try send(message)
            } catch  where error.code == .undelivered {
                result.undelivered.append((index, error))
            } catch {
                result.failure = error
                return result
            }
            result.sent += 1
        }
        return result
    }
}

/// What became of a batch handed to `NotificationTransport.send(batch:)`.
@_spi(TransportAuthoring) public struct TransportBatchResult: Sendable {
    /// How many of the batch's messages, from the first, were sent. Those
    /// after them were not sent at all.
    public var sent: Int
    /// Sent messages that did not fully succeed, by their index in the
    /// batch, with the error `NotificationTransport.send(_:)` would have
    /// thrown for them: ``TypedNotificationError/Code/undelivered`` (reached
    /// some receivers but not others) or ``TypedNotificationError/Code/notReplicated``
    /// (stored, not confirmed by enough replicas). They are not sent again.
    public var undelivered: [(index: Int, error: TypedNotificationError)]
    /// Why the message at index ``sent`` was not sent, when ``sent`` is less
    /// than the batch's count.
    public var failure: TypedNotificationError?

    /// Creates a result: `sent` messages sent, and how the others fared.
    public init(
        sent: Int = 0,
        undelivered: [(index: Int, error: TypedNotificationError)] = [],
        failure: TypedNotificationError? = nil
    ) {
        self.sent = sent
        self.undelivered = undelivered
        self.failure = failure
    }
}

/// Whether a transport carries values or bytes.
@_spi(TransportAuthoring) public enum TransportPayloadForm: Sendable {
    /// Values are handed over as they are, never encoded.
    case value
    /// The center sends each notification as a complete `NotificationEnvelope`
    /// (`TransportPayload/encoded(_:)`), ready to write as it is; the transport
    /// decodes what it receives with an `EnvelopeDecoder` (`@_spi(TransportAuthoring)`).
    case encoded
}

/// A notification's payload as a transport carries it.
@_spi(TransportAuthoring) public enum TransportPayload: Sendable {
    /// The posted value itself (in-process transports only).
    case value(any DarwinPayload)
    /// The complete envelope, with the value's ``DarwinPayload`` bytes inside.
    case encoded(EncodedNotification)
}

/// One notification on its way through a transport.
@_spi(TransportAuthoring) public struct TransportMessage: Sendable {
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
    /// Whether this receiver may have been handed this message before (a
    /// durable reader that crashed after handing it over and before it was
    /// handled). Becomes ``NotificationDelivery/isRedelivery``.
    public var isRedelivery: Bool
    /// For a durable transport: what the center tells once every observer
    /// of the name has handled this message, so the transport may move its
    /// cursor past it. `nil` for live transports.
    public var receipt: DeliveryReceipt?

    /// Creates a message.
    public init(
        name: NotificationName,
        sender: NotificationSender,
        sequence: UInt64,
        timestamp: NotificationTimestamp,
        payload: TransportPayload,
        isRedelivery: Bool = false,
        receipt: DeliveryReceipt? = nil
    ) {
        self.name = name
        self.sender = sender
        self.sequence = sequence
        self.timestamp = timestamp
        self.payload = payload
        self.isRedelivery = isRedelivery
        self.receipt = receipt
    }
}

/// How a center tells a durable transport that a received message was
/// handled by every observer of its name, so that the transport's cursor may
/// move past it: at-least-once delivery.
///
/// The transport creates one per message and passes it in
/// `TransportMessage/receipt`. The center holds it once for each observer
/// that queued the message and lets go of each hold when that observer is
/// done with it:
///
/// - a handler, once it has returned;
/// - a `for await` loop, once it asks for the next element (or ends);
/// - an observer whose buffering policy dropped the message (the loss is
///   reported in ``NotificationDelivery/missed``; a durable transport's
///   receipt then never completes, so the message comes again on its next
///   run), or that could not decode it (counted as undecodable and missed);
/// - an observer that was cancelled, or whose loop ended, with the message
///   in hand, once it has been removed from the center (it *abandoned* the
///   message: a transport may leave such a message to be read again, see
///   the Redis transport).
///
/// When the last hold goes, `whenHandled` runs, once, on the thread that let
/// go of it: keep it short and never block in it.
@_spi(TransportAuthoring) public final class DeliveryReceipt: Sendable {
    // Holds not yet let go of: one for the transport until the center took
    // the message, plus one per observer that queued it.
    private let holds = Atomic<Int>(1)
    // For a receipt that skips abandoned messages: bit 0, an observer ended
    // holding it unhandled; bit 1, an observer handled it (or dropped it).
    // For one that skips dropped messages: bit 2, a buffer dropped it.
    private let outcomes = Atomic<UInt8>(0)
    private let skipsAbandoned: Bool
    private let skipsDropped: Bool
    private let whenHandled: @Sendable () -> Void

    /// Creates a receipt held once, by the transport, until the center has
    /// passed the message to its observers.
    public init(whenHandled: @escaping @Sendable () -> Void) {
        self.whenHandled = whenHandled
        self.skipsAbandoned = false
        self.skipsDropped = false
    }

    /// Like ``init(whenHandled:)``, but `whenHandled` does not run when the
    /// observers that queued the message all ended holding it unhandled
    /// (cancelled, or their loop left): for a transport that can leave it
    /// unacknowledged, to be read again, instead of moving past it.
    @_spi(TransportAuthoring) public static func unlessAbandoned(_ whenHandled: @escaping @Sendable () -> Void)
        -> DeliveryReceipt
    {
        DeliveryReceipt(whenHandled: whenHandled, skipsAbandoned: true, skipsDropped: false)
    }

    /// Like ``init(whenHandled:)``, but `whenHandled` runs neither when the
    /// observers that queued the message all ended holding it unhandled, nor
    /// once an observer's buffering policy dropped it: for a durable
    /// transport that leaves both to be read again, marked as redeliveries.
    @_spi(TransportAuthoring) public static func unlessAbandonedOrDropped(
        _ whenHandled: @escaping @Sendable () -> Void
    ) -> DeliveryReceipt {
        DeliveryReceipt(whenHandled: whenHandled, skipsAbandoned: true, skipsDropped: true)
    }

    /// Like ``init(whenHandled:)``, but `whenHandled` never runs once an
    /// observer's buffering policy dropped the message: for a durable
    /// transport whose position must not move past what an observer lost,
    /// so it comes again, marked as a redelivery, on the next run.
    @_spi(TransportAuthoring) public static func unlessDropped(_ whenHandled: @escaping @Sendable () -> Void)
        -> DeliveryReceipt
    {
        DeliveryReceipt(whenHandled: whenHandled, skipsAbandoned: false, skipsDropped: true)
    }

    private init(whenHandled: @escaping @Sendable () -> Void, skipsAbandoned: Bool, skipsDropped: Bool) {
        self.whenHandled = whenHandled
        self.skipsAbandoned = skipsAbandoned
        self.skipsDropped = skipsDropped
    }

    /// Adds a hold: an observer queued the message.
    func hold() {
        holds.add(1, ordering: .relaxed)
    }

    /// Lets go of an observer's hold: it is done with the message (handled
    /// it, or counted it as missed). The last hold runs `whenHandled`.
    func release() {
        if skipsAbandoned { outcomes.bitwiseOr(2, ordering: .relaxed) }
        releaseHold()
    }

    /// Lets go of an observer's hold on a message its buffering policy
    /// dropped: counted as missed there. A receipt made with
    /// ``unlessDropped(_:)`` then never runs `whenHandled`.
    func drop() {
        if skipsAbandoned || skipsDropped { outcomes.bitwiseOr(skipsDropped ? 4 : 2, ordering: .relaxed) }
        releaseHold()
    }

    /// An observer's sender filter passed the message by: for a receipt
    /// that skips abandoned messages, it counts as handled by that
    /// observer, so observers that took it and then ended holding it do not
    /// keep it from being handled.
    func passedBy() {
        if skipsAbandoned { outcomes.bitwiseOr(2, ordering: .relaxed) }
    }

    /// Lets go of an observer's hold on a message it ended with in hand and
    /// never handled.
    func abandon() {
        if skipsAbandoned { outcomes.bitwiseOr(1, ordering: .relaxed) }
        releaseHold()
    }

    /// Lets go of a hold, the transport's or an observer's; the last runs
    /// `whenHandled` unless the message was only abandoned.
    func releaseHold() {
        guard holds.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        let outcome = outcomes.load(ordering: .relaxed)
        if skipsAbandoned && outcome & 3 == 1 { return }
        if skipsDropped && outcome & 4 != 0 { return }
        whenHandled()
    }
}

/// Notifications posted to a receiver that will never arrive, as a poster
/// recorded them: how many, of which name, and, when known, whose and up to
/// which sequence number.
@_spi(TransportAuthoring) public struct MissedNotifications: Sendable, Hashable {
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
    /// Whether ``count`` is the exact number lost; `false` when some may have
    /// been lost that could not be counted: at least ``count`` (possibly 0).
    /// The next delivery's ``NotificationDelivery/missedIsExact`` says so.
    public var isExact: Bool

    /// Creates a report of `count` lost notifications of `name`, from
    /// `sender` up to `lastSequence` when those are known; not `isExact`:
    /// at least `count`.
    public init(
        count: Int, name: NotificationName, sender: NotificationSender? = nil, lastSequence: UInt64? = nil,
        isExact: Bool = true
    ) {
        self.count = count
        self.name = name
        self.sender = sender
        self.lastSequence = lastSequence
        self.isExact = isExact
    }
}

/// Where a transport hands the messages it receives: the owning center.
///
/// The center makes it and passes it to `NotificationTransport.open(as:receiver:)`.
@_spi(TransportAuthoring) public struct TransportReceiver: Sendable {
    private let body: @Sendable (TransportMessage) -> Void
    private let missedBody: @Sendable (MissedNotifications) -> Void
    private let refusedBody: @Sendable (MissedNotifications) -> Void
    private let failedBody: @Sendable (TypedNotificationError) -> Void
    private let backedUpBody: @Sendable (NotificationName) -> Bool
    private let roomBody: @Sendable (NotificationName) -> Int?

    /// The largest payload the center takes, in bytes: its
    /// the hub's `maximumPayloadSize` (``NotificationHub/init(endpoint:transport:maximumPayloadSize:)``). A transport
    /// refuses a larger one before it reads or copies it, when it can tell
    /// its size first (a datagram's slot, a record's header), and reports it
    /// with ``refused(_:)``; it decodes what it receives with this limit.
    public let maximumPayloadSize: Int

    /// Wraps the center's functions: `receive` takes received messages,
    /// `missed` reports of notifications that will never arrive, `refused`
    /// those that arrived and were refused, `failed` the reason the
    /// transport can receive no more, `backedUp` and `room` how full a
    /// name's observers are.
    package init(
        maximumPayloadSize: Int = NotificationEnvelope.payloadSizeHardLimit,
        receive: @escaping @Sendable (TransportMessage) -> Void,
        missed: @escaping @Sendable (MissedNotifications) -> Void = { _ in },
        refused: @escaping @Sendable (MissedNotifications) -> Void = { _ in },
        failed: @escaping @Sendable (TypedNotificationError) -> Void = { _ in },
        backedUp: @escaping @Sendable (NotificationName) -> Bool = { _ in false },
        room: @escaping @Sendable (NotificationName) -> Int? = { _ in nil }
    ) {
        self.maximumPayloadSize = maximumPayloadSize
        self.body = receive
        self.missedBody = missed
        self.refusedBody = refused
        self.failedBody = failed
        self.backedUpBody = backedUp
        self.roomBody = room
    }

    /// How many more notifications of `name` every observer can buffer
    /// before its buffering policy drops one; `nil` when none would, 0 while
    /// nobody observes the name (its last observer left and the transport's
    /// unsubscribe has not come yet). A transport that keeps what it has
    /// not read yet (a log, a stream) hands over no more than this, and
    /// reads nothing while it is 0, so a buffer never drops what it keeps
    /// and nothing is taken for nobody.
    @_spi(TransportAuthoring) public func room(for name: NotificationName) -> Int? {
        roomBody(name)
    }

    /// Whether an observer of `name` has a slice of notifications (256, or
    /// half its buffer) waiting to be handled. A transport that keeps what
    /// it has not read yet, as a log does, reads no more of `name` until this
    /// is `false`, so a fast poster or a backlog never overflows a slower
    /// observer's buffer. Never blocks; do not call it holding a lock the
    /// center may wait for (the transport's own state lock).
    public func isBackedUp(_ name: NotificationName) -> Bool {
        backedUpBody(name)
    }

    /// Tells the center that the transport can receive no more, and why: the
    /// center records the error in its ``NotificationHub/failure`` and ends
    /// every observation, so no observer stays alive and deaf. May be called
    /// from the transport's own thread; the center then closes the transport.
    public func fail(_ error: TypedNotificationError) {
        failedBody(error)
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
        guard report.count > 0 || !report.isExact else { return }
        missedBody(report)
    }

    /// Tells the center that notifications arrived and were refused unread:
    /// a payload over ``maximumPayloadSize``. The center counts them in
    /// ``NotificationMetrics/undecodable`` and reports them in the next
    /// delivery's ``NotificationDelivery/missed``, once. With a
    /// `MissedNotifications/sender` and no `MissedNotifications/lastSequence`
    /// (a datagram cut short before its sequence number), they are taken to
    /// be that sender's next ones, so its next notification does not count
    /// them again.
    public func refused(_ report: MissedNotifications) {
        guard report.count > 0 else { return }
        refusedBody(report)
    }
}
