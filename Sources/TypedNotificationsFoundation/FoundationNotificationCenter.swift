import Foundation
import Synchronization
@_spi(CenterAuthoring) @_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Foundation's `NotificationCenter` as a ``TypedNotificationCenter``, within
/// one process.
///
/// Code that uses `NotificationCenter.default` today adopts the typed API by
/// changing nothing but the calls, and one call site at a time:
///
/// ```swift
/// let token = try NotificationCenter.default.addObserver(.of(Reload.self)) { note, _ in … }
/// NotificationCenter.default.post(Reload(reason: "manual"))
/// ```
///
/// A typed post is an ordinary Foundation notification named
/// `N.name.rawValue`, so both directions of a half-migrated program work:
/// - **Typed poster, Foundation observer**: the observer gets the value
///   under ``Foundation/NotificationCenter/typedValueKey`` in `userInfo` (or
///   through `Notification.typedValue(as:)`), and who sent it through
///   `Notification.typedDelivery`.
/// - **Foundation poster, typed observer**: `post(name:object:userInfo:)`
///   reaches name-only observers (``addObserver(_:from:bufferingPolicy:handler:)``)
///   and typed observers of a ``PayloadlessNotification``; a typed observer
///   of a type with a payload receives the value put under
///   ``Foundation/NotificationCenter/typedValueKey``, and counts any other post of its
///   name as undecodable (reported in ``NotificationDelivery/missed``), as
///   every center does with a payload it cannot read. Such posts come from
///   ``NotificationCenter/untypedSender``.
///
/// Names are only Foundation names here, so a name from an invalid literal
/// (which any other center refuses) is posted and observed as it
/// is: nothing refuses it before it reaches a cross-process center.
///
/// Typed observers get the same guarantees as on ``NotificationHub``: posts
/// are queued in order, handlers run on an actor, and `token.cancel()` or
/// `await token.cancelAndWait()` waits for a running handler. Each
/// `NotificationCenter` has a sender identity of its own (endpoint label
/// `foundation`); ``endpoint(_:)`` gives a part of the program an identity of
/// its own on the same center, so that `.others` tells the parts apart.
extension NotificationCenter: TypedNotificationCenter {
    /// This center's sender identity, carried by its typed posts: one per
    /// `NotificationCenter` object, with the endpoint label `foundation`.
    public var sender: NotificationSender { FoundationBridge.poster(of: self).sender }

    /// The serial executor for handlers registered without an actor, shared by
    /// every `NotificationCenter` in this process.
    public var executor: NotificationExecutor { FoundationBridge.executor }

    /// The sender of Foundation posts that did not go through the typed API,
    /// such as `post(name:object:userInfo:)`: endpoint label
    /// `foundation-untyped`, one per process. Their sequence number is 0: a
    /// Foundation post carries no count.
    public static var untypedSender: NotificationSender { FoundationBridge.untypedSender }

    /// A typed view of this center with a sender identity of its own, so that
    /// observers registered through one part of a program can skip its own
    /// posts with `.others` and still see another part's.
    ///
    /// - Throws: ``TypedNotificationError`` with code
    ///   ``TypedNotificationError/Code/invalidEndpoint`` for an invalid label.
    public func endpoint(_ label: String) throws(TypedNotificationError) -> NotificationCenterEndpoint {
        NotificationCenterEndpoint(
            center: self, poster: FoundationPoster(sender: try NotificationSender.current(endpoint: label)))
    }

    private var typed: NotificationCenterEndpoint {
        NotificationCenterEndpoint(center: self, poster: FoundationBridge.poster(of: self))
    }

    /// Posts a typed notification as a Foundation notification. Never throws:
    /// the value is handed over without encoding, so no `try` is needed.
    public func post<N: TypedNotification>(_ notification: N) {
        typed.post(notification, as: N.name)
    }

    /// Posts `payload` under `name` as a Foundation notification. Never
    /// throws: the value is handed over without encoding.
    public func post<Payload: DarwinPayload>(_ payload: Payload, as name: NotificationName) {
        typed.post(payload, as: name)
    }

    /// Registers an observer of a name or a namespace now, not yet started
    /// (call `addObserver`, `deliveries` or `notifications`).
    @_spi(CenterAuthoring) public func observe<Payload: DarwinPayload>(
        _ type: Payload.Type,
        selecting selector: NotificationSelector,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy
    ) throws(TypedNotificationError) -> Observation<Payload> {
        try typed.observe(type, selecting: selector, from: senders, bufferingPolicy: bufferingPolicy)
    }
}

/// A Foundation `NotificationCenter` with a sender identity of its own: one
/// part of a program posting and observing through a shared center.
///
/// Made by `NotificationCenter.endpoint(_:)`. Posts and observers are those
/// of the center; only the identity differs, so `.others` skips this
/// endpoint's own posts and keeps everyone else's.
public struct NotificationCenterEndpoint: TypedNotificationCenter {
    /// The Foundation center posts go through.
    package let center: NotificationCenter

