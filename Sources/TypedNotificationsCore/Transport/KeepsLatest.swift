/// A transport that keeps what is posted (the file log, a Redis stream), so a
/// hub over it can say what the newest value of a name is without observing:
/// ``NotificationHub/latest(_:)``.
public protocol KeepsLatest: NotificationTransport {
    /// The newest valid envelope posted under `name`, without observing it;
    /// `nil` when there is none.
    @_spi(TransportAuthoring) func latestMessage(of name: NotificationName) throws(TypedNotificationError)
        -> TransportMessage?
}

extension NotificationHub where Transport: KeepsLatest {
    /// The newest notification the transport keeps of what `observed` says
    /// (a notification type, or a payload type under a name), with its
    /// metadata, without observing; `nil` if there is none or it does not
    /// decode as the type asked for.
    ///
    /// ```swift
    /// let newest = try hub.latest(.of(Settings.self))?.notification
    /// ```
    ///
    /// - Throws: ``TypedNotificationError/Code/unsupported`` for a
    ///   namespace (each name keeps its own newest), and what the
    ///   transport's read throws, such as
    ///   ``TypedNotificationError/Code/unreachable`` for a Redis server that
    ///   cannot be reached, or ``TypedNotificationError/Code/insecureDirectory``
    ///   for a log segment that is refused.
    public func latest<Value: DarwinPayload>(_ observed: Observed<Value>) throws(TypedNotificationError)
        -> DeliveredNotification<Value>?
    {
        guard case .name(let name) = try observed.selector.get() else {
            throw TypedNotificationError(
                code: .unsupported, message: "latest reads one name; a namespace has a newest value per name")
        }
        guard let message = try transport.latestMessage(of: try name.validated()) else { return nil }
        return DeliveredNotification(decoding: message, missed: 0)
    }
}
