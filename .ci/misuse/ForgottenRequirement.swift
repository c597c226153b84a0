// expect: does not conform to protocol 'TypedNotificationCenter'
//
// A center that forgets a requirement must not compile. (When the
// convenience methods shared the requirements' names, this compiled, and
// its `deliveries(of:)` called itself until the stack ran out.)
@_spi(CenterAuthoring) import TypedNotifications

struct ForgetfulCenter: TypedNotificationCenter {
    let inner: NotificationHub<InProcessTransport>

    var sender: NotificationSender { inner.sender }
    var executor: NotificationExecutor { inner.executor }

    func post<Payload: DarwinPayload>(_ payload: Payload, as name: NotificationName)
        throws(TypedNotificationError)
    {
        try inner.post(payload, as: name)
    }
    // observe(_:selecting:from:bufferingPolicy:) forgotten.
}
