import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// A typed notification center over a pluggable transport.
///
/// ```swift
/// let center = try NotificationHub(endpoint: "app", transport: InProcessTransport())
/// let token = try center.addObserver(.of(Reload.self)) { note, delivery in … }
/// try center.post(Reload(reason: "config changed"))
/// ```
///
/// The same posting and observing code runs over every transport; the
/// transport decides how far notifications travel. In addition to the
/// guarantees of ``TypedNotificationCenter``, a hub over a cross-process
/// transport checks each sender's sequence numbers and reports a gap as
/// ``NotificationDelivery/missed``.
///
/// Closing the hub (or releasing it) closes its transport and ends every
/// observation; notifications already queued for an observer are still
/// delivered.
public final class NotificationHub<Transport: NotificationTransport>: TypedNotificationCenter {

    /// This hub's identity, carried by everything it posts.
    public let sender: NotificationSender
    /// The transport this hub posts through and receives from.
    public let transport: Transport
    /// The hub's limits.
    package let configuration: NotificationHubConfiguration
    /// The serial executor for handlers registered without an actor: the
    /// transport's receiving thread when it has one (see
    /// `NotificationTransport.deliveryExecutor`).
    public let executor: NotificationExecutor

    let counters = Counters<NotificationMetrics>()
    private let tracksSequenceGaps: Bool

    // Who sends next, the posts waiting in line and the per-name sequence
    // counters (see OutboundStateMachine). Never held across a send: one
    // poster at a time sends, and posts arriving meanwhile wait in line and
    // go out in its next batch, so sequence numbers leave in the order they
    // were given, which receivers rely on to detect gaps. A post therefore
    // waits for the sends ahead of it: the socket transport's sends are
    // non-blocking and a post that finds a socket full waits at most
    // `fullSocketWait` (1 ms) before spooling; the file transport's append
    // waits only for other processes' appends to the same log.
    let outbound = Locked(OutboundStateMachine<OutboundPayload, OutboundWaiter>())
    let failureState = Locked<TypedNotificationError?>(nil)

    // Guards the observer table and each name's subscription state (see
    // ObserverTableStateMachine): a name is subscribed exactly while it has
    // observers. Never held across a transport call: one thread at a time
    // subscribes or unsubscribes a name, with no lock held, and
    // registrations of that name wait in line meanwhile. Deliveries copy a
    // name's observer list out and offer outside the lock.
    private let table = Locked<HubObserverTable>(HubObserverTable())
    // Signalled once the transport's close is done.
    private let closeDone = OneShotEvent()

    /// Creates a hub and opens its transport.
    ///
    /// - Parameters:
    ///   - endpoint: This hub's label, such as `app` or `widget`: 1 to 64 bytes
    ///     of `A-Z a-z 0-9 . _ -`, not starting with a dot.
    ///   - transport: How notifications travel.
    ///   - maximumPayloadSize: The largest encoded payload a post may carry
    ///     on a cross-process transport, in bytes: 64 KiB by default, at most
    ///     16 MiB. A larger post throws ``TypedNotificationError/Code/payloadTooLarge``
    ///     before anything is sent. It bounds what the hub receives too,
    ///     whatever another process's hub allows: a larger notification is
    ///     refused by the transport, counted in ``NotificationMetrics/undecodable``
    ///     and reported once in the next delivery's ``NotificationDelivery/missed``.
    ///     The socket transport refuses it before reading it (its receive
    ///     buffers are sized for this limit, so a 4 MB datagram costs no
    ///     memory), and the file transport before decoding it; a Redis server
    ///     sends the entry whole, so it is read, then refused undecoded.
    /// - Throws: ``TypedNotificationError`` for an invalid endpoint label or
    ///   payload limit, or when the transport cannot open.
    public convenience init(
        endpoint: String = "default",
        transport: Transport,
        maximumPayloadSize: Int = 64 * 1024
    ) throws(TypedNotificationError) {
        try self.init(
            endpoint: endpoint, transport: transport,
            configuration: NotificationHubConfiguration(maximumPayloadSize: maximumPayloadSize))
    }

