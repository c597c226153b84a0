import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Posts typed notifications and delivers them to typed observers: closures
/// that return a token, or async sequences.
///
/// Code written against this protocol runs unchanged on every center:
/// ``NotificationHub`` over any ``NotificationTransport``, and Foundation's
/// `NotificationCenter`.
///
/// Every conforming center guarantees:
/// - **Order**: one poster's notifications of one name reach each observer in
///   post order.
/// - **Immediate registration**: once an `addObserver` or `deliveries`
///   call has returned, every later post reaches that observer.
/// - **Race-free cancel**: once `token.cancel()` or `await token.cancelAndWait()`
///   returns, no run of the handler begins, and none is in flight (see
///   ``ObservationToken/cancel()`` for the two exceptions).
/// - **Fair handlers**: a handler loop gives its actor up after 256 deliveries
///   or 1 ms, so a flood never starves other work on that actor.
/// - **No silent loss**: every observer has a bounded buffer with a stated
///   policy; what it drops is counted and reported as
///   ``NotificationDelivery/missed`` on the next delivery.
///
/// One way to observe, for every subject: an ``Observed`` value says what
/// (a notification type, a payload type under a name chosen at run time, or
/// under every name of a namespace), passed to ``addObserver(_:from:bufferingPolicy:handler:)``
/// (on the center's executor, an actor, or the main actor),
/// ``notifications(_:from:bufferingPolicy:)`` or ``deliveries(_:from:bufferingPolicy:)``.
/// Any ``DarwinPayload`` posts under a name given per call with
/// ``post(_:as:)``; a bare name, as a Darwin notification is, is an empty
/// ``RawNotification``.
///
/// The centers are ``NotificationHub`` and Foundation's `NotificationCenter`;
/// a center of your own forwards to one of them (a transport of your own is a
/// ``NotificationTransport``, see <doc:WritingATransport>). To conform,
/// implement ``sender``, ``executor``, ``post(_:as:)`` and, with
/// `@_spi(CenterAuthoring) import TypedNotifications`, `observe`, the one
/// registration hook every `addObserver`, `deliveries` and `notifications`
/// call, by forwarding it. A conforming type that forgets a requirement
/// does not compile (CI type-checks one that does, `.ci/misuse`).
public protocol TypedNotificationCenter<Executor>: Sendable {
    /// The actor that runs handlers registered without one.
    associatedtype Executor: Actor

    /// This center's identity, carried by everything it posts.
    var sender: NotificationSender { get }

    /// The serial executor for handlers registered without an actor.
    var executor: Executor { get }

    /// Posts `payload` under `name` to every observer of that name the center
    /// reaches: what `post(_:)` calls with the notification's own name, and
    /// how a payload travels under a name chosen at run time.
    ///
    /// Observers of `name` get the value as the type they asked for: as it is
    /// when it is that type, otherwise decoded from its payload bytes, as it
    /// would cross a process boundary.
    ///
    /// - Throws: ``TypedNotificationError`` if the center is closed, the payload
    ///   cannot be encoded or is over the limit (cross-process transports), or
    ///   the transport fails; nothing is sent then. One exception:
    ///   ``TypedNotificationError/Code/undelivered`` means it was sent, and only
    ///   the endpoints the error names did not take it.
    func post<Payload: DarwinPayload>(_ payload: Payload, as name: NotificationName)
        throws(TypedNotificationError)

    /// Registers an observer of the values posted under the name, or under
    /// any name in the namespace, that `selector` says, decoded as `type`,
    /// and returns it not yet started: the one registration every
    /// `addObserver`, `deliveries` and `notifications` makes, before it
    /// becomes a handler or a sequence. Registration is immediate: every
    /// post after this returns reaches the observer.
    ///
    /// For conformers only; a conformer outside this package forwards it to
    /// the center it wraps. No extension member shares this name, so a
    /// conforming type that forgets it does not compile.
    @_spi(CenterAuthoring) func observe<Payload: DarwinPayload>(
        _ type: Payload.Type,
        selecting selector: NotificationSelector,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy
    ) throws(TypedNotificationError) -> Observation<Payload>
}

