/// A transport that keeps what is posted (the file log, a Redis stream), so a
/// hub over it can say what the newest value of a name is without observing:
/// ``NotificationHub/latest(of:)``.
public protocol KeepsLatest: NotificationTransport {
    /// The newest valid envelope posted under `name`, without observing it;
    /// `nil` when there is none.
    @_spi(TransportAuthoring) func latestMessage(of name: NotificationName) throws(TypedNotificationError)
        -> TransportMessage?
}

extension NotificationHub where Transport: KeepsLatest {
    /// The newest notification of type `N` the transport keeps, with its
    /// metadata, without observing; `nil` if there is none or it does not
    /// decode as `N`.
    ///
    /// - Throws: what the transport's read throws, such as
    ///   ``TypedNotificationError/Code/unreachable`` for a Redis server that
    ///   cannot be reached, or ``TypedNotificationError/Code/insecureDirectory``
    ///   for a log segment that is refused.
    public func latest<N: TypedNotification>(of type: N.Type) throws(TypedNotificationError)
        -> DeliveredNotification<N>?
    {
        try latest(of: type, named: try N.name.validated(declaredBy: N.self))
    }

    /// The newest value posted under `name`, chosen at run time, decoded as
    /// `type`, with its metadata, without observing; `nil` if there is none
    /// or it does not decode as `type`.
    public func latest<Payload: DarwinPayload>(of type: Payload.Type, named name: NotificationName)
        throws(TypedNotificationError) -> DeliveredNotification<Payload>?
    {
        guard let message = try transport.latestMessage(of: try name.validated()) else { return nil }
        return DeliveredNotification(decoding: message, missed: 0)
    }
}