    /// Creates a hub with the limits of `configuration` and opens its transport.
    package init(
        endpoint: String = "default",
        transport: Transport,
        configuration: NotificationHubConfiguration
    ) throws(TypedNotificationError) {
        guard (0...NotificationHubConfiguration.payloadSizeHardLimit).contains(configuration.maximumPayloadSize) else {
            throw TypedNotificationError(
                code: .invalidConfiguration,
                message:
                    "maximumPayloadSize \(configuration.maximumPayloadSize) is outside 0...\(NotificationHubConfiguration.payloadSizeHardLimit)"
            )
        }
        self.sender = try NotificationSender.current(endpoint: endpoint)
        self.transport = transport
        self.executor = NotificationExecutor(sharing: transport.deliveryExecutor)
        self.configuration = configuration
        self.tracksSequenceGaps = transport.payloadForm == .encoded && !transport.reportsEveryMissedNotification
        try transport.open(
            as: sender,
            receiver: TransportReceiver(
                maximumPayloadSize: configuration.maximumPayloadSize,
                receive: { [weak self] message in self?.receive(message) },
                missed: { [weak self] report in self?.noteMissed(report) },
                refused: { [weak self] report in self?.noteRefused(report) },
                failed: { [weak self] error in self?.fail(error) },
                backedUp: { [weak self] name in self?.isBackedUp(name) ?? false },
                room: { [weak self] name in
                    // Gone: nobody to hand anything to. Unbounded: `nil`.
                    guard let self else { return 0 }
                    return self.room(for: name)
                }
            )
        )
    }

    deinit {
        close()
    }

    /// A snapshot of the hub's counters.
    public var metrics: NotificationMetrics { counters.snapshot }

    /// Posts `payload` under `name` through the transport: what `post(_:)`
    /// calls with a notification's own name, and how a payload travels under
    /// a name chosen at run time.
    ///
    /// - Throws: ``TypedNotificationError`` if the hub is closed, the payload
    ///   cannot be encoded or exceeds the hub's `maximumPayloadSize` (``NotificationHub/init(endpoint:transport:maximumPayloadSize:)``), or
    ///   the transport fails; nothing is sent then. One exception:
    ///   ``TypedNotificationError/Code/undelivered`` means it was sent, and
    ///   only the endpoints the error names did not take it (they see it as
    ///   missed).
    public func post<Payload: DarwinPayload>(_ payload: Payload, as name: NotificationName)
        throws(TypedNotificationError)
    {
        try post(payload, named: try name.validated())
    }

    private func post<N: DarwinPayload>(_ notification: N, named name: NotificationName)
        throws(TypedNotificationError)
    {
        // The expensive part, encoding and checksumming the payload, happens
        // before the post gets in line; the sender stamps only the sequence
        // number and clocks into the envelope's trailer.
        let payload = try outboundPayload(notification, named: name)
        do throws(TypedNotificationError) {
            switch outbound.withLock({ $0.post(named: name) }) {
            case .closed:
                throw TypedNotificationError(code: .closed, message: "post of \(name) to a closed center")
            // The payload is moved on, never copied: the envelope's buffer
            // must have one owner when its trailer is appended, or the
            // append copies it.
            case .send(let sequence):
                try lead(OutboundStamped(post: consume payload, name: name, sequence: sequence))
            case .busy:
                try waitInLine(consume payload, named: name)
            }
        } catch  where error.code.meansSent {
            // Sent, though not to everyone, or not confirmed by replicas.
            counters.add(to: .posted)
            throw error
        }
        counters.add(to: .posted)
    }

    /// Posts every notification of `notifications`, in order, as few
    /// transport batches as it can, and returns once each was sent or failed.
    ///
    /// The transport gets them up to 64 at a time: the Redis transport writes
    /// such a batch pipelined, in one write, and waits once for every
    /// acknowledgement; the file transport appends it under one lock. Each
    /// post still gets its own sequence number, in order, and posts of other
    /// threads may go out between batches.
    ///
    /// - Returns: How many were sent.
    /// - Throws: The first post's failure, in post order, once every post
    ///   has its outcome (those before it were sent; those after it were
    ///   tried too). A payload that cannot be encoded, or a hub closed
    ///   meanwhile, ends the batch there: the posts before it still go out,
    ///   and that error is thrown if none failed before.
    @discardableResult
    public func post<N: TypedNotification>(contentsOf notifications: some Sequence<N>)
        throws(TypedNotificationError) -> Int
    {
        let name = try N.name.validated()
        var waiters: [OutboundWaiter] = []
        var leading: OutboundStamped?
        var refused: TypedNotificationError?
        // Queued one by one; the first finds the line idle and leads, but
        // sends only once the rest are queued behind it.
        for notification in notifications {
            // A payload that cannot be encoded ends the batch; what was
            // queued before it still goes out (and the lead is never kept).
            var payload: OutboundPayload
            do throws(TypedNotificationError) {
                payload = try outboundPayload(notification, named: name)
            } catch {
                refused = error
                break
            }
            let waiter = OutboundWaiter()
            switch outbound.withLock({ $0.enqueue(payload, named: name, waiter: waiter) }) {
            case .closed:
                refused = TypedNotificationError(code: .closed, message: "post of \(name) to a closed center")
            case .send(let sequence):
                leading = OutboundStamped(post: payload, name: name, sequence: sequence)
            case .queued:
                waiters.append(waiter)
            }
            // The line or `leading` holds it now: one owner for its buffer.
            payload = .taken
            if refused != nil { break }
        }
        var sent = 0
        var firstFailure: TypedNotificationError?
        func record(_ outcome: OutboundOutcome) {
            switch outcome {
            case .sent:
                sent += 1
            case .failed(let error):
                if error.code.meansSent { sent += 1 }
                firstFailure = firstFailure ?? error
            case .lead:
                break
            }
        }
        if let own = leading {
            do throws(TypedNotificationError) {
                try lead(own)
                record(.sent)
            } catch {
                record(.failed(error))
            }
        }
        for waiter in waiters {
            switch waiter.wait() {
            case .lead:
                do throws(TypedNotificationError) {
                    try lead(outbound.withLock { $0.lead() })
                    record(.sent)
                } catch {
                    record(.failed(error))
                }
            case let outcome:
                record(outcome)
            }
        }
        counters.add(sent, to: .posted)
        if let failure = firstFailure ?? refused { throw failure }
        return sent
    }

