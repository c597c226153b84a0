@_spi(TransportAuthoring) import TypedNotifications

/// What tools do with a hub whatever its transport: post, observe, close.
package protocol ErasedHub: Sendable {
    /// Why the transport ended the hub, if it did.
    var failure: TypedNotificationError? { get }
    /// The transport, for the capabilities only some have.
    var anyTransport: any NotificationTransport { get }
    /// Posts raw bytes as `name`.
    func post(_ raw: RawNotification, as name: NotificationName) throws(TypedNotificationError)
    /// Posts a typed notification.
    func postTyped<N: TypedNotification>(_ notification: N) throws(TypedNotificationError)
    /// Raw deliveries of a name, or of every name in a namespace.
    func rawDeliveries(of selector: NotificationSelector, bufferingPolicy: NotificationBufferingPolicy)
        throws(TypedNotificationError) -> DeliverySequence<RawNotification>
    /// Typed deliveries, unbounded.
    func typedDeliveries<N: TypedNotification>(of type: N.Type) throws(TypedNotificationError) -> DeliverySequence<N>
    /// The newest value the transport keeps under `name`, if it keeps any.
    func latestRaw(of name: NotificationName) throws(TypedNotificationError) -> DeliveredNotification<RawNotification>?
    /// Starts closing the hub.
    func close()
    /// Waits at most `timeout` for the close to be done.
    func closed(timeout: Duration) -> Bool
}

extension NotificationHub: ErasedHub {
    package var anyTransport: any NotificationTransport { transport }

    package func postTyped<N: TypedNotification>(_ notification: N) throws(TypedNotificationError) {
        try post(notification)
    }

    package func rawDeliveries(of selector: NotificationSelector, bufferingPolicy: NotificationBufferingPolicy)
        throws(TypedNotificationError) -> DeliverySequence<RawNotification>
    {
        switch selector {
        case .name(let name): try deliveries(.of(RawNotification.self, named: name), bufferingPolicy: bufferingPolicy)
        case .namespace(let namespace):
            try deliveries(.of(RawNotification.self, in: namespace), bufferingPolicy: bufferingPolicy)
        }
    }

    package func typedDeliveries<N: TypedNotification>(of type: N.Type) throws(TypedNotificationError)
        -> DeliverySequence<N>
    {
        try deliveries(.of(type), bufferingPolicy: .unbounded)
    }

    package func latestRaw(of name: NotificationName) throws(TypedNotificationError)
        -> DeliveredNotification<RawNotification>?
    {
        guard let keeping = transport as? any KeepsLatest,
            let message = try keeping.latestMessage(of: try name.validated()),
            case .encoded(let encoded) = message.payload
        else { return nil }
        return DeliveredNotification(
            notification: RawNotification(bytes: Array(encoded.payload)),
            delivery: NotificationDelivery(
                name: message.name, sender: message.sender, sequence: message.sequence, timestamp: message.timestamp,
                missed: 0))
    }
}

/// A hub over any transport of the catalog, behind one interface for tools.
package struct AnyHub: Sendable {
    private let hub: any ErasedHub

    init(_ hub: any ErasedHub) {
        self.hub = hub
    }

    /// Why the transport ended the hub, if it did.
    package var failure: TypedNotificationError? { hub.failure }

    /// The transport, for the capabilities only some have (`as?`).
    package var transport: any NotificationTransport { hub.anyTransport }

    /// Posts raw bytes as `name`.
    package func post(_ raw: RawNotification, as name: NotificationName) throws(TypedNotificationError) {
        try hub.post(raw, as: name)
    }

    /// Posts a typed notification.
    package func post<N: TypedNotification>(_ notification: N) throws(TypedNotificationError) {
        try hub.postTyped(notification)
    }

    /// Raw deliveries of a name, or of every name in a namespace.
    package func deliveries(ofRaw selector: NotificationSelector, bufferingPolicy: NotificationBufferingPolicy)
        throws(TypedNotificationError) -> DeliverySequence<RawNotification>
    {
        try hub.rawDeliveries(of: selector, bufferingPolicy: bufferingPolicy)
    }

    /// Typed deliveries, unbounded.
    package func notifications<N: TypedNotification>(_ observed: Observed<N>) throws(TypedNotificationError)
        -> DeliverySequence<N>
    {
        try hub.typedDeliveries(of: N.self)
    }

    /// The newest value kept under `name`; `nil` where none is, or the
    /// transport keeps nothing.
    package func latest(of name: NotificationName) throws(TypedNotificationError)
        -> DeliveredNotification<RawNotification>?
    {
        try hub.latestRaw(of: name)
    }

    /// Closes and unregisters.
    package func close() { hub.close() }

    /// Closes, and waits until the close is done (a durable identity's
    /// cursors saved, its reads ended at the server), at most `timeout`:
    /// what a tool does before it exits. Returns whether it was done.
    @discardableResult
    package func closeAndWait(upTo timeout: Duration = .seconds(10)) -> Bool {
        hub.close()
        return hub.closed(timeout: timeout)
    }
}

extension NotificationHub {
    /// Closes, and waits until the close is done, at most `timeout`: what a
    /// tool or a test does before it exits. Returns whether it was done.
    @discardableResult
    package func closeAndWait(upTo timeout: Duration = .seconds(10)) -> Bool {
        close()
        return closed(timeout: timeout)
    }
}
