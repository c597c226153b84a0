// A center forwarding every requirement compiles: the misuse check above
// fails for the missing requirement, not for anything else in the listing.
@_spi(CenterAuthoring) import TypedNotifications

struct ForwardingCenter: TypedNotificationCenter {
    let inner: NotificationHub<InProcessTransport>

    var sender: NotificationSender { inner.sender }
    var executor: NotificationExecutor { inner.executor }

    func post<Payload: DarwinPayload>(_ payload: Payload, as name: NotificationName)
        throws(TypedNotificationError)
    {
        try inner.post(payload, as: name)
    }

    func observe<N: DarwinPayload>(
        _ type: N.Type,
        selecting selector: NotificationSelector,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy
    ) throws(TypedNotificationError) -> Observation<N> {
        try inner.observe(type, selecting: selector, from: senders, bufferingPolicy: bufferingPolicy)
    }
}

// Everything a caller uses works through the forwarder.
func use(_ center: ForwardingCenter) throws {
    let token = try center.addObserver(.of(RawNotification.self, named: "com.example.ping")) { _, _ in }
    _ = try center.deliveries(.of(String.self, named: "com.example.text"))
    _ = try center.deliveries(.of(RawNotification.self, in: "com.example"))
    try center.post(RawNotification(), as: "com.example.ping")
    token.cancel()
}
