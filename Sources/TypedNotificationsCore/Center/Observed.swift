/// What an observer observes: the values of a notification type, of a
/// payload type posted under a name, or of a payload type posted under any
/// name of a namespace.
///
/// Every way to observe takes one: a handler (``TypedNotificationCenter/addObserver(_:from:bufferingPolicy:handler:)``
/// and its `on:` forms) or a sequence (``TypedNotificationCenter/notifications(_:from:bufferingPolicy:)``,
/// ``TypedNotificationCenter/deliveries(_:from:bufferingPolicy:)``).
///
/// ```swift
/// try center.addObserver(.of(Reload.self)) { reload, delivery in … }
/// try center.notifications(.of(String.self, named: "com.example.status"))
/// try center.deliveries(.of(Score.self, in: "com.example.match"))
/// try center.deliveries(.of(RawNotification.self, named: name))  // any payload, as bytes
/// ```
///
/// A value posted under a name reaches an observer as the type it asked
/// for: as it is when it is that type, otherwise decoded from its payload
/// bytes, as it would cross a process boundary. A post whose payload does
/// not decode as the observer's type is counted as undecodable and reported
/// in the next delivery's ``NotificationDelivery/missed``; observe
/// ``RawNotification`` to get every post, whatever its payload.
///
/// An observer of a namespace has every guarantee an observer of a name
/// has: registration is immediate (a name first posted after the call
/// returns, by a process started after it, reaches it), order is per
/// poster and name, ``NotificationDelivery/missed`` counts per name, and
/// cancel is exact; each delivery says its name
/// (``NotificationDelivery/name``).
public struct Observed<Value: DarwinPayload>: Sendable {
    // An invalid name throws where the observer is added, not here.
    let selector: Result<NotificationSelector, TypedNotificationError>

    private init(_ selector: Result<NotificationSelector, TypedNotificationError>) {
        self.selector = selector
    }

    /// The notifications of `type`, under its own ``TypedNotification/name``.
    public static func of(_ type: Value.Type) -> Observed<Value> where Value: TypedNotification {
        Observed(
            Result { () throws(TypedNotificationError) in .name(try Value.name.validated(declaredBy: Value.self)) })
    }

    /// The values posted under `name`, chosen at run time, decoded as `type`.
    public static func of(_ type: Value.Type, named name: NotificationName) -> Observed<Value> {
        Observed(.success(.name(name)))
    }

    /// The values posted under any name in `namespace`, decoded as `type`.
    ///
    /// A transport that cannot observe a namespace makes adding the observer
    /// throw ``TypedNotificationError/Code/unsupported``.
    public static func of(_ type: Value.Type, in namespace: NotificationNamespace) -> Observed<Value> {
        Observed(.success(.namespace(namespace)))
    }
}
