@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// One endpoint registered for a name or a namespace in a socket
/// transport's directory.
package struct SocketRegistration: Sendable, Hashable {
    /// The name or namespace it observes.
    package var selector: NotificationSelector
    /// The registering center's endpoint label, as written in the entry.
    package var endpoint: String
    /// The registering process's id, as written in the entry.
    package var processID: Int32
    /// Whether its socket still accepts connections: `false` for a process
    /// that died without unregistering.
    package var isAlive: Bool
    /// The transport's random identifier, which names its socket and entry.
    package var identifier: String
}

/// One socket in a socket transport's directory, registered or not.
package struct SocketEndpoint: Sendable, Hashable {
    /// The transport's random identifier, which names its socket.
    package var identifier: String
    /// Whether a process is still bound to it; `false` for one that ended
    /// without closing (SIGTERM, SIGKILL, a crash).
    package var isAlive: Bool
    /// The names and namespaces it is registered for.
    package var names: [NotificationSelector]
    /// The registering process's id and endpoint label, from its registry
    /// entries; `nil` for a socket with none (a poster that never observed).
    package var processID: Int32?
    /// See ``processID``.
    package var endpoint: String?
    /// Bytes waiting for it in its spool, unread.
    package var spooledBytes: Int
}

extension SocketTransport {
    /// Every registration in the directory, by name or namespace; for tools
    /// such as `tnotify ls`.
    package static func registrations(in directory: String = defaultDirectory) -> [SocketRegistration] {
        var found: [SocketRegistration] = []
        let kinds: [(String, (String) -> NotificationSelector?)] = [
            (SocketRegistry.namesDirectory(directory), { (try? NotificationName(validating: $0)).map { .name($0) } }),
            (
                SocketRegistry.namespacesDirectory(directory),
                { (try? NotificationNamespace(validating: $0)).map { .namespace($0) } }
            ),
        ]
        for (registry, selector) in kinds {
            guard case .success(let keys) = SystemCalls.directoryEntries(registry) else { continue }
            for key in keys.sorted() {
                guard let name = selector(key) else { continue }
                for entry in SocketRegistry.entries(of: name, in: directory, sharing: .group) {
                    guard case .endpoint(let id) = entry else { continue }
                    let fields = entryFields(SocketRegistry.entryPath(directory, name, id))
                    found.append(
                        SocketRegistration(
                            selector: name,
                            endpoint: fields.endpoint,
                            processID: fields.processID,
                            isAlive: endpointState(directory, id) != .dead,
                            identifier: id
                        )
                    )
                }
            }
        }
        return found
    }

    /// Every socket file in the directory's `sockets` folder, registered or
    /// not, with what the registry and the spool say about it; for `tnotify ls`.
    package static func endpoints(in directory: String = defaultDirectory) -> [SocketEndpoint] {
        let registrations = registrations(in: directory)
        guard case .success(let files) = SystemCalls.directoryEntries(SocketRegistry.socketsDirectory(directory)) else {
            return []
        }
        var found: [SocketEndpoint] = []
        for file in files.sorted() where file.hasSuffix(".sock") {
            let id = String(file.dropLast(5))
            guard SocketRegistry.isIdentifier(id) else { continue }
            let registered = registrations.filter { $0.identifier == id }
            found.append(
                SocketEndpoint(
                    identifier: id,
                    isAlive: endpointState(directory, id) != .dead,
                    names: registered.map(\.selector),
                    processID: registered.first?.processID,
                    endpoint: registered.first?.endpoint,
                    spooledBytes: SpoolWriter.bytesSpooled(in: Spool.directory(directory, endpoint: id))
                )
            )
        }
        return found
    }

    /// Removes everything of endpoints that no longer listen: registry
    /// entries, socket files (also of processes that never registered, such
    /// as posters ended by SIGTERM) and spools. Returns how many endpoints
    /// were removed; 0 when there is no directory.
    ///
    /// - Throws: ``TypedNotificationError/Code/insecureDirectory`` when the
    ///   directory or one of its folders is a symbolic link, a file, another
    ///   user's or open to others, as a transport refuses it; nothing is
    ///   removed then. Each removal reaches its file through folders opened
    ///   without following a link, so a folder swapped for one meanwhile
    ///   leads nowhere outside the directory.
    package static func reapDeadEndpoints(in directory: String = defaultDirectory) throws(TypedNotificationError)
        -> Int
    {
        let directory = SharedDirectory.absolute(directory)
        let folders = [
            directory, SocketRegistry.socketsDirectory(directory), SocketRegistry.namesDirectory(directory),
            SocketRegistry.namespacesDirectory(directory), Spool.directory(directory),
        ]
        guard try SharedDirectory.check(folders, sharing: .group) else { return 0 }
        var dead = Set<String>()
        var removedEntries = false
        for registration in registrations(in: directory) where !registration.isAlive {
            if case .success = SocketRegistry.removeEntry(directory, registration.selector, registration.identifier) {
                removedEntries = true
            }
            dead.insert(registration.identifier)
        }
        // Every removal bumps the registry's generation, where there is one
        // (an owner-only directory whose endpoints made it): never made here.
        let generation = SocketRegistry.generationPath(directory)
        if removedEntries, case .success = SystemCalls.linkStatus(generation) {
            try? SharedCounter.shared(
                path: generation, permissions: DirectorySharing.ownerOnly.fileMode, owner: SystemProcess.userID
            ).increment()
        }
        if case .success(let files) = SystemCalls.directoryEntries(SocketRegistry.socketsDirectory(directory)) {
            for file in files where file.hasSuffix(".sock") {
                let id = String(file.dropLast(5))
                guard SocketRegistry.isIdentifier(id), endpointState(directory, id) == .dead else { continue }
                dead.insert(id)
            }
        }
        // Spools whose endpoint has no socket any more.
        if case .success(let spools) = SystemCalls.directoryEntries(Spool.directory(directory)) {
            for id in spools where SocketRegistry.isIdentifier(id) && endpointState(directory, id) == .dead {
                dead.insert(id)
            }
        }
        for id in dead {
            SocketRegistry.removeSocket(directory, id)
            SocketRegistry.removeSpool(directory, id)
        }
        return dead.count
    }

    enum EndpointState { case alive, dead, unknown }

    /// Whether an endpoint's socket still has a process bound to it: `dead`
    /// when the file is gone or a connect is refused; `unknown` for a file
    /// that is not a socket, or a connect that failed otherwise (another
    /// user's socket), which is left alone.
    static func endpointState(_ directory: String, _ id: String) -> EndpointState {
        let path = SocketRegistry.socketPath(directory, id)
        guard let socket = try? SystemCalls.datagramSocket().get() else { return .unknown }
        // The very file checked, never through a link: a link planted
        // there is `unknown` and left alone, not probed.
        switch SystemCalls.connectSocket(socket, toSocketFile: path, accepting: { _ in true }) {
        case .success(.some): return .alive
        case .success(nil): return .unknown
        case .failure(.connectionRefused), .failure(.noSuchFile): return .dead
        case .failure: return .unknown
        }
    }

    static func entryFields(_ path: String) -> (processID: Int32, endpoint: String) {
        guard case .success(let file) = SystemCalls.openFile(path, .readOnly, options: [.noFollow, .nonBlocking]),
            let bytes = try? SystemCalls.readBytes(file, at: 0, count: 256).get()
        else { return (0, "?") }
        let fields = String(decoding: bytes, as: UTF8.self).split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard fields.count >= 3, let pid = Int32(fields[0]) else { return (0, "?") }
        return (pid, String(fields[2]))
    }
}