    /// Registers an observer of a name or a namespace now, not yet started
    /// (call `addObserver`, `deliveries` or `notifications`).
    @_spi(CenterAuthoring) public func observe<N: DarwinPayload>(
        _ type: N.Type,
        selecting selector: NotificationSelector,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy
    ) throws(TypedNotificationError) -> Observation<N> {
        Observation(try register(type, selecting: selector, from: senders, bufferingPolicy: bufferingPolicy))
    }

    /// Why the transport stopped receiving and ended this hub, or `nil`: its
    /// shared directory was removed, for example. Every observation has then
    /// ended (sequences finish, handlers stop) and the hub is closed.
    public var failure: TypedNotificationError? {
        failureState.withLock { $0 }
    }

    private func fail(_ error: TypedNotificationError) {
        failureState.withLock { $0 = $0 ?? error }
        close()
    }

    /// Starts closing the transport and ends every observation; never waits
    /// on another thread, so it works from a handler of this hub too. Later
    /// posts and registrations throw ``TypedNotificationError/Code/closed``.
    /// What the transport must still do once its thread is free (save a
    /// durable identity's cursors, end its reads at the server, send its
    /// last acknowledgements) is done when ``closed()`` returns.
    /// Idempotent.
    public func close() {
        outbound.withLock { $0.close() }
        let (observers, waiters) = table.withLock { $0.close() }
        for waiter in waiters { waiter.wake(RegistrationOutcome.closed) }
        transport.close()
        let closeDone = closeDone
        transport.whenClosed { closeDone.signal() }
        for observer in observers {
            observer.finishFromCenter()
        }
    }

