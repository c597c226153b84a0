// expect: does not conform to protocol 'TypedNotificationCenter'
//
// A center that forgets a requirement must not compile. (When the
// convenience methods shared the requirements' names, this compiled, and
// its `deliveries(of:)` called itself until the stack ran out.)
import TypedNotifications

struct ForgetfulCenter: TypedNotificationCenter {
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
    // registerDeliveries(of:from:bufferingPolicy:) forgotten.
}
