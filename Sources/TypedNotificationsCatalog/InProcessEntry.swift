import TypedNotifications
import TypedNotificationsLoopback

extension TransportEntry {
    /// Hubs of one process, on a bus they share.
    package static let inProcess = TransportEntry(
        name: "in-process", typeName: "InProcessTransport", meeting: .process,
        make: { (place, _) throws(TypedNotificationError) in
            guard case .process(let place) = place else { return InProcessTransport() }
            return InProcessTransport(bus: place.bus { InProcessBus() })
        })

    /// Hubs of one process, every notification carried as its envelope:
    /// the *Writing a transport* article's driver.
    package static let envelopeLoopback = TransportEntry(
        name: "envelope-loopback", typeName: "EnvelopeLoopbackTransport", meeting: .process,
        make: { (place, _) throws(TypedNotificationError) in
            guard case .process(let place) = place else { return try EnvelopeLoopbackTransport(bus: EnvelopeBus()) }
            return try EnvelopeLoopbackTransport(bus: place.bus { EnvelopeBus() })
        })
}