    /// Returns once the hub was closed (by `close()`, its release, or its
    /// transport's failure) and what that close started is done: the
    /// transport's thread has finished, a durable identity's cursors are
    /// saved and its reads ended at the server, its last acknowledgements
    /// sent (see <doc:DeliveryGuarantees>). Await it before a process exits
    /// when the next run must start where this one stopped.
    public func closed() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            closeDone.whenSignalled { continuation.resume() }
        }
    }

    /// ``closed()`` for code that cannot await: waits at most `timeout` and
    /// returns whether the close is done. Called from a handler running on
    /// this hub's transport thread (which other hubs' transports may share),
    /// it would wait for that very thread: it returns `false` at once instead.
    public func closed(timeout: Duration) -> Bool {
        if closeDone.isSignalled { return true }
        if let loop = transport.deliveryExecutor as? EventLoop, loop.isCurrent { return false }
        return closeDone.wait(nanoseconds: UInt64(max(0, timeout.clampedNanoseconds)))
    }

    private func register<N: DarwinPayload>(
        _ type: N.Type,
        selecting selector: NotificationSelector,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy
    ) throws(TypedNotificationError) -> ObserverRecord<N> {
        let selector = try selector.validated()
        let observation = ObserverRecord<N>(
            filter: senders,
            observer: sender,
            policy: bufferingPolicy,
            metrics: counters
        )
        try add(observation, selecting: selector)
        observation.registered { [weak self] in
            self?.unregister(observation, from: selector)
        }
        return observation
    }

    /// Adds `observation` to the table, subscribing the transport to
    /// `selector` first when nobody observes it yet; returns once it is
    /// subscribed.
    private func add(_ observation: any ObservationSink, selecting selector: NotificationSelector)
        throws(TypedNotificationError)
    {
        var outcome: RegistrationOutcome
        switch table.withLock({ $0.register(observation, selecting: selector) }) {
        case .closed: outcome = .closed
        case .registered: outcome = .registered
        case .subscribe: outcome = .subscribe
        case .busy:
            // Another thread is changing the name's subscription: wait for it.
            let waiter = SubscriptionWaiter(placeholder: RegistrationOutcome.closed)
            switch table.withLock({ $0.enqueue(observation, selecting: selector, waiter: waiter) }) {
            case .closed: outcome = .closed
            case .registered: outcome = .registered
            case .subscribe: outcome = .subscribe
            case .queued: outcome = waiter.wait()
            }
        }
        switch outcome {
        case .registered: return
        case .closed:
            throw TypedNotificationError(code: .closed, message: "observer of \(selector) added to a closed center")
        case .subscribe: break
        }
        var failure: TypedNotificationError?
        do throws(TypedNotificationError) {
            try transport.subscribe(to: selector)
        } catch {
            failure = error
        }
        let settled = table.withLock { $0.subscribed(selector, succeeded: failure == nil) }
        settle(settled, of: selector)
        if let failure { throw failure }
        if settled.closed {
            throw TypedNotificationError(code: .closed, message: "the center closed while \(selector) was observed")
        }
    }

    /// Wakes the registrations a subscription change let through, and
    /// unsubscribes the selector when it lost its observers meanwhile.
    private func settle(_ settled: HubObserverTable.Settled, of selector: NotificationSelector) {
        var settled = settled
        while true {
            for (waiter, outcome) in settled.wake { waiter.wake(outcome) }
            guard settled.unsubscribe else { return }
            transport.unsubscribe(from: selector)
            settled = table.withLock { $0.unsubscribed(selector) }
        }
    }

    private func unregister(_ observation: some ObservationSink, from selector: NotificationSelector) {
        guard table.withLock({ $0.unregister(from: selector, where: { $0 === observation }) }) else { return }
        transport.unsubscribe(from: selector)
        settle(table.withLock { $0.unsubscribed(selector) }, of: selector)
    }

    /// Posts waiting in line behind the one being sent.
    var postsInLine: Int {
        outbound.withLock { $0.waitingCount }
    }

    /// Registrations of `name` waiting for its subscription to settle.
    func subscriptionWaiters(of name: NotificationName) -> Int {
        table.withLock { $0.slots[.name(name)]?.waiting.count ?? 0 }
    }

    /// How many senders of `name` the hub remembers for gap detection.
    var rememberedSenders: Int {
        table.withLock { $0.rememberedSenders }
    }

    private func isBackedUp(_ name: NotificationName) -> Bool {
        let observers = table.withLock { $0.observers(of: name) }
        return observers.contains { $0.isBackedUp }
    }

    /// How many notifications of `name` every observer can still buffer:
    /// 0 while nobody observes it (its last observer left, and the
    /// transport has yet to hear), so nothing is read for nobody.
    private func room(for name: NotificationName) -> Int? {
        let observers = table.withLock { $0.observers(of: name) }
        guard !observers.isEmpty else { return 0 }
        return observers.compactMap(\.room).min()
    }

    /// Adds `report` to the next delivery of its name's observers; counted
    /// in ``NotificationMetrics/sequenceGaps`` unless it is no gap (`isGap`
    /// false: notifications that arrived and were refused).
    private func noteMissed(_ report: MissedNotifications, isGap: Bool = true) {
        let tracksGaps = tracksSequenceGaps
        let found = table.withLock { $0.missed(report, tracksGaps: tracksGaps) }
        guard let found, found.missed > 0 || !report.isExact else { return }
        if isGap { counters.addSaturating(found.missed, to: .sequenceGaps) }
        for observer in found.observers {
            observer.noteMissed(found.missed, isExact: report.isExact, for: report.name)
        }
    }

    private func noteRefused(_ report: MissedNotifications) {
        counters.addSaturating(report.count, to: .undecodable)
        noteMissed(report, isGap: false)
    }

    private func receive(_ message: TransportMessage) {
        let tracksGaps = tracksSequenceGaps
        let delivery = table.withLock {
            $0.received(message.name, sequence: message.sequence, from: message.sender, tracksGaps: tracksGaps)
        }
        guard let delivery, !delivery.observers.isEmpty else {
            // Nobody observes the name now: the message came after its last
            // observer left. A durable one is not passed over: left
            // unhandled, it comes again when the name is observed again.
            message.receipt?.abandon()
            return
        }
        // The transport's hold on a durable message's receipt goes once every
        // observer that queued it holds it: with none (every observer's
        // sender filter passed it by), it is handled now.
        defer { message.receipt?.releaseHold() }
        counters.add(to: .received)
        if delivery.gap > 0 {
            counters.addSaturating(delivery.gap, to: .sequenceGaps)
        }
        var passedBy = false
        for observer in delivery.observers where !observer.offer(message, gap: delivery.gap) {
            passedBy = true
        }
        // An observer chose not to see it: handled, as far as it goes, even
        // if every observer that took it ends holding it.
        if passedBy { message.receipt?.passedBy() }
    }
}