/// An observer a center registered and nobody started yet: what
/// `observe` returns, and `addObserver` or `deliveries` turn into a handler
/// or a sequence. It starts once. One that is never started ends when its
/// last copy is released: it leaves its center, as a cancelled one does, and
/// keeps nothing.
@_spi(CenterAuthoring) public struct Observation<Payload: DarwinPayload>: Sendable {
    private let unstarted: UnstartedObservation<Payload>

    package init(_ record: ObserverRecord<Payload>) {
        unstarted = UnstartedObservation(record)
    }

    /// The observer, now owned by the handler or sequence that starts it.
    ///
    /// - Throws: ``TypedNotificationError/Code/closed`` when it was started
    ///   before: a second start would share, and steal from, the first
    ///   one's deliveries.
    func start() throws(TypedNotificationError) -> ObserverRecord<Payload> {
        try unstarted.start()
    }
}

/// Ends an observation nobody started when the last copy of its
/// ``Observation`` goes.
final class UnstartedObservation<Payload: DarwinPayload>: Sendable {
    private let record: ObserverRecord<Payload>
    private let started = Atomic<Bool>(false)

    init(_ record: ObserverRecord<Payload>) {
        self.record = record
    }

    func start() throws(TypedNotificationError) -> ObserverRecord<Payload> {
        guard !started.exchange(true, ordering: .acquiringAndReleasing) else {
            throw TypedNotificationError(code: .closed, message: "an observation starts once; this one was started")
        }
        return record
    }

    deinit {
        if !started.load(ordering: .acquiring) { record.cancel(waitingForRun: false) }
    }
}

// The two ways an observation starts, written once for every center.
extension TypedNotificationCenter {
    /// Registers a handler that runs isolated to `actor`, which the center
    /// holds weakly while it waits for notifications, so an actor that
    /// observes on itself and stores the token is released when the last
    /// other reference goes, and the observation ends with it. The main
    /// actor and the center's executor are kept.
    func registerObserver<Payload: DarwinPayload, A: Actor>(
        _ type: Payload.Type,
        selecting selector: NotificationSelector,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy,
        on actor: A,
        handler: @escaping @Sendable (isolated A, Payload, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        let observation = try observe(type, selecting: selector, from: senders, bufferingPolicy: bufferingPolicy)
        return startHandler(for: try observation.start(), on: actor, handler: handler)
    }

    /// Registers an observer now and returns its deliveries as an async sequence.
    func registerDeliveries<Payload: DarwinPayload>(
        of type: Payload.Type,
        selecting selector: NotificationSelector,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy
    ) throws(TypedNotificationError) -> DeliverySequence<Payload> {
        DeliverySequence(
            observation: try observe(type, selecting: selector, from: senders, bufferingPolicy: bufferingPolicy)
                .start())
    }
}

extension TypedNotificationCenter {
    /// Posts a notification to every observer of its name that the center reaches.
    ///
    /// - Throws: ``TypedNotificationError`` if the center is closed, the payload
    ///   cannot be encoded or is over the limit (cross-process transports), or
    ///   the transport fails; nothing is sent then. One exception:
    ///   ``TypedNotificationError/Code/undelivered`` means it was sent, and only
    ///   the endpoints the error names did not take it.
    public func post<N: TypedNotification>(_ notification: N) throws(TypedNotificationError) {
        Anatomy.postCalled()
        try post(notification, as: try N.name.validated(declaredBy: N.self))
    }

