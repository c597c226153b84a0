@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Who may use a shared directory besides its owner.
public enum DirectorySharing: Sendable, Hashable {
    /// Only the user who owns it: directories 0700, files and sockets 0600,
    /// and messages from any other user are refused.
    case ownerOnly
    /// Also the members of the directory's group: directories 0770, files and
    /// sockets 0660, and messages from users in that group are accepted.
    case group

    var directoryMode: FilePermissions { self == .ownerOnly ? 0o700 : 0o770 }
    var fileMode: FilePermissions { self == .ownerOnly ? 0o600 : 0o660 }
    // Permission bits that must not be set on an existing directory.
    var forbiddenBits: FilePermissions { self == .ownerOnly ? 0o077 : 0o007 }
}

/// Creating and checking the directories a cross-process transport shares,
/// so that nothing is created in, or read from, a place another user controls.
enum SharedDirectory {
    /// Creates `path` with the sharing's mode if it is missing, then checks it:
    /// a real directory (not a symbolic link), owned by this user, with no
    /// permission bits beyond the sharing's.
    static func prepare(_ path: String, sharing: DirectorySharing) throws(TypedNotificationError) {
        switch SystemCalls.makeDirectory(path, permissions: sharing.directoryMode) {
        case .success:
            // mkdir applies the umask; set the mode exactly.
            _ = SystemCalls.changeMode(path, permissions: sharing.directoryMode)
        case .failure(.fileExists):
            break
        case .failure(let error):
            throw failure(error, "could not create the directory \(path)")
        }
        let info: FileStatus
        switch SystemCalls.linkStatus(path) {
        case .success(let found): info = found
        case .failure(let error): throw failure(error, "could not inspect \(path)")
        }
        guard info.kind == .directory else {
            throw TypedNotificationError(
                code: .insecureDirectory,
                message:
                    "\(path) is not a directory (a symbolic link or a file is refused); remove it or choose another directory"
            )
        }
        guard info.owner == SystemProcess.userID else {
            throw TypedNotificationError(
                code: .insecureDirectory,
                message:
                    "\(path) belongs to user \(info.owner), not to this user (\(SystemProcess.userID)); choose a directory of your own"
            )
        }
        guard !info.permissions.intersects(sharing.forbiddenBits) else {
            throw TypedNotificationError(
                code: .insecureDirectory,
                message:
                    "\(path) has mode \(info.permissions), open to more users than \(sharing) allows; run chmod \(sharing.directoryMode) on it"
            )
        }
    }

    /// Prepares each of `paths` in order, each inside the one before.
    /// Another process's `rm -rf` may remove a folder just made, again and
    /// again while it runs (each `rm` a few milliseconds): when a step
    /// fails for a missing folder (`ENOENT`), the chain is made again from
    /// its first folder, up to ``chainAttempts`` times, before the last
    /// error is thrown. Anything else (a file where a folder belongs) is
    /// thrown at once. Each try is a few system calls, so
    /// giving up costs little.
    static func prepare(chain paths: [String], sharing: DirectorySharing) throws(TypedNotificationError) {
        try inside(chain: paths, sharing: sharing) {}
    }

    /// Prepares `paths` as ``prepare(chain:sharing:)`` does, then runs
    /// `body`, which makes something in the last of them; both again, up to
    /// ``chainAttempts`` times, when `body` fails because a folder of the
    /// chain was removed meanwhile (`ENOENT`).
    static func inside<Result: ~Copyable>(
        chain paths: [String], sharing: DirectorySharing,
        _ body: () throws(TypedNotificationError) -> Result
    ) throws(TypedNotificationError) -> Result {
        var attempts = 0
        while true {
            attempts += 1
            do throws(TypedNotificationError) {
                for path in paths { try prepare(path, sharing: sharing) }
                return try body()
            } catch {
                guard attempts < chainAttempts, (error.cause as? Errno) == .noSuchFile else { throw error }
            }
        }
    }

    /// How many times ``prepare(chain:sharing:)`` makes a chain of folders
    /// before it gives up.
    static let chainAttempts = 64

    /// `path` made absolute against the working directory, so that every
    /// process names the same files the same way (socket peers are compared
    /// by the path they are bound to). Trailing slashes are dropped.
    static func absolute(_ path: String) -> String {
        var path = path
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        guard !path.hasPrefix("/") else { return path }
        guard let base = SystemCalls.currentDirectory() else { return path }
        if path == "." { return base }
        return (base == "/" ? "" : base) + "/" + (path.hasPrefix("./") ? String(path.dropFirst(2)) : path)
    }

