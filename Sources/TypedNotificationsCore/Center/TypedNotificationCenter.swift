import Synchronization

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
/// Names chosen at run time work the same way: ``post(name:)`` and
/// ``addObserver(named:from:bufferingPolicy:handler:)`` for a bare name, as a
/// Darwin notification is, and ``post(_:as:)``,
/// ``deliveries(of:named:from:bufferingPolicy:)`` for any ``DarwinPayload``
/// under a name given per call.
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
        try post(notification, as: try N.name.validated(declaredBy: N.self))
    }

    /// Posts `name` with no payload, as a Darwin notification does.
    ///
    /// Observers of `name` registered with
    /// ``addObserver(named:from:bufferingPolicy:handler:)`` or
    /// ``deliveries(named:from:bufferingPolicy:)`` get it, and so do typed
    /// observers of a ``PayloadlessNotification`` with that name.
    ///
    /// - Throws: as ``post(_:as:)``.
    public func post(name: NotificationName) throws(TypedNotificationError) {
        try post(EmptyPayload(), as: name)
    }

    /// Registers a handler that runs on the center's ``executor``.
    ///
    /// Handlers of one center on its executor never run concurrently.
    ///
    /// - Returns: A token; the observer lives until it is cancelled or released.
    public func addObserver<N: TypedNotification>(
        _ type: N.Type,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        handler: @escaping @Sendable (N, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try addObserver(
            type, named: try N.name.validated(declaredBy: N.self), from: senders, bufferingPolicy: bufferingPolicy,
            handler: handler)
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
    public func addObserver<N: TypedNotification, A: Actor>(
        _ type: N.Type,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        on actor: A,
        handler: @escaping @Sendable (isolated A, N, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(
            type, selecting: .name(try N.name.validated(declaredBy: N.self)), from: senders,
            bufferingPolicy: bufferingPolicy,
            on: actor, handler: handler)
    }

    /// Registers a handler that runs on the main actor, for UI code.
    ///
    /// - Returns: A token; the observer lives until it is cancelled or released.
    public func addObserver<N: TypedNotification>(
        _ type: N.Type,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        on placement: MainActorPlacement,
        handler: @escaping @MainActor @Sendable (N, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try addObserver(
            type, named: try N.name.validated(declaredBy: N.self), from: senders, bufferingPolicy: bufferingPolicy,
            on: placement, handler: handler)
    }

    /// Registers a handler of the values posted under `name`, chosen at run
    /// time, decoded as `type`; it runs on the center's ``executor``.
    ///
    /// A post whose payload does not decode as `type` is counted as
    /// undecodable and reported in the next delivery's
    /// ``NotificationDelivery/missed``.
    ///
    /// - Returns: A token; the observer lives until it is cancelled or released.
    public func addObserver<Payload: DarwinPayload>(
        _ type: Payload.Type,
        named name: NotificationName,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        handler: @escaping @Sendable (Payload, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(
            type, selecting: .name(name), from: senders, bufferingPolicy: bufferingPolicy, on: executor
        ) {
            _, value, delivery in
            handler(value, delivery)
        }
    }

    /// Registers a handler of the values posted under `name`, chosen at run
    /// time, decoded as `type`; it runs isolated to `actor`, which the center
    /// holds weakly while it waits (see
    /// ``addObserver(_:from:bufferingPolicy:on:handler:)-(_,_,_,A,_)``).
    ///
    /// - Returns: A token; the observer lives until it is cancelled or released.
    public func addObserver<Payload: DarwinPayload, A: Actor>(
        _ type: Payload.Type,
        named name: NotificationName,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        on actor: A,
        handler: @escaping @Sendable (isolated A, Payload, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(
            type, selecting: .name(name), from: senders, bufferingPolicy: bufferingPolicy, on: actor, handler: handler)
    }

    /// Registers a handler of the values posted under `name`, chosen at run
    /// time, decoded as `type`; it runs on the main actor, for UI code.
    ///
    /// - Returns: A token; the observer lives until it is cancelled or released.
    public func addObserver<Payload: DarwinPayload>(
        _ type: Payload.Type,
        named name: NotificationName,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        on placement: MainActorPlacement,
        handler: @escaping @MainActor @Sendable (Payload, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(
            type, selecting: .name(name), from: senders, bufferingPolicy: bufferingPolicy, on: MainActor.shared
        ) { _, value, delivery in
            // The loop runs isolated to MainActor.shared, which is the main actor.
            MainActor.assumeIsolated { handler(value, delivery) }
        }
    }

    /// Registers a handler of every post under `name`, whatever its payload,
    /// as a Darwin-notification observer is; it runs on the center's
    /// ``executor``.
    ///
    /// ```swift
    /// let token = try center.addObserver(named: name) { delivery in reload() }
    /// try center.post(name: name)
    /// ```
    ///
    /// - Returns: A token; the observer lives until it is cancelled or released.
    public func addObserver(
        named name: NotificationName,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        handler: @escaping @Sendable (NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(
            RawNotification.self, selecting: .name(name), from: senders, bufferingPolicy: bufferingPolicy, on: executor
        ) { _, _, delivery in
            handler(delivery)
        }
    }

    /// Registers a handler of every post under `name`, whatever its payload;
    /// it runs isolated to `actor`, which the center holds weakly while it
    /// waits (see ``addObserver(_:from:bufferingPolicy:on:handler:)-(_,_,_,A,_)``).
    ///
    /// - Returns: A token; the observer lives until it is cancelled or released.
    public func addObserver<A: Actor>(
        named name: NotificationName,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        on actor: A,
        handler: @escaping @Sendable (isolated A, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(
            RawNotification.self, selecting: .name(name), from: senders, bufferingPolicy: bufferingPolicy, on: actor
        ) { actor, _, delivery in
            handler(actor, delivery)
        }
    }

    /// Registers a handler of every post under `name`, whatever its payload;
    /// it runs on the main actor, for UI code.
    ///
    /// - Returns: A token; the observer lives until it is cancelled or released.
    public func addObserver(
        named name: NotificationName,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        on placement: MainActorPlacement,
        handler: @escaping @MainActor @Sendable (NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(
            RawNotification.self, selecting: .name(name), from: senders, bufferingPolicy: bufferingPolicy,
            on: MainActor.shared
        ) { _, _, delivery in
            // The loop runs isolated to MainActor.shared, which is the main actor.
            MainActor.assumeIsolated { handler(delivery) }
        }
    }

    /// Registers an observer now and returns its deliveries as an async sequence.
    public func deliveries<N: TypedNotification>(
        of type: N.Type,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default
    ) throws(TypedNotificationError) -> DeliverySequence<N> {
        try registerDeliveries(
            of: type, selecting: .name(try N.name.validated(declaredBy: N.self)), from: senders,
            bufferingPolicy: bufferingPolicy)
    }

    /// Registers an observer now and returns its notifications as an async sequence.
    ///
    /// ```swift
    /// for await note in try center.notifications(of: Reload.self) { … }
    /// ```
    public func notifications<N: TypedNotification>(
        of type: N.Type,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default
    ) throws(TypedNotificationError) -> NotificationSequence<N> {
        NotificationSequence(try deliveries(of: type, from: senders, bufferingPolicy: bufferingPolicy))
    }

    /// Registers an observer of `name`, chosen at run time, now and returns
    /// its deliveries, decoded as `type`, as an async sequence.
    ///
    /// A post whose payload does not decode as `type` is counted as
    /// undecodable and reported in the next delivery's
    /// ``NotificationDelivery/missed``.
    public func deliveries<Payload: DarwinPayload>(
        of type: Payload.Type,
        named name: NotificationName,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default
    ) throws(TypedNotificationError) -> DeliverySequence<Payload> {
        try registerDeliveries(of: type, selecting: .name(name), from: senders, bufferingPolicy: bufferingPolicy)
    }

    /// Registers an observer of `name`, chosen at run time, now and returns
    /// its values, decoded as `type`, as an async sequence.
    public func notifications<Payload: DarwinPayload>(
        of type: Payload.Type,
        named name: NotificationName,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default
    ) throws(TypedNotificationError) -> NotificationSequence<Payload> {
        NotificationSequence(
            try registerDeliveries(of: type, selecting: .name(name), from: senders, bufferingPolicy: bufferingPolicy))
    }

    /// Registers an observer of every post under `name`, whatever its
    /// payload, now and returns its deliveries as an async sequence: the
    /// payload's bytes as they are, with who sent it and what was missed.
    ///
    /// ```swift
    /// for await posted in try center.deliveries(named: name) { reload() }
    /// ```
    public func deliveries(
        named name: NotificationName,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default
    ) throws(TypedNotificationError) -> DeliverySequence<RawNotification> {
        try registerDeliveries(
            of: RawNotification.self, selecting: .name(name), from: senders, bufferingPolicy: bufferingPolicy)
    }
}
