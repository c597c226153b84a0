import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Limits and defaults of a hub: what its initialiser takes.
package struct NotificationHubConfiguration: Sendable {
    /// The largest payload that can never be configured away: 16 MiB.
    package static let payloadSizeHardLimit = 16 * 1024 * 1024

    /// The largest encoded payload a post may carry on a cross-process
    /// transport; a larger post throws
    /// ``TypedNotificationError/Code/payloadTooLarge`` before anything is sent.
    /// Default 64 KiB; at most 16 MiB.
    ///
    /// It bounds what the hub receives too, whatever another process's hub
    /// allows: a larger notification is refused by the transport, counted
    /// in ``NotificationMetrics/undecodable`` and reported once in the next
    /// delivery's ``NotificationDelivery/missed``. The socket transport
    /// refuses it before reading it (its receive buffers are sized for this
    /// limit, so a 4 MB datagram costs no memory), and the file transport
    /// before decoding it; a Redis server sends the entry whole, so it is
    /// read, then refused undecoded.
    package var maximumPayloadSize: Int

    /// The default payload limit: 64 KiB.
    package static let defaultMaximumPayloadSize = 64 * 1024

    /// Creates a configuration.
    package init(maximumPayloadSize: Int = defaultMaximumPayloadSize) {
        self.maximumPayloadSize = maximumPayloadSize
    }
}

// The outbound types are outside the generic hub so that their `Locked` is
// one concrete type, specialized at compile time, with no run-time metadata
// lookups.
