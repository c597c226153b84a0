import Foundation
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// When a notification was posted, on two clocks.
public struct NotificationTimestamp: Hashable, Sendable {
    /// Nanoseconds since 1970-01-01 00:00:00 UTC, from the poster's wall clock.
    public var wallClockNanoseconds: Int64
    /// Nanoseconds on the host's `CLOCK_MONOTONIC`, comparable between processes
    /// on one host; use it to measure latency.
    public var monotonicNanoseconds: UInt64

    /// Creates a timestamp from its two readings.
    @_spi(TransportAuthoring) public init(wallClockNanoseconds: Int64, monotonicNanoseconds: UInt64) {
        self.wallClockNanoseconds = wallClockNanoseconds
        self.monotonicNanoseconds = monotonicNanoseconds
    }

    /// Both clocks read now.
    @_spi(TransportAuthoring) public static var now: Self {
        Self(
            wallClockNanoseconds: SystemClock.wallClockNanoseconds(),
            monotonicNanoseconds: SystemClock.monotonicNanoseconds()
        )
    }

    /// The wall-clock reading as a `Date`.
    public var date: Date {
        Date(timeIntervalSince1970: Double(wallClockNanoseconds) / 1_000_000_000)
    }
}

/// What an observer learns about one delivery besides the value.
public struct NotificationDelivery: Hashable, Sendable {
    /// The name it was posted under: the observed name, or for an observer
    /// of a namespace, the name in it that this notification has.
    public var name: NotificationName
    /// The center that posted it.
    public var sender: NotificationSender
    /// The sender's count of posts of this name: 1 for its first, then 2, 3, …
    public var sequence: UInt64
    /// When it was posted.
    public var timestamp: NotificationTimestamp
    /// How many notifications this observer did not receive just before this
    /// one: those its full buffer dropped plus, across processes, any gap in the
    /// sender's sequence numbers. Zero when nothing was missed. At least this
    /// many when ``missedIsExact`` is `false`.
    public var missed: Int
    /// Whether ``missed`` is the exact count. `false` only where a transport
    /// knows notifications may have been lost but cannot count them (a
    /// Redis consumer group whose count the server lost, see *Across
    /// hosts*): then ``missed`` is what is known for sure, possibly 0.
    /// `tnotify watch` prints it as `missed=N+`.
    public var missedIsExact: Bool
    /// Whether this observer's durable identity may have handled this
    /// notification before: its process stopped (a crash, `kill -9`) after the
    /// notification was handed over and before it was known to be handled, so
    /// it is delivered again. Always `false` on live transports. Make handling
    /// idempotent, or use this flag to check for a duplicate.
    public var isRedelivery: Bool

    /// Creates delivery metadata.
    @_spi(TransportAuthoring) public init(
        name: NotificationName,
        sender: NotificationSender,
        sequence: UInt64,
        timestamp: NotificationTimestamp,
        missed: Int,
        isRedelivery: Bool = false,
        missedIsExact: Bool = true
    ) {
        self.name = name
        self.sender = sender
        self.sequence = sequence
        self.timestamp = timestamp
        self.missed = missed
        self.isRedelivery = isRedelivery
        self.missedIsExact = missedIsExact
    }
}

/// A notification together with its delivery metadata.
public struct DeliveredNotification<Notification: DarwinPayload>: Sendable {
    /// The notification.
    public var notification: Notification
    /// Who sent it, its sequence number, when, and what was missed before it.
    public var delivery: NotificationDelivery

    /// The name it was posted under (``NotificationDelivery/name``).
    package var name: NotificationName { delivery.name }

    /// Pairs a notification with its metadata.
    @_spi(TransportAuthoring) public init(notification: Notification, delivery: NotificationDelivery) {
        self.notification = notification
        self.delivery = delivery
    }
}

/// How many undelivered notifications an observer may hold, and which to drop
/// when it is full.
///
/// Drops are never silent: each is counted in the center's
/// ``NotificationMetrics/dropped``, and the next notification the observer
/// receives carries the number in ``NotificationDelivery/missed``.
public struct NotificationBufferingPolicy: Hashable, Sendable {
    enum Kind: Hashable, Sendable {
        case newest(Int)
        case oldest(Int)
        case unbounded
    }

    let kind: Kind

    /// Keeps the newest `limit` notifications; a new one pushes out the oldest.
    /// The right choice for state changes, where the latest matters most.
    /// A limit below 1 is treated as 1.
    public static func bufferingNewest(_ limit: Int) -> Self { .init(kind: .newest(max(1, limit))) }
    /// Keeps the oldest `limit` notifications; new ones are dropped while full.
    /// The right choice when what happened first matters most.
    /// A limit below 1 is treated as 1.
    public static func bufferingOldest(_ limit: Int) -> Self { .init(kind: .oldest(max(1, limit))) }
    /// Never drops; memory grows while the observer falls behind.
    public static let unbounded = Self(kind: .unbounded)

    /// The default: ``bufferingNewest(_:)`` with room for 1024 notifications.
    public static let `default` = bufferingNewest(1024)

    /// The policy, for logs.
    package var description: String {
        switch kind {
        case .newest(let n): "bufferingNewest(\(n))"
        case .oldest(let n): "bufferingOldest(\(n))"
        case .unbounded: "unbounded"
        }
    }
}
