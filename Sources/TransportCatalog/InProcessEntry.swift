import TypedNotifications

extension TransportEntry {
    /// Hubs of one process, on a bus they share.
    package static let inProcess = TransportEntry(
        name: "in-process", typeName: "InProcessTransport", meeting: .process,
        make: { (place, _) throws(TypedNotificationError) in
            guard case .bus(let bus) = place else { return InProcessTransport() }
            return InProcessTransport(bus: bus)
        })
}