    /// Registers a handler that runs on the center's ``executor``.
    ///
    /// ```swift
    /// let token = try center.addObserver(.of(Reload.self)) { reload, delivery in … }
    /// ```
    ///
    /// Handlers of one center on its executor never run concurrently.
    ///
    /// - Parameters:
    ///   - observed: What is observed: a notification type, a payload type
    ///     under a name, or under every name of a namespace (``Observed``).
    ///   - senders: Whose posts are delivered.
    ///   - bufferingPolicy: What the observer's buffer keeps when its handler
    ///     falls behind; what it drops is reported as
    ///     ``NotificationDelivery/missed``.
    ///   - handler: Runs once per notification, in post order per poster and name.
    /// - Returns: A token; the observer lives until it is cancelled or released.
    /// - Throws: ``TypedNotificationError`` if the center is closed, the name
    ///   or namespace is invalid, or the transport cannot observe a namespace
    ///   (``TypedNotificationError/Code/unsupported``).
    public func addObserver<Value: DarwinPayload>(
        _ observed: Observed<Value>,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        handler: @escaping @Sendable (Value, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(
            Value.self, selecting: try observed.selector.get(), from: senders, bufferingPolicy: bufferingPolicy,
            on: executor
        ) { _, value, delivery in
            handler(value, delivery)
        }
    }

    /// Registers a handler that runs isolated to `actor`.
    ///
    /// The center holds `actor` weakly while it waits for notifications, so an
    /// actor that observes on itself and stores the token is released when the
    /// last other reference goes, and the observation ends with it. Hold the
    /// actor you pass: one that nothing else holds ends its observation at its
    /// first notification. The main actor and the center's executor are kept.
    ///
    /// - Returns: A token; the observer lives until it is cancelled or released.
    /// - Throws: as ``addObserver(_:from:bufferingPolicy:handler:)``.
    public func addObserver<Value: DarwinPayload, A: Actor>(
        _ observed: Observed<Value>,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        on actor: A,
        handler: @escaping @Sendable (isolated A, Value, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(
            Value.self, selecting: try observed.selector.get(), from: senders, bufferingPolicy: bufferingPolicy,
            on: actor, handler: handler)
    }

    /// Registers a handler that runs on the main actor, for UI code.
    ///
    /// ```swift
    /// let token = try center.addObserver(.of(ThemeChanged.self), on: .main) { theme, _ in
    ///     view.apply(theme)
    /// }
    /// ```
    ///
    /// - Returns: A token; the observer lives until it is cancelled or released.
    /// - Throws: as ``addObserver(_:from:bufferingPolicy:handler:)``.
    public func addObserver<Value: DarwinPayload>(
        _ observed: Observed<Value>,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        on placement: MainActorPlacement,
        handler: @escaping @MainActor @Sendable (Value, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(
            Value.self, selecting: try observed.selector.get(), from: senders, bufferingPolicy: bufferingPolicy,
            on: MainActor.shared
        ) { _, value, delivery in
            // The loop runs isolated to MainActor.shared, which is the main actor.
            MainActor.assumeIsolated { handler(value, delivery) }
        }
    }

    /// Registers an observer now and returns its deliveries as an async
    /// sequence: each value with who sent it, its sequence number, when, its
    /// name, and how many were missed before it.
    ///
    /// ```swift
    /// for await posted in try center.deliveries(.of(RawNotification.self, in: "com.example.jobs")) {
    ///     print(posted.delivery.name, posted.delivery.sender, posted.notification.bytes.count)
    /// }
    /// ```
    ///
    /// - Throws: as ``addObserver(_:from:bufferingPolicy:handler:)``.
    public func deliveries<Value: DarwinPayload>(
        _ observed: Observed<Value>,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default
    ) throws(TypedNotificationError) -> DeliverySequence<Value> {
        try registerDeliveries(
            of: Value.self, selecting: try observed.selector.get(), from: senders, bufferingPolicy: bufferingPolicy)
    }

    /// Registers an observer now and returns its values as an async sequence.
    ///
    /// ```swift
    /// for await reload in try center.notifications(.of(Reload.self)) { … }
    /// ```
    ///
    /// Use ``deliveries(_:from:bufferingPolicy:)`` to see who sent each, its
    /// name, and ``NotificationDelivery/missed``.
    ///
    /// - Throws: as ``addObserver(_:from:bufferingPolicy:handler:)``.
    public func notifications<Value: DarwinPayload>(
        _ observed: Observed<Value>,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default
    ) throws(TypedNotificationError) -> NotificationSequence<Value> {
        NotificationSequence(try deliveries(observed, from: senders, bufferingPolicy: bufferingPolicy))
    }
}
