import Foundation
import NotificationPlatform

/// Foundation's `NotificationCenter` as a ``TypedNotificationCenter``, within
/// one process.
///
/// Code that uses `NotificationCenter.default` today adopts the typed API by
/// changing nothing but the calls:
///
/// ```swift
/// let token = try NotificationCenter.default.addObserver(Reload.self) { note, _ in … }
/// try NotificationCenter.default.post(Reload(reason: "manual"))
/// ```
///
/// A typed post travels as an ordinary Foundation notification named
/// `N.name.rawValue`, carrying the value in its `userInfo`; typed observers
/// ignore untyped posts of the same name. Typed observers get the same
/// guarantees as on ``NotificationHub``: posts are queued in order, handlers
/// run on an actor, and `token.cancel()` or `await token.cancelAndWait()` waits
/// for a running handler.
/// Every `NotificationCenter` shares one sender identity per process, with
/// the endpoint label `foundation`.
extension NotificationCenter: TypedNotificationCenter {
    /// The sender identity of typed posts through any `NotificationCenter` in
    /// this process.
    public var sender: NotificationSender { FoundationBridge.sender }

    /// The serial executor for handlers registered without an actor, shared by
    /// every `NotificationCenter` in this process.
    public var executor: NotificationExecutor { FoundationBridge.executor }

    /// Posts a typed notification as a Foundation notification. Never throws:
    /// the value is handed over without encoding.
    public func post<N: TypedNotification>(_ notification: N) throws(TypedNotificationError) {
        let message = TransportMessage(
            name: N.name,
            sender: FoundationBridge.sender,
            sequence: FoundationBridge.nextSequence(for: N.name),
            timestamp: NotificationTimestamp(
                wallClockNanoseconds: SystemClock.wallClockNanoseconds(),
                monotonicNanoseconds: SystemClock.monotonicNanoseconds()
            ),
            payload: .value(notification)
        )
        post(
            name: Notification.Name(N.name.rawValue),
            object: nil,
            userInfo: [FoundationBridge.userInfoKey: FoundationBridge.Carrier(message)]
        )
        FoundationBridge.counters.posted.add(1, ordering: .relaxed)
    }

    /// Registers a handler that runs isolated to `actor`, which the center
    /// holds weakly while it waits, as every ``TypedNotificationCenter`` does
    /// (call `addObserver(_:on:handler:)`).
    public func registerObserver<N: TypedNotification, A: Actor>(
        _ type: N.Type,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy,
        on actor: A,
        handler: @escaping @Sendable (isolated A, N, NotificationDelivery) -> Void
    ) throws(TypedNotificationError) -> TypedNotifications.ObservationToken {
        startHandler(
            for: registerTyped(type, from: senders, bufferingPolicy: bufferingPolicy), on: actor, handler: handler)
    }

    /// Registers an observer now and returns its deliveries as an async
    /// sequence (call `deliveries(of:)`).
    public func registerDeliveries<N: TypedNotification>(
        of type: N.Type,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy
    ) throws(TypedNotificationError) -> DeliverySequence<N> {
        DeliverySequence(observation: registerTyped(type, from: senders, bufferingPolicy: bufferingPolicy))
    }

    private func registerTyped<N: TypedNotification>(
        _ type: N.Type,
        from senders: SenderFilter,
        bufferingPolicy: NotificationBufferingPolicy
    ) -> ObserverRecord<N> {
        let observation = ObserverRecord<N>(
            filter: senders,
            observer: FoundationBridge.sender,
            policy: bufferingPolicy,
            metrics: FoundationBridge.counters
        )
        // Foundation calls this block synchronously on the posting thread, in
        // post order; it only queues, so handlers never run on the poster.
        let token = addObserver(forName: Notification.Name(N.name.rawValue), object: nil, queue: nil) {
            [observation] notification in
            guard let carrier = notification.userInfo?[FoundationBridge.userInfoKey] as? FoundationBridge.Carrier
            else { return }
            FoundationBridge.counters.received.add(1, ordering: .relaxed)
            observation.offer(carrier.message, gap: 0)
        }
        let registration = FoundationBridge.Registration(token)
        observation.registered { [weak self] in
            self?.removeObserver(registration.token)
        }
        return observation
    }
}

/// Process-wide state of the Foundation bridge.
enum FoundationBridge {
    static let userInfoKey = "TypedNotifications.message"

    // The endpoint label is a valid literal, so this cannot fail; should it
    // ever, the identity falls back to one built without validation.
    static let sender: NotificationSender =
        (try? NotificationSender.current(endpoint: "foundation"))
        ?? NotificationSender.unchecked(endpoint: "foundation")

    static let executor = NotificationExecutor()
    static let counters = MetricsCounters()

    // Per-name sequence numbers of typed posts through any NotificationCenter.
    private static let sequences = Locked<[NotificationName: UInt64]>([:])

    static func nextSequence(for name: NotificationName) -> UInt64 {
        sequences.withLock { sequences in
            let next = (sequences[name] ?? 0) &+ 1
            sequences[name] = next
            return next
        }
    }

    /// Carries a typed message through `userInfo`.
    final class Carrier: Sendable {
        let message: TransportMessage

        init(_ message: TransportMessage) {
            self.message = message
        }
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

/// Typed metrics of the Foundation bridge.
extension NotificationCenter {
    /// Counters of typed posts and observers across every `NotificationCenter`
    /// in this process.
    public static var typedMetrics: NotificationMetrics { FoundationBridge.counters.snapshot }
}
