// A center forwarding every requirement compiles: the misuse check above
// fails for the missing requirement, not for anything else in the listing.
import TypedNotifications

struct ForwardingCenter: TypedNotificationCenter {
    let inner: NotificationHub<InProcessTransport>

    var sender: NotificationSender { inner.sender }
    var executor: NotificationExecutor { inner.executor }

    func post<Payload: DarwinPayload>(_ payload: Payload, as name: NotificationName)
        throws(TypedNotificationError)
    {
        try inner.post(payload, as: name)
    }

    func registerObserver<N: DarwinPayload, A: Actor>(
        _ type: N.Type,
        named name: NotificationName,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy,
        on actor: A,
        handler: @escaping @Sendable (isolated A, N, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try inner.addObserver(
            type, named: name, from: senders, bufferingPolicy: bufferingPolicy, on: actor, handler: handler)
    }

    func registerDeliveries<N: DarwinPayload>(
        of type: N.Type,
        named name: NotificationName,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy
    ) throws(TypedNotificationError) -> DeliverySequence<N> {
        try inner.deliveries(of: type, named: name, from: senders, bufferingPolicy: bufferingPolicy)
    }
}