    /// This endpoint's identity and the sequence numbers it gave.
    private let poster: FoundationPoster

    /// This endpoint's identity, carried by what it posts.
    public var sender: NotificationSender { poster.sender }

    init(center: NotificationCenter, poster: FoundationPoster) {
        self.center = center
        self.poster = poster
    }

    /// The serial executor for handlers registered without an actor, shared
    /// by every `NotificationCenter` in this process.
    public var executor: NotificationExecutor { FoundationBridge.executor }

    /// Posts a typed notification as a Foundation notification. Never throws.
    public func post<N: TypedNotification>(_ notification: N) {
        post(notification, as: N.name)
    }

    /// Posts `payload` under `name` as a Foundation notification whose
    /// `userInfo` holds the value and its ``NotificationDelivery``. Never
    /// throws: the value is handed over without encoding.
    public func post<Payload: DarwinPayload>(_ payload: Payload, as name: NotificationName) {
        let delivery = NotificationDelivery(
            name: name,
            sender: sender,
            sequence: poster.next(name),
            timestamp: .now,
            missed: 0
        )
        center.post(
            name: Notification.Name(name),
            object: nil,
            userInfo: [
                TypedNotificationUserInfoKey.value: payload,
                TypedNotificationUserInfoKey.delivery: delivery,
            ]
        )
        FoundationBridge.counters.add(to: .posted)
    }

    /// Registers an observer of a name or a namespace now, not yet started
    /// (call `addObserver`, `deliveries` or `notifications`).
    ///
    /// A namespace observer is a Foundation observer of every name
    /// (`forName: nil`) that passes on the notifications whose name is a
    /// valid ``NotificationName`` in the namespace: every post on the center
    /// costs it one check of the name, whatever its namespace.
    @_spi(CenterAuthoring) public func observe<Payload: DarwinPayload>(
        _ type: Payload.Type,
        selecting selector: NotificationSelector,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy
    ) throws(TypedNotificationError) -> Observation<Payload> {
        // Names are Foundation names here (see the bridge's notes), but a
        // namespace from an invalid literal would match nothing: refuse it.
        if case .namespace(let namespace) = selector { _ = try namespace.validated() }
        return Observation(register(type, selecting: selector, from: senders, bufferingPolicy: bufferingPolicy))
    }

    private func register<Payload: DarwinPayload>(
        _ type: Payload.Type,
        selecting selector: NotificationSelector,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy
    ) -> ObserverRecord<Payload> {
        let observation = ObserverRecord<Payload>(
            filter: senders,
            observer: sender,
            policy: bufferingPolicy,
            metrics: FoundationBridge.counters
        )
        // Foundation calls this block synchronously on the posting thread, in
        // post order; it only queues, so handlers never run on the poster.
        let center = center
        let token: any NSObjectProtocol
        switch selector {
        case .name(let name):
            token = center.addObserver(forName: Notification.Name(name), object: nil, queue: nil) {
                [observation] notification in
                FoundationBridge.counters.add(to: .received)
                observation.offer(FoundationBridge.message(from: notification, named: name), gap: 0)
            }
        case .namespace(let namespace):
            token = center.addObserver(forName: nil, object: nil, queue: nil) { [observation] notification in
                guard let name = try? NotificationName(validating: notification.name.rawValue),
                    namespace.contains(name)
                else { return }
                FoundationBridge.counters.add(to: .received)
                observation.offer(FoundationBridge.message(from: notification, named: name), gap: 0)
            }
        }
        let registration = FoundationBridge.Registration(token)
        observation.registered { [weak center] in
            center?.removeObserver(registration.token)
        }
        return observation
    }
}

/// The `userInfo` keys of a typed post through a `NotificationCenter`. An
/// app posts with ``Foundation/NotificationCenter/typedValueKey`` and reads
/// with `typedValue(as:)` and `typedDelivery`.
package enum TypedNotificationUserInfoKey {
    /// The posted value, as it was posted (`Any`; cast it to its type).
    /// An untyped poster may put a value here too: typed observers of the
    /// name receive it.
    package static let value = "TypedNotifications.value"

    /// The post's ``NotificationDelivery``: sender, sequence number and time.
    package static let delivery = "TypedNotifications.delivery"
}

extension Notification {
    /// The value of a typed post as `type`: as it is when it is one,
    /// otherwise decoded from its payload bytes, as a typed observer would;
    /// `nil` for a post without a typed value, or one that does not decode.
    public func typedValue<Payload: DarwinPayload>(as type: Payload.Type) -> Payload? {
        guard let value = userInfo?[TypedNotificationUserInfoKey.value] as? any DarwinPayload else { return nil }
        return Payload.decoded(from: .value(value))
    }

