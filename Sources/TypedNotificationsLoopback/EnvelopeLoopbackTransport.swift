import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Hands notifications between centers of one process as the bytes of their
/// envelopes: each post is encoded by its center, carried as bytes, and
/// decoded on the receiving transport's own thread under the receiving
/// center's limits.
///
/// The in-process transport hands values over as they are, so it never
/// shows whether a payload survives the wire format. This one does, at the
/// cost of an encode, a decode and a thread hop per delivery: use it in
/// tests to prove that a payload type round-trips before it crosses a
/// process, and read it as the worked example of the *Writing a transport*
/// article. It is built only on the `TransportAuthoring` SPI, as a
/// transport outside this package would be.
///
/// Centers whose transports share an ``EnvelopeBus`` see each other's posts.
public final class EnvelopeLoopbackTransport: NotificationTransport {
    /// The bus this transport posts to and receives from.
    public let bus: EnvelopeBus

    /// The skeleton: the thread, the counters and the lifecycle; open, it
    /// keeps this transport's inbox on the bus.
    let core: EnvelopeLoopbackCore

    /// Creates a transport on `bus`, with a thread of its own that starts
    /// when a center opens it.
    ///
    /// - Throws: ``TypedNotificationError/Code/transportFailure`` when the
    ///   system refuses a thread (out of descriptors).
    public init(bus: EnvelopeBus) throws(TypedNotificationError) {
        self.bus = bus
        let loop = try EnvelopeLoopbackCore.makeLoop(named: "EnvelopeLoopbackTransport", for: "an envelope loopback")
        core = EnvelopeLoopbackCore(kind: "envelope loopback", loop: loop, shared: ())
    }

    deinit {
        close()
    }

    /// Counters since the transport was created.
    public var statistics: EnvelopeLoopbackStatistics { core.counters.snapshot }

    /// Envelopes: the center encodes every post before `send(_:)`.
    @_spi(TransportAuthoring) public var payloadForm: TransportPayloadForm { .encoded }

    /// The transport's thread: it decodes what arrives and runs the
    /// center's handlers, so a delivery wakes no other thread.
    @_spi(TransportAuthoring) public var deliveryExecutor: (any TaskExecutor & SerialExecutor)? { core.loop }

    /// Makes the inbox the bus delivers to, and starts the thread.
    ///
    /// - Throws: ``TypedNotificationError/Code/closed`` when it was opened
    ///   or closed before.
    @_spi(TransportAuthoring) public func open(as sender: NotificationSender, receiver: TransportReceiver)
        throws(TypedNotificationError)
    {
        // Checked first so that a second open does no work; `open` checks
        // again under the lock, so two racing opens cannot both succeed.
        try core.checkOpenable()
        let decoding = EnvelopeDecoding(
            decoder: EnvelopeLoopbackCore.decoder(for: receiver),
            receiver: receiver, counters: core.counters)
        let inbox = EnvelopeInbox(core.onThread(decoding))
        try core.open(inbox) { _ in }
        core.loop.start()
    }

    /// Routes posts of the name or namespace `selector` says on the bus to
    /// this transport, from the moment this returns.
    ///
    /// - Throws: ``TypedNotificationError/Code/closed`` unless open; also
    ///   when it closed while this ran.
    @_spi(TransportAuthoring) public func subscribe(to selector: NotificationSelector) throws(TypedNotificationError) {
        // The inbox was taken under the core's lock, and a close may come
        // before the bus adds it: the bus refuses an inbox that left.
        guard bus.add(try core.opened(for: "subscribe"), to: selector) else {
            throw TypedNotificationError(code: .closed, message: "subscribe on an envelope loopback that closed")
        }
    }

    /// Stops routing posts that only `selector` selected here. Envelopes
    /// already on their way are still delivered; the center drops those of
    /// a cancelled observer.
    @_spi(TransportAuthoring) public func unsubscribe(from selector: NotificationSelector) {
        guard let inbox = try? core.opened(for: "unsubscribe") else { return }
        bus.remove(inbox, from: selector)
    }

    /// Hands the envelope's bytes to every inbox subscribed to its name.
    ///
    /// - Throws: ``TypedNotificationError/Code/closed`` unless open.
    @_spi(TransportAuthoring) public func send(_ message: TransportMessage) throws(TypedNotificationError) {
        _ = try core.opened(for: "post")
        let bytes = Array(try core.envelope(of: message, kind: "envelope loopback").envelope)
        // Looked up under the bus's lock, delivered after it: the lock is
        // never held while another thread is woken.
        for inbox in bus.inboxes(subscribedTo: message.name) {
            inbox.subscriber.deliver(bytes)
        }
        core.counters.add(to: .sent)
    }

    /// Leaves the bus and ends the thread, without waiting for it.
    /// Envelopes already queued for the thread are still decoded and handed
    /// to the center, which delivers nothing after it closed.
    @_spi(TransportAuthoring) public func close() {
        let (closing, _) = core.close { _ in () }
        if case .wasOpen(let inbox) = closing { bus.removeEverywhere(inbox) }
        let core = core
        closing.end(core.loop) { core.finishClosing() }
    }
}

