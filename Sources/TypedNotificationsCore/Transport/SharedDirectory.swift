@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Who may use a shared directory besides its owner.
public enum DirectorySharing: Sendable, Hashable {
    /// Only the user who owns it: directories 0700, files and sockets 0600,
    /// and messages from any other user are refused.
    case ownerOnly
    /// Also the members of the directory's group: directories 0770, files and
    /// sockets 0660, and messages from users in that group are accepted.
    /// Make the directory the group's and set-group-ID (`chmod 2770`), so
    /// that what any member makes in it belongs to the group.
    case group

    package var directoryMode: FilePermissions { self == .ownerOnly ? 0o700 : 0o770 }
    package var fileMode: FilePermissions { self == .ownerOnly ? 0o600 : 0o660 }

    /// What the sharing means to the file system.
    package var modes: SharingModes {
        SharingModes(
            directory: directoryMode, file: fileMode, forbidden: self == .ownerOnly ? 0o077 : 0o007,
            ownerOnly: self == .ownerOnly, name: "\(self)")
    }
}

/// The shared directories of the socket and file transports, as they fail:
/// the platform layer's `SharedPaths` makes and checks them, and this turns
/// its failures into ``TypedNotificationError``s. What the two transports
/// share goes through here or the platform layer, never from one to the
/// other.
package enum SharedDirectory {
    /// Creates `path` with the sharing's mode if it is missing, then checks it:
    /// a real directory (not a symbolic link), owned by this user, with no
    /// permission bits beyond the sharing's.
    package static func prepare(_ path: String, sharing: DirectorySharing) throws(TypedNotificationError) {
        do throws(SharedPathFailure) {
            try SharedPaths.prepareDirectory(path, modes: sharing.modes)
        } catch {
            throw failure(error)
        }
    }

    /// Checks each of `paths` that exists as ``prepare(_:sharing:)`` does,
    /// making none: for tools that only look or clean up, which must refuse
    /// a folder swapped for a link as every transport does. Returns
    /// whether the first one, the directory itself, exists.
    package static func check(_ paths: [String], sharing: DirectorySharing) throws(TypedNotificationError) -> Bool {
        var first: Bool?
        for path in paths {
            let exists: Bool
            do throws(SharedPathFailure) {
                exists = try SharedPaths.checkDirectory(path, modes: sharing.modes)
            } catch {
                throw failure(error)
            }
            if first == nil {
                first = exists
                if !exists { return false }
            }
        }
        return first ?? false
    }

    /// Prepares each of `paths` in order, each inside the one before.
    /// Another process's `rm -rf` may remove a folder just made, again and
    /// again while it runs (each `rm` a few milliseconds): when a step
    /// fails for a missing folder (`ENOENT`), the chain is made again from
    /// its first folder, up to ``chainAttempts`` times, before the last
    /// error is thrown. Anything else (a file where a folder belongs) is
    /// thrown at once. Each try is a few system calls, so
    /// giving up costs little.
    package static func prepare(chain paths: [String], sharing: DirectorySharing) throws(TypedNotificationError) {
        try inside(chain: paths, sharing: sharing) {}
    }

    /// Prepares `paths` as ``prepare(chain:sharing:)`` does, then runs
    /// `body`, which makes something in the last of them; both again, up to
    /// ``chainAttempts`` times, when `body` fails because a folder of the
    /// chain was removed meanwhile (`ENOENT`).
    package static func inside<Result: ~Copyable>(
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
    package static let chainAttempts = 64

    /// `path` made absolute against the working directory (see the
    /// platform layer's `SharedPaths.absolute`).
    package static func absolute(_ path: String) -> String { SharedPaths.absolute(path) }

    /// A typed error for a failed file-system call.
    package static func failure(_ error: Errno, _ what: String) -> TypedNotificationError {
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
    package static func failure(_ error: ChangeMonitorError, _ what: String) -> TypedNotificationError {
        TypedNotificationError(code: .transportFailure, message: "\(what): \(error)", cause: error.errno)
    }

    /// The typed error for a shared path the platform layer refused or could
    /// not make: ``TypedNotificationError/Code/insecureDirectory`` for what
    /// must not be trusted.
    package static func failure(_ error: SharedPathFailure) -> TypedNotificationError {
        switch error.kind {
        case .insecure: TypedNotificationError(code: .insecureDirectory, message: error.message)
        case .systemCall(let errno): failure(errno, error.message)
        }
    }
}

/// Opening files of a shared directory so that nothing planted there can hang
/// or fool a reader, a poster or the tool (see the platform layer's
/// `SharedPaths.openFile`).
package enum SharedFile {
    /// Opens `path` without blocking and without following a symbolic link,
    /// then checks that it is a regular file owned by this user (or, with
    /// ``DirectorySharing/group``, by anyone, since members create files
    /// too) with no permission bits beyond the sharing's. Anything else is
    /// refused with ``TypedNotificationError/Code/insecureDirectory`` naming
    /// the path.
    package static func open(
        _ path: String, _ access: FileAccess, creating: FileOpenOptions = [], sharing: DirectorySharing
    ) -> Result<FileDescriptor, TypedNotificationError> {
        SharedPaths.openFile(path, access, creating: creating, modes: sharing.modes).mapError {
            SharedDirectory.failure($0)
        }
    }

    /// What is wrong with a file of a shared directory, or `nil`.
    package static func problem(with info: FileStatus, sharing: DirectorySharing) -> String? {
        SharedPaths.problem(with: info, modes: sharing.modes)
    }
}

extension RemovalWatch {
    /// The error to report if, at this look, one of the files is gone; `nil`
    /// when they are all there or, unless `throttled` is false, the last
    /// look was under a second ago.
    package mutating func removal(throttled: Bool = true) -> TypedNotificationError? {
        guard let gone = goneFile(throttled: throttled) else { return nil }
        return TypedNotificationError(
            code: .transportFailure,
            message:
                "\(gone) was removed or replaced while in use; nothing more can be received. Create the transport again"
        )
    }
}