    /// Who posted it, its sequence number and when, for a typed post; `nil`
    /// for an untyped one.
    public var typedDelivery: NotificationDelivery? {
        userInfo?[TypedNotificationUserInfoKey.delivery] as? NotificationDelivery
    }
}

extension Notification.Name {
    /// The Foundation name a typed notification named `name` is posted under.
    public init(_ name: NotificationName) {
        self.init(name.rawValue)
    }
}

/// Process-wide state of the Foundation bridge.
enum FoundationBridge {
    static let executor = NotificationExecutor()
    static let counters = Counters<NotificationMetrics>()

    // The labels are valid literals, so these cannot fail; should one ever,
    // the identity falls back to one built without validation.
    static let untypedSender: NotificationSender =
        (try? NotificationSender.current(endpoint: "foundation-untyped"))
        ?? NotificationSender.unchecked(endpoint: "foundation-untyped")

    private struct Identities {
        struct Entry {
            weak var center: NotificationCenter?
            let poster: FoundationPoster
        }
        var entries: [ObjectIdentifier: Entry] = [:]
        var sweepAt = 64
    }

    private static let identities = Locked(Identities())

    /// The identity of `center` and its sequence numbers, made on first
    /// use. An entry is trusted only while its center is alive: a new center
    /// at a released one's address gets a new identity.
    static func poster(of center: NotificationCenter) -> FoundationPoster {
        let key = ObjectIdentifier(center)
        return identities.withLock { table in
            if let entry = table.entries[key], entry.center === center { return entry.poster }
            let poster = FoundationPoster(sender: NotificationSender.unchecked(endpoint: "foundation"))
            table.entries[key] = Identities.Entry(center: center, poster: poster)
            if table.entries.count >= table.sweepAt {
                table.entries = table.entries.filter { $0.value.center != nil }
                table.sweepAt = max(64, table.entries.count * 2)
            }
            return poster
        }
    }

    /// A Foundation notification as a message for typed observers: a typed
    /// post as it was posted; an untyped post from ``untypedSender``, with the
    /// value under the value key if there is one, otherwise no payload.
    static func message(from notification: Notification, named name: NotificationName) -> TransportMessage {
        let info = notification.userInfo
        let value = info?[TypedNotificationUserInfoKey.value] as? any DarwinPayload
        if let value, let delivery = info?[TypedNotificationUserInfoKey.delivery] as? NotificationDelivery {
            return TransportMessage(
                name: name, sender: delivery.sender, sequence: delivery.sequence, timestamp: delivery.timestamp,
                payload: .value(value))
        }
        return TransportMessage(
            name: name,
            sender: untypedSender,
            // Every observer sees the post separately, with nothing to tell
            // it apart from the next untyped post: there is no count to keep.
            sequence: 0,
            timestamp: .now,
            payload: .value(value ?? RawNotification())
        )
    }

    /// Holds Foundation's observer token for removal.
    ///
    /// `@unchecked Sendable` is safe: `token` is an immutable `let` that is
    /// never used except to be passed back to `NotificationCenter.removeObserver`,
    /// which is thread-safe; nothing reads or mutates the object it refers to.
    final class Registration: @unchecked Sendable {
        let token: any NSObjectProtocol

        init(_ token: any NSObjectProtocol) {
            self.token = token
        }
    }
}

/// One sender identity of the bridge (a `NotificationCenter`'s, or an
/// endpoint's) and the sequence numbers it gave, numbered as a hub numbers
/// its posts; released with the center or endpoint, so nothing piles up for
/// identities that are gone.
final class FoundationPoster: Sendable {
    let sender: NotificationSender
    private let sequences = Locked(SequenceCounters())

    init(sender: NotificationSender) {
        self.sender = sender
    }

    /// The number of this identity's next post of `name`.
    func next(_ name: NotificationName) -> UInt64 {
        sequences.withLock { $0.next(name) }
    }
}

/// Typed metrics of the Foundation bridge.
extension NotificationCenter {
    /// The `userInfo` key under which a Foundation post carries a typed
    /// value to typed observers, and a typed post its value to Foundation
    /// observers that have not moved to the typed API yet:
    ///
    /// ```swift
    /// NotificationCenter.default.post(
    ///     name: Notification.Name(Reload.name), object: nil,
    ///     userInfo: [NotificationCenter.typedValueKey: Reload(reason: "legacy")])
    /// _ = NotificationCenter.default.addObserver(forName: Notification.Name(Reload.name), object: nil, queue: nil) {
    ///     note in
    ///     let reload = note.typedValue(as: Reload.self)
    ///     print(reload?.reason ?? "untyped")
    /// }
    /// ```
    ///
    /// The value must be of the observer's type; any other untyped post of
    /// the name is counted as undecodable for a typed observer.
    public static let typedValueKey = TypedNotificationUserInfoKey.value

    /// Counters of typed posts and observers across every `NotificationCenter`
    /// in this process.
    public static var typedMetrics: NotificationMetrics { FoundationBridge.counters.snapshot }
}
