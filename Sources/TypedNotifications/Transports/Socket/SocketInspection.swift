import NotificationPlatform

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// One endpoint registered for a name in a socket transport's directory.
public struct SocketRegistration: Sendable, Hashable {
    /// The name it observes.
    public var name: NotificationName
    /// The registering center's endpoint label, as written in the entry.
    public var endpoint: String
    /// The registering process's id, as written in the entry.
    public var processID: Int32
    /// Whether its socket still accepts connections: `false` for a process
    /// that died without unregistering.
    public var isAlive: Bool
    /// The transport's random identifier, which names its socket and entry.
    public var identifier: String
}

extension SocketTransport {
    /// Every registration in the directory, by name; for tools such as `tnotify ls`.
    public static func registrations(in directory: String = defaultDirectory) -> [SocketRegistration] {
        guard case .success(let names) = System.directoryEntries(SocketRegistry.namesDirectory(directory)) else {
            return []
        }
        var found: [SocketRegistration] = []
        for rawName in names.sorted() {
            guard let name = try? NotificationName(validating: rawName) else { continue }
            for entry in SocketRegistry.entries(of: name, in: directory, sharing: .group) {
                guard case .endpoint(let id) = entry else { continue }
                let fields = entryFields(SocketRegistry.entryPath(directory, name, id))
                found.append(
                    SocketRegistration(
                        name: name,
                        endpoint: fields.endpoint,
                        processID: fields.processID,
                        isAlive: isListening(SocketRegistry.socketPath(directory, id)),
                        identifier: id
                    )
                )
            }
        }
        return found
    }

    /// Removes the registrations and sockets of endpoints that no longer
    /// listen; returns how many registrations were removed.
    public static func reapDeadEndpoints(in directory: String = defaultDirectory) -> Int {
        var removed = 0
        for registration in registrations(in: directory) where !registration.isAlive {
            let entry = SocketRegistry.entryPath(directory, registration.name, registration.identifier)
            if case .success = System.removeFile(entry) { removed += 1 }
            _ = System.removeFile(SocketRegistry.socketPath(directory, registration.identifier))
        }
        return removed
    }

    private static func isListening(_ path: String) -> Bool {
        guard let socket = try? System.datagramSocket().get() else { return false }
        if case .success = System.connectSocket(socket, toSocketPath: path) { return true }
        return false
    }

    private static func entryFields(_ path: String) -> (processID: Int32, endpoint: String) {
        guard case .success(let file) = System.openFile(path, O_RDONLY | O_NOFOLLOW),
            let bytes = try? FileLog.read(file, at: 0, count: 256).get()
        else { return (0, "?") }
        let fields = String(decoding: bytes, as: UTF8.self).split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard fields.count >= 3, let pid = Int32(fields[0]) else { return (0, "?") }
        return (pid, String(fields[2]))
    }
}
