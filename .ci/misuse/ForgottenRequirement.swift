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
    // registerDeliveries(of:named:from:bufferingPolicy:) forgotten.
}
