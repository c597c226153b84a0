/// Observing every name in a namespace.
///
/// The same calls as for one name, with `in:` where `named:` was, and one
/// difference: each delivery says its name (``NotificationDelivery/name``).
/// An observer of a namespace has every guarantee an observer of a name has:
/// registration is immediate (a name first posted after the call returns,
/// by a process started after it, reaches it), order is per poster and
/// name, ``NotificationDelivery/missed`` counts per name, and cancel is
/// exact. Every value is decoded as the observer's type; a post whose
/// payload is not one is counted as undecodable, as for a name. Observe
/// ``RawNotification`` to see every notification in the namespace,
/// whatever its payload, as bytes.
///
/// ```swift
/// for await posted in try center.deliveries(in: "com.example.jobs") {
///     print(posted.name, posted.delivery.sender, posted.notification.bytes.count)
/// }
/// ```
extension TypedNotificationCenter {
    /// Registers a handler for the values posted under any name in
    /// `namespace`, decoded as `type`; `delivery.name` says which name. It
    /// runs on the center's ``executor``.
    ///
    /// - Throws: ``TypedNotificationError`` if the center is closed, the
    ///   namespace came from an invalid literal, or the transport cannot
    ///   observe a namespace (``TypedNotificationError/Code/unsupported``).
    public func addObserver<Payload: DarwinPayload>(
        _ type: Payload.Type,
        in namespace: NotificationNamespace,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        handler: @escaping @Sendable (Payload, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(
            type, selecting: .namespace(namespace), from: senders, bufferingPolicy: bufferingPolicy, on: executor
        ) { _, value, delivery in
            handler(value, delivery)
        }
    }

    /// Registers a handler for the values posted under any name in
    /// `namespace`, isolated to `actor`, which the center holds weakly as
    /// for a name.
    ///
    /// - Throws: ``TypedNotificationError`` as
    ///   ``addObserver(_:in:from:bufferingPolicy:handler:)`` does.
    public func addObserver<Payload: DarwinPayload, A: Actor>(
        _ type: Payload.Type,
        in namespace: NotificationNamespace,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        on actor: A,
        handler: @escaping @Sendable (isolated A, Payload, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(
            type, selecting: .namespace(namespace), from: senders, bufferingPolicy: bufferingPolicy, on: actor,
            handler: handler)
    }

    /// Registers a handler for the values posted under any name in
    /// `namespace`, on the main actor.
    ///
    /// - Throws: ``TypedNotificationError`` as
    ///   ``addObserver(_:in:from:bufferingPolicy:handler:)`` does.
    public func addObserver<Payload: DarwinPayload>(
        _ type: Payload.Type,
        in namespace: NotificationNamespace,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default,
        on placement: MainActorPlacement,
        handler: @escaping @MainActor @Sendable (Payload, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try registerObserver(
            type, selecting: .namespace(namespace), from: senders, bufferingPolicy: bufferingPolicy,
            on: MainActor.shared
        ) { _, value, delivery in
            // The loop runs isolated to MainActor.shared, which is the main actor.
            MainActor.assumeIsolated { handler(value, delivery) }
        }
    }

    /// Registers an observer of every name in `namespace` now and returns its
    /// deliveries, decoded as `type`, as an async sequence; each element's
    /// ``DeliveredNotification/name`` says its name.
    ///
    /// - Throws: ``TypedNotificationError`` as
    ///   ``addObserver(_:in:from:bufferingPolicy:handler:)`` does.
    public func deliveries<Payload: DarwinPayload>(
        of type: Payload.Type,
        in namespace: NotificationNamespace,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default
    ) throws(TypedNotificationError) -> DeliverySequence<Payload> {
        try registerDeliveries(
            of: type, selecting: .namespace(namespace), from: senders, bufferingPolicy: bufferingPolicy)
    }

    /// Registers an observer of every name in `namespace` now and returns
    /// every notification posted there, whatever its payload, as bytes: what
    /// a dashboard, an audit log or `tnotify watch 'com.example.*'` shows.
    ///
    /// - Throws: ``TypedNotificationError`` as
    ///   ``addObserver(_:in:from:bufferingPolicy:handler:)`` does.
    public func deliveries(
        in namespace: NotificationNamespace,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default
    ) throws(TypedNotificationError) -> DeliverySequence<RawNotification> {
        try registerDeliveries(
            of: RawNotification.self, selecting: .namespace(namespace), from: senders,
            bufferingPolicy: bufferingPolicy)
    }

    /// Registers an observer of every name in `namespace` now and returns its
    /// values, decoded as `type`, each with the name it was posted under.
    ///
    /// ```swift
    /// for await (name, score) in try center.notifications(of: Score.self, in: "com.example.match") {
    ///     board[name] = score
    /// }
    /// ```
    ///
    /// - Throws: ``TypedNotificationError`` as
    ///   ``addObserver(_:in:from:bufferingPolicy:handler:)`` does.
    public func notifications<Payload: DarwinPayload>(
        of type: Payload.Type,
        in namespace: NotificationNamespace,
        from senders: SenderFilter = .any,
        bufferingPolicy: NotificationBufferingPolicy = .default
    ) throws(TypedNotificationError) -> NamedNotificationSequence<Payload> {
        NamedNotificationSequence(
            try deliveries(of: type, in: namespace, from: senders, bufferingPolicy: bufferingPolicy))
    }
}

/// Notifications of one type posted under the names of a namespace, as an
/// async sequence of each value with its name.
///
/// The same as ``DeliverySequence`` without the rest of the metadata:
/// registered when created, single pass, removed when iteration ends. Use
/// ``TypedNotificationCenter/deliveries(of:in:from:bufferingPolicy:)`` to see
/// ``NotificationDelivery/missed``.
public struct NamedNotificationSequence<Notification: DarwinPayload>: AsyncSequence, Sendable {
    /// Each element: the name a notification was posted under, and its value.
    public typealias Element = (name: NotificationName, notification: Notification)
    /// Iteration never fails; it ends when cancelled or when the center closes.
    public typealias Failure = Never

    private let deliveries: DeliverySequence<Notification>

    /// Wraps a sequence of deliveries, keeping each value and its name.
    public init(_ deliveries: DeliverySequence<Notification>) {
        self.deliveries = deliveries
    }

    /// How many notifications this sequence's buffer has dropped so far.
    public var dropped: Int { deliveries.dropped }

    /// Starts the single iteration.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: deliveries.makeAsyncIterator())
    }

    /// Takes notifications in post order (per poster and name).
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: DeliverySequence<Notification>.AsyncIterator

        /// The next notification and its name, or `nil` once the observation has ended.
        public mutating func next(isolation actor: isolated (any Actor)?) async -> Element? {
            guard let delivered = await base.next(isolation: actor) else { return nil }
            return (delivered.name, delivered.notification)
        }

        /// The next notification and its name, or `nil` once the observation has ended.
        public mutating func next() async -> Element? {
            await next(isolation: nil)
        }
    }
}

@available(*, unavailable)
extension NamedNotificationSequence.AsyncIterator: Sendable {}
