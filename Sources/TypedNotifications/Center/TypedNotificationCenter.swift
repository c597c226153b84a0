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
/// - **Immediate registration**: once an `addObserver` or `deliveries(of:)`
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
/// To conform, implement ``sender``, ``executor``, ``post(_:)``,
/// ``registerObserver(_:from:bufferingPolicy:on:handler:)`` and
/// ``registerDeliveries(of:from:bufferingPolicy:)``. Callers use the
/// `addObserver`, `deliveries(of:)` and `notifications(of:)` methods of the
/// protocol's extension, none of which shares a requirement's name: a
/// conforming type that forgets a requirement does not compile (CI
/// type-checks one that does, `.ci/misuse`).
public protocol TypedNotificationCenter<Executor>: Sendable {
    /// The actor that runs handlers registered without one.
    associatedtype Executor: Actor

    /// This center's identity, carried by everything it posts.
    var sender: NotificationSender { get }

    /// The serial executor for handlers registered without an actor.
    var executor: Executor { get }

    /// Posts a notification to every observer of its name that the center reaches.
    ///
    /// - Throws: ``TypedNotificationError`` if the center is closed, the payload
    ///   cannot be encoded or is over the limit (cross-process transports), or
    ///   the transport fails; nothing is sent then. One exception:
    ///   ``TypedNotificationError/Code/undelivered`` means it was sent, and only
    ///   the endpoints the error names did not take it.
    func post<N: TypedNotification>(_ notification: N) throws(TypedNotificationError)

    /// Registers a handler that runs isolated to `actor`, one notification at a
    /// time, in order: what `addObserver(_:on:handler:)` calls. Conformers
    /// implement it; callers use `addObserver`.
    ///
    /// The center holds `actor` weakly while it waits for notifications, so an
    /// actor that observes on itself and stores the token is released when the
    /// last other reference goes, and the observation ends with it. Hold the
    /// actor you pass: one that nothing else holds ends its observation at its
    /// first notification. The main actor and the center's executor are kept.
    ///
    /// No extension member shares this name, so a conforming type that
    /// forgets it does not compile (rather than calling itself forever).
    ///
    /// - Returns: A token; the observer lives until it is cancelled or released.
    func registerObserver<N: TypedNotification, A: Actor>(
        _ type: N.Type,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy,
        on actor: A,
        handler: @escaping @Sendable (isolated A, N, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken

    /// Registers an observer now and returns its deliveries as an async
    /// sequence: what `deliveries(of:)` and `notifications(of:)` call.
    /// Conformers implement it; callers use those.
    func registerDeliveries<N: TypedNotification>(
        of type: N.Type,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy
    ) throws(TypedNotificationError) -> DeliverySequence<N>
}

extension TypedNotificationCenter {
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
        try addObserver(type, from: senders, bufferingPolicy: bufferingPolicy, on: executor) { _, note, delivery in
            handler(note, delivery)
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
    public func addObserver<N: TypedNotification, A: Actor>(
        _ type: N.Type,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        on actor: A,
        handler: @escaping @Sendable (isolated A, N, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(type, from: senders, bufferingPolicy: bufferingPolicy, on: actor, handler: handler)
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
        try addObserver(type, from: senders, bufferingPolicy: bufferingPolicy, on: MainActor.shared) {
            _, note, delivery in
            // The loop runs isolated to MainActor.shared, which is the main actor.
            MainActor.assumeIsolated { handler(note, delivery) }
        }
    }

    /// Registers an observer now and returns its deliveries as an async sequence.
    public func deliveries<N: TypedNotification>(
        of type: N.Type,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default
    ) throws(TypedNotificationError) -> DeliverySequence<N> {
        try registerDeliveries(of: type, from: senders, bufferingPolicy: bufferingPolicy)
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
}