    /// A typed error for a failed file-system call.
    static func failure(_ error: Errno, _ what: String) -> TypedNotificationError {
        let code: TypedNotificationError.Code =
            switch error {
            case .permissionDenied, .notPermitted: .permissionDenied
            case .nameTooLong: .pathTooLong
            default: .transportFailure
            }
        return TypedNotificationError(code: code, message: "\(what): \(error)", cause: error)
    }

    /// An error for a change monitor that could not be made or could not
    /// watch: its text names the kernel limit reached, when one was.
    static func failure(_ error: ChangeMonitorError, _ what: String) -> TypedNotificationError {
        TypedNotificationError(code: .transportFailure, message: "\(what): \(error)", cause: error.errno)
    }
}

/// Opening files of a shared directory so that nothing planted there can hang
/// or fool a reader, a poster or the tool.
enum SharedFile {
    /// Opens `path` without blocking (a FIFO would block `open` until a writer
    /// came) and without following a symbolic link, then checks that it is a
    /// regular file owned by this user (or, with ``DirectorySharing/group``,
    /// by anyone, since members create files too) with no permission bits
    /// beyond the sharing's. Anything else is refused with
    /// ``TypedNotificationError/Code/insecureDirectory`` naming the path.
    static func open(
        _ path: String, _ access: FileAccess, creating: FileOpenOptions = [], sharing: DirectorySharing
    ) -> Result<FileDescriptor, TypedNotificationError> {
        let file: FileDescriptor
        let options = creating.union([.noFollow, .nonBlocking])
        switch SystemCalls.openFile(path, access, options: options, permissions: sharing.fileMode) {
        case .success(let opened): file = opened
        case .failure(.tooManySymbolicLinks):
            // O_NOFOLLOW on a symbolic link.
            return .failure(refusal(path, "is a symbolic link"))
        case .failure(let error):
            return .failure(SharedDirectory.failure(error, "could not open \(path)"))
        }
        guard case .success(let info) = SystemCalls.fileStatus(file) else {
            return .failure(TypedNotificationError(code: .transportFailure, message: "could not inspect \(path)"))
        }
        if let problem = problem(with: info, sharing: sharing) {
            return .failure(refusal(path, problem))
        }
        return .success(file)
    }

    /// What is wrong with a file of a shared directory, or `nil`.
    static func problem(with info: FileStatus, sharing: DirectorySharing) -> String? {
        guard info.kind == .regular else {
            return "is \(info.kind), not a regular file"
        }
        if sharing == .ownerOnly && info.owner != SystemProcess.userID {
            return "belongs to user \(info.owner), not to this user (\(SystemProcess.userID))"
        }
        if info.permissions.intersects(sharing.forbiddenBits) {
            return
                "has mode \(info.permissions), open to more users than \(sharing) allows; run chmod \(sharing.fileMode) on it"
        }
        return nil
    }

    private static func refusal(_ path: String, _ problem: String) -> TypedNotificationError {
        TypedNotificationError(code: .insecureDirectory, message: "refused \(path): it \(problem)")
    }
}

extension SharedDirectory {
    /// Every path that resolving the absolute `path` goes through, below
    /// the root, `path`'s own last part left out: each directory above it,
    /// each symbolic link on the way (a link to a link too), and the
    /// directories above where each leads. Renaming or removing any of
    /// them, or making a link lead elsewhere, changes what `path` names.
    /// Up to 40 links are followed, as the kernel does.
    ///
    /// The corresponding C functions are `lstat` and `readlink`, per part.
    static func pathsTraversed(to path: String) -> [String] {
        var traversed: [String] = []
        var pending = Array(path.split(separator: "/", omittingEmptySubsequences: true).map(String.init).dropLast())
        var current = ""
        var links = 0
        while !pending.isEmpty {
            let part = pending.removeFirst()
            if part == "." { continue }
            if part == ".." {
                current = String(current[..<(current.lastIndex(of: "/") ?? current.startIndex)])
                continue
            }
            let candidate = current + "/" + part
            if !traversed.contains(candidate) { traversed.append(candidate) }
            guard links < 40, case .success(let info) = SystemCalls.linkStatus(candidate), info.kind == .symbolicLink,
                let target = SystemCalls.linkTarget(candidate)
            else {
                current = candidate
                continue
            }
            links += 1
            if target.hasPrefix("/") { current = "" }
            pending = target.split(separator: "/", omittingEmptySubsequences: true).map(String.init) + pending
        }
        return traversed
    }
}

