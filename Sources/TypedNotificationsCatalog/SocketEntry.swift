import TypedNotifications

extension SocketTransport: WaitsForReaders {}

extension TransportEntry {
    /// Unix-domain datagram sockets in a shared directory.
    package static let socket = TransportEntry(
        name: "socket", typeName: "SocketTransport",
        meeting: .directory(defaultPath: SocketTransport.defaultDirectory),
        make: { (place, request) throws(TypedNotificationError) in
            var configuration = SocketTransportConfiguration()
            if let backlog = request.backlogBytes { configuration.spoolLimitPerEndpoint = backlog }
            if let group = request.loopGroup { configuration.loopGroup = group }
            if request.sharedWithGroup { configuration.sharing = .group }
            return try SocketTransport(directory: place.text, configuration: configuration)
        },
        list: { directory in
            let endpoints = SocketTransport.endpoints(in: directory)
            guard !endpoints.isEmpty else { return ["no sockets"] }
            return endpoints.map { endpoint in
                let state = endpoint.isAlive ? "alive" : "dead"
                let owner = endpoint.endpoint.map { "\($0) pid \(endpoint.processID ?? 0)" } ?? "unregistered"
                let names =
                    endpoint.names.isEmpty ? "no names" : endpoint.names.map(\.description).joined(separator: " ")
                let spool = endpoint.spooledBytes > 0 ? ", \(endpoint.spooledBytes) bytes spooled" : ""
                return "\(endpoint.identifier)  \(owner) \(state): \(names)\(spool)"
            }
        },
        collectGarbage: { (directory) throws(TypedNotificationError) in
            "reaped \(try SocketTransport.reapDeadEndpoints(in: directory)) dead endpoint(s)"
        })

    /// Apple platforms' path: no kernel credentials, a sender is what it
    /// claims, guarded by the directory's permissions; and a loop on a
    /// thread of the loop group, as a process's socket transports past its
    /// first two take on Linux, and every one does on Apple platforms.
    package static let socketWithoutCredentials = TransportEntry(
        name: "socket-without-credentials", typeName: "SocketTransport", meeting: socket.meeting, isVariant: true,
        make: { (place, request) throws(TypedNotificationError) in
            var configuration = SocketTransportConfiguration()
            configuration.usesKernelCredentials = false
            configuration.sleepsInReceive = false
            if let backlog = request.backlogBytes { configuration.spoolLimitPerEndpoint = backlog }
            if let group = request.loopGroup { configuration.loopGroup = group }
            if request.sharedWithGroup { configuration.sharing = .group }
            return try SocketTransport(directory: place.text, configuration: configuration)
        })
}