/// The skeleton of an ``EnvelopeLoopbackTransport``: open, it keeps the
/// transport's inbox; it shares nothing else between threads.
typealias EnvelopeLoopbackCore =
    TransportCore<EnvelopeInbox, Void, EnvelopeLoopbackStatistics>

/// Where one open ``EnvelopeLoopbackTransport`` receives: the bus hands it
/// bytes on the poster's thread, and it decodes them on its own.
@_spi(TransportAuthoring) public final class EnvelopeInbox: Sendable {
    private let decoding: LoopBound<EnvelopeDecoding>
    /// Whether its transport closed; changed and read under the bus's lock.
    fileprivate let hasLeft = Atomic<Bool>(false)

    init(_ decoding: LoopBound<EnvelopeDecoding>) {
        self.decoding = decoding
    }

    /// Queues `bytes` for the inbox's thread, behind what came before: so
    /// one poster's envelopes arrive in the order it sent them.
    func deliver(_ bytes: [UInt8]) {
        let decoding = decoding
        decoding.loop.execute { decoding.value.take(bytes) }
    }
}

/// What only an inbox's thread touches: the decoder, with its caches.
final class EnvelopeDecoding {
    private var decoder: EnvelopeDecoder
    private let receiver: TransportReceiver
    private let counters: Counters<EnvelopeLoopbackStatistics>

    init(decoder: EnvelopeDecoder, receiver: TransportReceiver, counters: Counters<EnvelopeLoopbackStatistics>) {
        self.decoder = decoder
        self.receiver = receiver
        self.counters = counters
    }

    /// Decodes one envelope and hands it to the center. One over the
    /// center's payload limit is refused from its header, and reported so
    /// its observers count it missed; any other bad envelope is counted.
    func take(_ bytes: [UInt8]) {
        do {
            let message = try decoder.decode(bytes)
            counters.add(to: .received)
            receiver.receive(message)
        } catch {
            if let report = bytes.withUnsafeBytes({ decoder.oversized($0) }) {
                counters.add(to: .refusedOversized)
                receiver.refused(report)
            } else {
                counters.add(to: .refusedMalformed)
            }
        }
    }
}

/// A switchboard that envelope loopback transports share: which inboxes
/// each name and namespace goes to.
public final class EnvelopeBus: Sendable {
    // A subscription that returned is seen by every later lookup
    // (registration is immediate); a lookup copies one array out.
    private let table = Locked(SelectorTable<ObjectIdentifier, EnvelopeInbox>())

    /// Creates a bus of its own.
    public init() {}

    /// Adds `inbox`, unless its transport closed: then returns `false`.
    func add(_ inbox: EnvelopeInbox, to selector: NotificationSelector) -> Bool {
        table.withLock { table in
            guard !inbox.hasLeft.load(ordering: .relaxed) else { return false }
            table.add(inbox, key: ObjectIdentifier(inbox), to: selector)
            return true
        }
    }

    func remove(_ inbox: EnvelopeInbox, from selector: NotificationSelector) {
        table.withLock { $0.remove(ObjectIdentifier(inbox), from: selector) }
    }

    /// Removes `inbox` for good: a later ``add(_:to:)`` refuses it.
    func removeEverywhere(_ inbox: EnvelopeInbox) {
        table.withLock { table in
            inbox.hasLeft.store(true, ordering: .relaxed)
            table.removeEverywhere(ObjectIdentifier(inbox))
        }
    }

    func inboxes(subscribedTo name: NotificationName) -> [SelectorTable<ObjectIdentifier, EnvelopeInbox>.Entry] {
        table.withLock { $0.subscribers(of: name) }
    }
}

/// Counters of an ``EnvelopeLoopbackTransport`` since it was created.
public struct EnvelopeLoopbackStatistics: Hashable, Sendable {
    /// Envelopes posted (each handed to every inbox of its name).
    public var sent: Int
    /// Envelopes decoded and handed to the center.
    public var received: Int
    /// Envelopes over the receiving center's payload limit: refused from
    /// their header, never decoded, and reported as missed.
    public var refusedOversized: Int
    /// Envelopes that would not decode for any other reason.
    public var refusedMalformed: Int
}

@_spi(TransportAuthoring) extension EnvelopeLoopbackStatistics: CountedStatistics {
    /// Each count, a slot of the live counters.
    public enum Count: Int, CaseIterable, Sendable {
        case sent, received, refusedOversized, refusedMalformed
    }

    /// A snapshot of `count(c)` for every count `c`.
    public init(_ count: (Count) -> Int) {
        self.init(
            sent: count(.sent), received: count(.received), refusedOversized: count(.refusedOversized),
            refusedMalformed: count(.refusedMalformed))
    }
}

/// Built on the transport skeleton.
extension EnvelopeLoopbackTransport {
    /// Runs `body` once what `close()` started is done: the core says.
    @_spi(TransportAuthoring) public func whenClosed(_ body: @escaping @Sendable () -> Void) {
        core.whenClosed(body)
    }
}
