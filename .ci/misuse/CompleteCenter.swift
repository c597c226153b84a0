// A center forwarding every requirement compiles: the misuse check above
// fails for the missing requirement, not for anything else in the listing.
import TypedNotifications

struct ForwardingCenter: TypedNotificationCenter {
    let inner: NotificationHub<InProcessTransport>

    var sender: NotificationSender { inner.sender }
    var executor: NotificationExecutor { inner.executor }

    func post<N: TypedNotification>(_ notification: N) throws(TypedNotificationError) {
        try inner.post(notification)
    }

    func registerObserver<N: TypedNotification, A: Actor>(
        _ type: N.Type,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy,
        on actor: A,
        handler: @escaping @Sendable (isolated A, N, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> ObservationToken {
        try inner.addObserver(type, from: senders, bufferingPolicy: bufferingPolicy, on: actor, handler: handler)
    }

    func registerDeliveries<N: TypedNotification>(
        of type: N.Type,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy
    ) throws(TypedNotificationError) -> DeliverySequence<N> {
        try inner.deliveries(of: type, from: senders, bufferingPolicy: bufferingPolicy)
    }
}
