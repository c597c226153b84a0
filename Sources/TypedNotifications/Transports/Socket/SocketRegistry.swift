import NotificationPlatform

/// The layout of a socket transport's shared directory:
///
///     DIR/                     0700
///     DIR/sockets/ID.sock      each transport's bound socket, 0600
///     DIR/names/NAME/ID        one empty-ish file per endpoint observing NAME, 0600
///
/// An ID is 16 lowercase hex digits, random per transport. An entry file holds
/// `pid uid endpoint`, for people and tools; the transport itself needs only
/// its name.
enum SocketRegistry {
    /// The largest envelope a datagram is asked to carry (4 MiB); the system's
    /// send buffer may allow less.
    static let largestEnvelope = 4 * 1024 * 1024

    static func makeIdentifier() -> String {
        let digits = String(UInt64.random(in: 1...UInt64.max), radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }

    static func isIdentifier(_ text: String) -> Bool {
        text.utf8.count == 16
            && text.utf8.allSatisfy {
                (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
                    || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0)
            }
    }

    /// Throws ``TypedNotificationError/Code/pathTooLong``, naming the path and
    /// the limit, for a socket path longer than `limit` bytes: this system's
    /// ``SystemCalls/maximumSocketPathLength``, or another's in tests.
    static func checkSocketPath(_ path: String, limit: Int) throws(TypedNotificationError) {
        guard path.utf8.count > limit else { return }
        throw TypedNotificationError(
            code: .pathTooLong,
            message:
                "the socket path \(path) is \(path.utf8.count) bytes; sockets here reach at most \(limit). Choose a shorter directory"
        )
    }

    static func socketsDirectory(_ directory: String) -> String { directory + "/sockets" }
    static func namesDirectory(_ directory: String) -> String { directory + "/names" }
    /// The registry's generation (see ``SharedCounter``): bumped by every
    /// registration and removal, read by posters at no system call's cost.
    static func generationPath(_ directory: String) -> String { directory + "/names/.generation" }
    static func socketPath(_ directory: String, _ id: String) -> String { directory + "/sockets/" + id + ".sock" }
    static func nameDirectory(_ directory: String, _ name: NotificationName) -> String {
        directory + "/names/" + name.rawValue
    }
    static func entryPath(_ directory: String, _ name: NotificationName, _ id: String) -> String {
        directory + "/names/" + name.rawValue + "/" + id
    }

    /// Creates this endpoint's entry for `name`. Names are validated, so the
    /// path cannot leave the directory; O_NOFOLLOW and O_EXCL refuse a planted link.
    static func register(
        _ id: String,
        for name: NotificationName,
        in directory: String,
        sender: NotificationSender,
        sharing: DirectorySharing
    ) throws(TypedNotificationError) {
        try SharedDirectory.prepare(nameDirectory(directory, name), sharing: sharing)
        let path = entryPath(directory, name, id)
        let file: FileDescriptor
        do throws(Errno) {
            file = try SystemCalls.openFile(
                path, .writeOnly, options: [.create, .exclusive, .noFollow], permissions: sharing.fileMode
            )
            .get()
        } catch {
            throw SharedDirectory.failure(error, "could not register for \(name) at \(path)")
        }
        let line = "\(sender.processID) \(sender.userID) \(sender.endpoint)\n"
        if case .failure(let error) = SystemCalls.writeAll(file, Array(line.utf8)) {
            _ = SystemCalls.removeFile(path)
            throw SharedDirectory.failure(error, "could not write \(path)")
        }
    }

    enum Entry {
        case endpoint(String)
        case ignored
    }

    /// The entries registered for `name`: valid ones by id; anything else (a
    /// foreign name, a symbolic link, another owner's file) is reported ignored.
    static func entries(of name: NotificationName, in directory: String, sharing: DirectorySharing) -> [Entry] {
        let nameDirectory = nameDirectory(directory, name)
        guard case .success(let names) = SystemCalls.directoryEntries(nameDirectory) else { return [] }
        let ownUser = SystemProcess.userID
        return names.map { file in
            guard isIdentifier(file), case .success(let info) = SystemCalls.linkStatus(nameDirectory + "/" + file),
                info.kind == .regular,
                sharing == .group || info.owner == ownUser
            else { return .ignored }
            return .endpoint(file)
        }
    }
}