/// Which file a path named when it was recorded (device and inode), to
/// notice that it was removed or replaced since: a transport whose shared
/// directory is gone must say so instead of staying alive and deaf.
struct RecordedPath: Sendable, Equatable {
    let path: String
    let identity: FileIdentity

    /// The identity of what `path` names now (not following a link), or `nil`.
    init?(_ path: String) {
        guard case .success(let info) = SystemCalls.linkStatus(path) else { return nil }
        self.path = path
        identity = info.identity
    }

    /// Whether `path` still names the same file.
    var isStillThere: Bool {
        guard case .success(let info) = SystemCalls.linkStatus(path) else { return false }
        return info.identity == identity
    }

}

/// The path watches a transport keeps on its directory and on what it
/// depends on, and the file each path named when watched (see
/// ``watch(_:of:mounted:)``).
struct DirectoryWatches {
    /// Set by close: a watch made after it is cancelled at once.
    var isClosed = false
    var fixed: [PathWatch] = []
    /// The paths of `fixed`, and the file each named when watched (`nil`:
    /// none was there).
    var paths: [(path: String, recorded: RecordedPath?)] = []
    /// A watch its owner replaces on its own: the socket transport's
    /// registration file, made again when a repair replaces the file.
    var registration: PathWatch?

    /// Ends every watch: a transport's close.
    mutating func close() -> [PathWatch] {
        defer { self = DirectoryWatches(isClosed: true) }
        return fixed + [registration].compactMap { $0 }
    }
}

extension Locked<DirectoryWatches> {
    /// Whether one of the watched paths names another file than when
    /// watched (moved, or removed and made again): a watch follows its
    /// file, not its path. Looked at with no lock held.
    ///
    /// The corresponding C function is `lstat`, once per path.
    var anyMoved: Bool { withLock { $0.paths }.contains { RecordedPath($0.path) != $0.recorded } }

    /// Watches each of `paths` for its events with the process's path
    /// watcher, and every mount (`mounted`, on the watcher's thread),
    /// replacing the watches there were. Returns whether a path was
    /// missing: it is watched once a look made it again, which compares
    /// each path with what it was, and nothing was there. The `extra`
    /// watches are neither compared nor allowed to be missing.
    func watch(
        _ paths: [(String, PathEvents, @Sendable () -> Void)],
        andAlso extra: [(String, PathEvents, @Sendable () -> Void)] = [], of directory: String,
        mounted: @escaping @Sendable () -> Void
    ) throws(TypedNotificationError) -> Bool {
        var made: [PathWatch] = []
        // What each path was when watched: a watch follows its file, not
        // its path, so one that is not there any more must be made again.
        let identities = paths.map { (path: $0.0, recorded: RecordedPath($0.0)) }
        var missing = false
        do throws(ChangeMonitorError) {
            let watcher = try PathWatcher.shared()
            made.append(watcher.watchMounts(mounted))
            for (path, events, changed) in paths {
                do throws(ChangeMonitorError) {
                    made.append(try watcher.watch(path, for: events, changed))
                } catch {
                    guard error.errno == .noSuchFile else { throw error }
                    missing = true
                }
            }
            for (path, events, changed) in extra { made.append(try watcher.watch(path, for: events, changed)) }
        } catch {
            throw SharedDirectory.failure(error, "could not watch \(directory)")
        }
        let replaced = withLock { watches -> [PathWatch] in
            guard !watches.isClosed else { return made }
            defer { (watches.fixed, watches.paths) = (made, identities) }
            return watches.fixed
        }
        for watch in replaced { watch.cancel() }
        return missing
    }
}

/// What a transport's reader thread looks at to notice that the files it
/// depends on (its shared directory, its socket) were removed or replaced:
/// when its path watches report a change, and the file transport also at
/// most once a second on the read passes that posts cause.
struct RemovalWatch {
    private let files: [RecordedPath]
    private var lastLook = SystemClock.monotonicNanoseconds()

    /// Watches `files` as they are now.
    init(_ files: [RecordedPath]) {
        self.files = files
    }

    /// The error to report if, at this look, one of the files is gone; `nil`
    /// when they are all there or, unless `throttled` is false, the last
    /// look was under a second ago.
    mutating func removal(throttled: Bool = true) -> TypedNotificationError? {
        let now = SystemClock.monotonicNanoseconds()
        guard !throttled || now &- lastLook >= 1_000_000_000 else { return nil }
        lastLook = now
        guard let gone = files.first(where: { !$0.isStillThere }) else { return nil }
        return TypedNotificationError(
            code: .transportFailure,
            message:
                "\(gone.path) was removed or replaced while in use; nothing more can be received. Create the transport again"
        )
    }
}
