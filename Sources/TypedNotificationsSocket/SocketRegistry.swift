import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// The layout of a socket transport's shared directory:
///
///     DIR/                     0700
///     DIR/sockets/ID.sock      each transport's bound socket, 0600
///     DIR/names/NAME/ID        one entry per endpoint observing NAME, 0600
///     DIR/namespaces/NS/ID     one entry per endpoint observing the namespace NS
///     DIR/spool/ID/.registration  what every entry of the endpoint is a hard link to
///
/// An ID is 16 lowercase hex digits, random per transport. An entry holds
/// `pid uid endpoint`, for people and tools; the transport itself needs only
/// its name. Every entry of an endpoint is a hard link to its one
/// registration file, whose link count therefore says, for one `fstat`,
/// whether any entry was removed behind its back (`rm -rf DIR/names/NAME`).
/// An endpoint binds its socket before it makes its spool directory, and
/// unlinks the socket first when it closes: a spool directory with no
/// socket beside it is of an endpoint that closed or died, and is swept.
///
/// A post of `com.example.jobs.done` looks in `names/com.example.jobs.done`,
/// then in `namespaces/com`, `namespaces/com.example`,
/// `namespaces/com.example.jobs` and `namespaces/com.example.jobs.done`.
/// Posters make the directories of names they post (to watch them), never
/// a namespace's: only its observers do, so `namespaces/` changes only when
/// a namespace is first observed, and a poster watches it to learn that. A
/// namespace whose text is longer than ``longestNamespace`` is not observed
/// here, so every registry path stays within ``longestSuffix``.
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

    /// Bytes a socket path adds to the directory: `/sockets/`, 16 hex digits, `.sock`.
    static let socketSuffix = 30
    /// Bytes the longest path below the directory adds: a registry entry for
    /// the longest name, `/names/` + 200 bytes + `/` + 16 hex digits. Every
    /// other path is shorter, temporary ones included: a spool file adds at
    /// most 56 bytes, an entry staged for a repair at most 51.
    static let longestSuffix = 7 + NotificationName.maximumLength + 1 + 16

    /// The longest namespace the registry holds, in bytes: its entry's path
    /// (`/namespaces/` is 5 bytes longer than `/names/`) is then no longer
    /// than the longest name's. A longer one holds only names of 196 bytes
    /// and more.
    static let longestNamespace = NotificationName.maximumLength - 5

    /// The registry directories a post of `name` looks in: its own, then
    /// each enclosing namespace's that can be registered, shortest first.
    static func directories(of name: NotificationName) -> [NotificationSelector] {
        var selectors: [NotificationSelector] = [.name(name)]
        NotificationNamespace.forEach(containing: name) { namespace in
            if namespace.rawValue.utf8.count <= longestNamespace { selectors.append(.namespace(namespace)) }
        }
        return selectors
    }

    /// The longest directory the socket transport takes, in bytes, where
    /// sockets reach `socketLimit`-byte paths and files `pathLimit`-byte ones:
    /// 3,871 bytes on Linux, 222 on Apple platforms (whose sockets reach 252).
    static func maximumDirectoryLength(
        socketLimit: Int = SystemCalls.maximumSocketPathLength, pathLimit: Int = SystemCalls.maximumPathLength
    ) -> Int {
        min(socketLimit - socketSuffix, pathLimit - longestSuffix)
    }

    /// Throws ``TypedNotificationError/Code/pathTooLong``, naming the
    /// directory and the limit, for a directory longer than
    /// ``maximumDirectoryLength(socketLimit:pathLimit:)``: this system's, or
    /// another's in tests. Checked before anything is created, so every
    /// path the transport makes later fits.
    static func checkDirectory(
        _ directory: String, socketLimit: Int = SystemCalls.maximumSocketPathLength,
        pathLimit: Int = SystemCalls.maximumPathLength
    ) throws(TypedNotificationError) {
        let limit = maximumDirectoryLength(socketLimit: socketLimit, pathLimit: pathLimit)
        guard directory.utf8.count > limit else { return }
        throw TypedNotificationError(
            code: .pathTooLong,
            message:
                "the directory \(directory) is \(directory.utf8.count) bytes; the socket transport takes at most \(limit) here (its sockets reach \(socketLimit)-byte paths, and a registry entry adds up to \(longestSuffix) bytes). Choose a shorter directory"
        )
    }

    static func socketsDirectory(_ directory: String) -> String { directory + "/sockets" }
    static func namesDirectory(_ directory: String) -> String { directory + "/names" }
    static func namespacesDirectory(_ directory: String) -> String { directory + "/namespaces" }
    /// The registry's generation (see ``SharedCounter``): bumped by every
    /// registration and removal, read by posters at no system call's cost.
    static func generationPath(_ directory: String) -> String { directory + "/names/.generation" }
    static func socketPath(_ directory: String, _ id: String) -> String { directory + "/sockets/" + id + ".sock" }
    /// The registry directory of a name (`names/NAME`) or a namespace (`namespaces/NS`).
    static func nameDirectory(_ directory: String, _ selector: NotificationSelector) -> String {
        switch selector {
        case .name(let name): directory + "/names/" + name.rawValue
        case .namespace(let namespace): directory + "/namespaces/" + namespace.rawValue
        }
    }
    static func entryPath(_ directory: String, _ selector: NotificationSelector, _ id: String) -> String {
        nameDirectory(directory, selector) + "/" + id
    }
    static func entryPath(_ directory: String, _ name: NotificationName, _ id: String) -> String {
        entryPath(directory, .name(name), id)
    }

    /// Removes an endpoint's socket file, `sockets/ID.sock`, reaching it
    /// through folders opened without following a link (see
    /// `SystemCalls.removeEntry`): `sockets/` swapped for a link by anyone
    /// who may write the directory leads nowhere outside it.
    @discardableResult
    static func removeSocket(_ directory: String, _ id: String) -> Result<Void, Errno> {
        SystemCalls.removeEntry(["sockets", id + ".sock"], under: directory)
    }

    /// Removes a registry entry, `names/NAME/ID` or `namespaces/NS/ID`,
    /// never through a link (see ``removeSocket(_:_:)``).
    @discardableResult
    static func removeEntry(_ directory: String, _ selector: NotificationSelector, _ id: String) -> Result<Void, Errno>
    {
        switch selector {
        case .name(let name): SystemCalls.removeEntry(["names", name.rawValue, id], under: directory)
        case .namespace(let namespace):
            SystemCalls.removeEntry(["namespaces", namespace.rawValue, id], under: directory)
        }
    }

    /// Removes an endpoint's spool, `spool/ID`, with everything in it,
    /// whatever the names, never through a link (see ``removeSocket(_:_:)``).
    @discardableResult
    static func removeSpool(_ directory: String, _ id: String) -> Result<Void, Errno> {
        SystemCalls.removeEntry(["spool", id], under: directory, tree: true)
    }

    /// This endpoint's registration file, in its own spool directory (whose
    /// reader skips names that start with a dot).
    static func registrationPath(_ directory: String, _ id: String) -> String {
        Spool.directory(directory, endpoint: id) + "/.registration"
    }

    /// The registration file's name in the endpoint's spool folder.
    static let registrationName = ".registration"

    /// Where an entry is made before it is renamed into place: a name of
    /// its own per call, in the endpoint's spool folder, so two threads
    /// that repair entries at once never take each other's.
    static func stagingName() -> String {
        ".entry." + String(stagings.add(1, ordering: .relaxed).oldValue)
    }

    private static let stagings = Atomic<UInt64>(0)

    /// Creates this endpoint's registration file in its spool folder
    /// (`spool`, opened when the transport started, so a folder swapped for
    /// a link since leads nowhere else), which every entry is a hard link
    /// to, and returns it open (to count its links and know it).
    static func makeRegistration(
        in spool: borrowing FileDescriptor, path: String, sender: NotificationSender, sharing: DirectorySharing
    ) throws(TypedNotificationError) -> FileDescriptor {
        let file: FileDescriptor
        do throws(Errno) {
            file = try SystemCalls.openFile(
                registrationName, in: spool, .writeOnly, options: [.create, .exclusive, .noFollow],
                permissions: sharing.fileMode
            ).get()
        } catch {
            throw SharedDirectory.failure(error, "could not create \(path)")
        }
        grantSharedMode(file, sharing: sharing)
        if case .failure(let error) = SystemCalls.writeAll(file, registrationLine(sender)) {
            _ = SystemCalls.removeFile(registrationName, in: spool)
            throw SharedDirectory.failure(error, "could not write \(path)")
        }
        return file
    }

    /// Gives a file just created in a group-shared directory the group's
    /// mode: `open` applied the umask, which takes the group's write bit
    /// (0640 for 0660 under the usual 022) and would shut the members out.
    static func grantSharedMode(_ file: borrowing FileDescriptor, sharing: DirectorySharing) {
        if sharing == .group { _ = SystemCalls.changeMode(file, permissions: sharing.fileMode) }
    }

    /// What a registration file holds: `pid uid endpoint`, for people and tools.
    static func registrationLine(_ sender: NotificationSender) -> [UInt8] {
        Array("\(sender.processID) \(sender.userID) \(sender.endpoint)\n".utf8)
    }

    /// How an entry was made.
    enum Registered {
        /// A hard link to the registration file.
        case linked
        /// A file of its own: the registration file has as many links as
        /// the file system allows.
        case unlinked
    }

    /// How many times registering makes the registry's folders again when
    /// another process removed them meanwhile.
    static let registerAttempts = 64

    /// Creates this endpoint's entry for `selector`: a hard link to its
    /// registration file (`registration`, whose identity is `identity`).
    /// Names are validated, so the path cannot leave the directory; `link`
    /// never follows or replaces what is there. An entry already there that
    /// is the same file is kept; a regular file of this user (a copy, or a
    /// file of its own) is replaced by the link in one `rename`; anything
    /// else is refused.
    @discardableResult
    static func register(
        _ id: String,
        for name: NotificationSelector,
        in directory: String,
        spool: borrowing FileDescriptor,
        registration identity: FileIdentity,
        sender: NotificationSender,
        sharing: DirectorySharing
    ) throws(TypedNotificationError) -> Registered {
        let path = entryPath(directory, name, id)
        // Another process's `rm -rf DIR/names` may remove the folders just
        // made, again and again while it runs (each `rm` a few
        // milliseconds): made again, up to 64 times, before giving up.
        // Each try is a few system calls, so giving up costs little.
        var attempts = 0
        var linked: Result<Void, Errno>
        repeat {
            attempts += 1
            do throws(TypedNotificationError) {
                switch name {
                case .namespace: try SharedDirectory.prepare(namespacesDirectory(directory), sharing: sharing)
                case .name: try SharedDirectory.prepare(namesDirectory(directory), sharing: sharing)
                }
                try SharedDirectory.prepare(nameDirectory(directory, name), sharing: sharing)
            } catch {
                guard attempts < Self.registerAttempts else { throw error }
                continue
            }
            linked = SystemCalls.hardLink(registrationName, in: spool, to: path)
            guard case .failure(.noSuchFile) = linked, attempts < Self.registerAttempts else { break }
        } while true
        switch linked {
        case .success: return .linked
        case .failure(.tooManyLinks):
            try createFile(path, sender: sender, sharing: sharing)
            return .unlinked
        case .failure(.fileExists):
            guard case .success(let info) = SystemCalls.linkStatus(path) else {
                throw SharedDirectory.failure(.fileExists, "could not register for \(name) at \(path)")
            }
            if info.identity == identity { return .linked }
            guard info.kind == .regular, info.owner == SystemProcess.userID else {
                throw SharedDirectory.failure(.fileExists, "could not register for \(name) at \(path)")
            }
            // Staged in the endpoint's own spool directory, which only it
            // writes (its reader skips dot names), not beside the entry: a
            // name there (`ID.new`) would be 4 bytes past the longest path
            // the directory's length was checked for.
            let staged = stagingName()
            _ = SystemCalls.removeFile(staged, in: spool)
            var replaced = SystemCalls.hardLink(registrationName, asEntry: staged, in: spool)
            if case .success = replaced { replaced = SystemCalls.renameFile(staged, in: spool, to: path) }
            if case .failure(let error) = replaced {
                _ = SystemCalls.removeFile(staged, in: spool)
                throw SharedDirectory.failure(error, "could not register for \(name) at \(path)")
            }
            return .linked
        case .failure(let error):
            throw SharedDirectory.failure(error, "could not register for \(name) at \(path)")
        }
    }

    /// Creates a file at `path` (never over one, never through a link)
    /// holding `pid uid endpoint`, for people and tools, and returns it open.
    @discardableResult
    private static func createFile(_ path: String, sender: NotificationSender, sharing: DirectorySharing)
        throws(TypedNotificationError) -> FileDescriptor
    {
        let file: FileDescriptor
        do throws(Errno) {
            file = try SystemCalls.openFile(
                path, .writeOnly, options: [.create, .exclusive, .noFollow], permissions: sharing.fileMode
            ).get()
        } catch {
            throw SharedDirectory.failure(error, "could not create \(path)")
        }
        grantSharedMode(file, sharing: sharing)
        if case .failure(let error) = SystemCalls.writeAll(file, registrationLine(sender)) {
            _ = SystemCalls.removeFile(path)
            throw SharedDirectory.failure(error, "could not write \(path)")
        }
        return file
    }

    enum Entry {
        case endpoint(String)
        case ignored
    }

    /// The entries registered for `name`: valid ones by id; anything else (a
    /// foreign name, a symbolic link, another owner's file) is reported ignored.
    static func entries(of name: NotificationSelector, in directory: String, sharing: DirectorySharing) -> [Entry] {
        let nameDirectory = nameDirectory(directory, name)
        // A directory, never a link to one elsewhere: a namespace's is not
        // made (and so checked) by posters, as a name's is.
        guard case .success(let info) = SystemCalls.linkStatus(nameDirectory), info.kind == .directory,
            case .success(let names) = SystemCalls.directoryEntries(nameDirectory)
        else { return [] }
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
