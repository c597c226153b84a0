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
        switch System.makeDirectory(path, mode: sharing.directoryMode) {
        case .success:
            // mkdir applies the umask; set the mode exactly.
            _ = System.changeMode(path, mode: sharing.directoryMode)
        case .failure(.fileExists):
            break
        case .failure(let error):
            throw failure(error, "could not create the directory \(path)")
        }
        let info: stat
        switch System.linkStatus(path) {
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
