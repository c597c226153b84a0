import NotificationPlatform

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Who may use a shared directory besides its owner.
public enum DirectorySharing: Sendable, Hashable {
    /// Only the user who owns it: directories 0700, files and sockets 0600,
    /// and messages from any other user are refused.
    case ownerOnly
    /// Also the members of the directory's group: directories 0770, files and
    /// sockets 0660, and messages from users in that group are accepted.
    case group

    var directoryMode: mode_t { self == .ownerOnly ? 0o700 : 0o770 }
    var fileMode: mode_t { self == .ownerOnly ? 0o600 : 0o660 }
    // Permission bits that must not be set on an existing directory.
    var forbiddenBits: mode_t { self == .ownerOnly ? 0o077 : 0o007 }
}

/// Creating and checking the directories a cross-process transport shares,
/// so that nothing is created in, or read from, a place another user controls.
enum SharedDirectory {
    /// Creates `path` with the sharing's mode if it is missing, then checks it:
    /// a real directory (not a symbolic link), owned by this user, with no
    /// permission bits beyond the sharing's.
    static func prepare(_ path: String, sharing: DirectorySharing) throws(TypedNotificationError) {
        switch SystemCalls.makeDirectory(path, mode: sharing.directoryMode) {
        case .success:
            // mkdir applies the umask; set the mode exactly.
            _ = SystemCalls.changeMode(path, mode: sharing.directoryMode)
        case .failure(.fileExists):
            break
        case .failure(let error):
            throw failure(error, "could not create the directory \(path)")
        }
        let info: stat
        switch SystemCalls.linkStatus(path) {
        case .success(let found): info = found
        case .failure(let error): throw failure(error, "could not inspect \(path)")
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw TypedNotificationError(
                code: .insecureDirectory,
                message:
                    "\(path) is not a directory (a symbolic link or a file is refused); remove it or choose another directory"
            )
        }
        guard info.st_uid == SystemProcess.userID else {
            throw TypedNotificationError(
                code: .insecureDirectory,
                message:
                    "\(path) belongs to user \(info.st_uid), not to this user (\(SystemProcess.userID)); choose a directory of your own"
            )
        }
        guard info.st_mode & sharing.forbiddenBits == 0 else {
            let mode = String(info.st_mode & 0o777, radix: 8)
            throw TypedNotificationError(
                code: .insecureDirectory,
                message:
                    "\(path) has mode \(mode), open to more users than \(sharing) allows; run chmod \(String(sharing.directoryMode, radix: 8)) on it"
            )
        }
    }

    /// `path` made absolute against the working directory, so that every
    /// process names the same files the same way (socket peers are compared
    /// by the path they are bound to). Trailing slashes are dropped.
    static func absolute(_ path: String) -> String {
        var path = path
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        guard !path.hasPrefix("/") else { return path }
        guard let working = getcwd(nil, 0) else { return path }
        defer { free(working) }
        let base = String(cString: working)
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
        _ path: String, _ flags: CInt, mode: mode_t = 0, sharing: DirectorySharing
    ) -> Result<FileDescriptor, TypedNotificationError> {
        let file: FileDescriptor
        switch SystemCalls.openFile(path, flags | O_NOFOLLOW | O_NONBLOCK, mode: mode) {
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
    static func problem(with info: stat, sharing: DirectorySharing) -> String? {
        let kind = info.st_mode & S_IFMT
        guard kind == S_IFREG else {
            let name =
                switch kind {
                case S_IFIFO: "a FIFO"
                case S_IFDIR: "a directory"
                case S_IFSOCK: "a socket"
                case S_IFLNK: "a symbolic link"
                case S_IFCHR, S_IFBLK: "a device"
                default: "not a regular file"
                }
            return "is \(name), not a regular file"
        }
        if sharing == .ownerOnly && info.st_uid != SystemProcess.userID {
            return "belongs to user \(info.st_uid), not to this user (\(SystemProcess.userID))"
        }
        if info.st_mode & sharing.forbiddenBits != 0 {
            return
                "has mode \(String(info.st_mode & 0o777, radix: 8)), open to more users than \(sharing) allows; run chmod \(String(sharing.fileMode, radix: 8)) on it"
        }
        return nil
    }

    private static func refusal(_ path: String, _ problem: String) -> TypedNotificationError {
        TypedNotificationError(code: .insecureDirectory, message: "refused \(path): it \(problem)")
    }
}

/// Which file a path named when it was recorded (device and inode), to
/// notice that it was removed or replaced since: a transport whose shared
/// directory is gone must say so instead of staying alive and deaf.
struct FileIdentity: Sendable, Equatable {
    let path: String
    let device: UInt64
    let inode: UInt64

    /// The identity of what `path` names now (not following a link), or `nil`.
    init?(_ path: String) {
        guard case .success(let info) = SystemCalls.linkStatus(path) else { return nil }
        self.path = path
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }

    /// Whether `path` still names the same file.
    var isStillThere: Bool {
        guard case .success(let info) = SystemCalls.linkStatus(path) else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }

}

/// What a transport's reader thread looks at, once a second at most, to
/// notice that the files it depends on (its shared directory, its socket)
/// were removed or replaced.
struct RemovalWatch {
    private let files: [FileIdentity]
    private var lastLook = SystemClock.monotonicNanoseconds()

    /// Watches `files` as they are now.
    init(_ files: [FileIdentity]) {
        self.files = files
    }

    /// The error to report if, at this look, one of the files is gone; `nil`
    /// when they are all there or the last look was under a second ago.
    mutating func removal() -> TypedNotificationError? {
        let now = SystemClock.monotonicNanoseconds()
        guard now &- lastLook >= 1_000_000_000 else { return nil }
        lastLook = now
        guard let gone = files.first(where: { !$0.isStillThere }) else { return nil }
        return TypedNotificationError(
            code: .transportFailure,
            message:
                "\(gone.path) was removed or replaced while in use; nothing more can be received. Create the transport again"
        )
    }
}
