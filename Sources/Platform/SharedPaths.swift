/// The permissions a shared directory's sharing asks for: what the core's
/// `DirectorySharing` means to the file system.
package struct SharingModes: Sendable, Hashable {
    /// The mode of a directory made, and the most an existing one may have.
    package let directory: FilePermissions
    /// The mode of a file or socket made.
    package let file: FilePermissions
    /// Permission bits that must not be set on an existing file or directory.
    package let forbidden: FilePermissions
    /// Whether a file must belong to this user (members of the group make
    /// files too when it is shared with them).
    package let ownerOnly: Bool
    /// The sharing's name, for messages.
    package let name: String

    /// Modes with the given permissions.
    package init(
        directory: FilePermissions, file: FilePermissions, forbidden: FilePermissions, ownerOnly: Bool, name: String
    ) {
        (self.directory, self.file, self.forbidden, self.ownerOnly, self.name) = (
            directory, file, forbidden, ownerOnly, name
        )
    }
}

/// Why a shared path was refused or could not be made: the core turns it
/// into a `TypedNotificationError`.
package struct SharedPathFailure: Error, Sendable {
    /// What went wrong.
    package enum Kind: Sendable {
        /// Something is there that must not be trusted: a link, a file
        /// where a folder belongs, another user's, too open.
        case insecure
        /// A system call failed.
        case systemCall(Errno)
    }

    /// What went wrong.
    package let kind: Kind
    /// What was being done, and on which path.
    package let message: String
}

/// Creating and checking the directories and files a cross-process
/// transport shares, so that nothing is created in, or read from, a place
/// another user controls.
package enum SharedPaths {
    /// Creates `path` with the modes' directory mode if it is missing, then
    /// checks it: a real directory (not a symbolic link), owned by this
    /// user, with no permission bits beyond the modes'.
    ///
    /// The corresponding C functions are `mkdir`, `chmod` and `lstat`.
    package static func prepareDirectory(_ path: String, modes: SharingModes) throws(SharedPathFailure) {
        switch SystemCalls.makeDirectory(path, permissions: modes.directory) {
        case .success:
            // mkdir applies the umask; set the mode exactly, keeping the
            // set-group-ID bit a shared directory passes to the folders made
            // in it (so that everything below belongs to its group).
            var permissions = modes.directory
            if !modes.ownerOnly, case .success(let made) = SystemCalls.linkStatus(path),
                made.permissions.intersects(Self.setGroupID)
            {
                permissions = FilePermissions(rawValue: permissions.rawValue | Self.setGroupID.rawValue)
            }
            _ = SystemCalls.changeMode(path, permissions: permissions)
        case .failure(.fileExists):
            break
        case .failure(let error):
            throw SharedPathFailure(kind: .systemCall(error), message: "could not create the directory \(path)")
        }
        // Removed again since (another process's `rm -rf`): the caller's
        // chain starts over on `ENOENT`.
        guard try checkDirectory(path, modes: modes) else {
            throw SharedPathFailure(kind: .systemCall(.noSuchFile), message: "could not inspect \(path)")
        }
    }

    /// The set-group-ID bit: on a directory, what is made in it takes the
    /// directory's group.
    package static let setGroupID: FilePermissions = 0o2000

    /// Checks `path` as ``prepareDirectory(_:modes:)`` does, without making
    /// it: a real directory (not a symbolic link), owned by this user (or,
    /// for a group's modes, of a group this process is in, whoever made
    /// it), with no permission bits beyond the modes'. Returns `false` when
    /// nothing is there.
    ///
    /// The corresponding C function is `lstat`.
    package static func checkDirectory(_ path: String, modes: SharingModes) throws(SharedPathFailure) -> Bool {
        let info: FileStatus
        switch SystemCalls.linkStatus(path) {
        case .success(let found): info = found
        case .failure(.noSuchFile): return false
        case .failure(let error):
            throw SharedPathFailure(kind: .systemCall(error), message: "could not inspect \(path)")
        }
        guard info.kind == .directory else {
            throw SharedPathFailure(
                kind: .insecure,
                message:
                    "\(path) is not a directory (a symbolic link or a file is refused); remove it or choose another directory"
            )
        }
        guard info.owner == SystemProcess.userID || (!modes.ownerOnly && SystemProcess.isMember(ofGroup: info.group))
        else {
            let allowed =
                modes.ownerOnly
                ? "choose a directory of your own"
                : "a group-shared directory must belong to this user or to a group of this process"
            throw SharedPathFailure(
                kind: .insecure,
                message:
                    "\(path) belongs to user \(info.owner) and group \(info.group), not to this user (\(SystemProcess.userID)); \(allowed)"
            )
        }
        guard !info.permissions.intersects(modes.forbidden) else {
            throw SharedPathFailure(
                kind: .insecure,
                message:
                    "\(path) has mode \(info.permissions), open to more users than \(modes.name) allows; run chmod \(modes.directory) on it"
            )
        }
        return true
    }

    /// Opens `path` without blocking (a FIFO would block `open` until a
    /// writer came) and without following a symbolic link, then checks that
    /// it is a regular file owned by this user (or, for a group's modes, by
    /// anyone, since members create files too) with no permission bits
    /// beyond the modes'. Anything else is refused as insecure, naming the
    /// path.
    ///
    /// The corresponding C functions are `open` and `fstat`.
    package static func openFile(
        _ path: String, _ access: FileAccess, creating: FileOpenOptions = [], modes: SharingModes
    ) -> Result<FileDescriptor, SharedPathFailure> {
        let file: FileDescriptor
        let options = creating.union([.noFollow, .nonBlocking])
        switch SystemCalls.openFile(path, access, options: options, permissions: modes.file) {
        case .success(let opened): file = opened
        case .failure(.tooManySymbolicLinks):
            // O_NOFOLLOW on a symbolic link.
            return .failure(SharedPathFailure(kind: .insecure, message: "refused \(path): it is a symbolic link"))
        case .failure(let error):
            return .failure(SharedPathFailure(kind: .systemCall(error), message: "could not open \(path)"))
        }
        switch SystemCalls.fileStatus(file) {
        case .success(let info):
            if let problem = problem(with: info, modes: modes) {
                return .failure(SharedPathFailure(kind: .insecure, message: "refused \(path): it \(problem)"))
            }
            // A file this user made in a group-shared directory: `open`
            // applied the umask (0640 for 0660, under the usual 022), which
            // would shut the other members out.
            if !modes.ownerOnly, info.owner == SystemProcess.userID, info.permissions != modes.file {
                _ = SystemCalls.changeMode(file, permissions: modes.file)
            }
            return .success(file)
        case .failure(let error):
            return .failure(SharedPathFailure(kind: .systemCall(error), message: "could not inspect \(path)"))
        }
    }

    /// What is wrong with a file of a shared directory, or `nil`.
    package static func problem(with info: FileStatus, modes: SharingModes) -> String? {
        guard info.kind == .regular else {
            return "is \(info.kind), not a regular file"
        }
        if modes.ownerOnly && info.owner != SystemProcess.userID {
            return "belongs to user \(info.owner), not to this user (\(SystemProcess.userID))"
        }
        if info.permissions.intersects(modes.forbidden) {
            return
                "has mode \(info.permissions), open to more users than \(modes.name) allows; run chmod \(modes.file) on it"
        }
        return nil
    }

    /// `path` made absolute against the working directory, so that every
    /// process names the same files the same way (socket peers are compared
    /// by the path they are bound to). Trailing slashes are dropped.
    package static func absolute(_ path: String) -> String {
        var path = path
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        guard !path.hasPrefix("/") else { return path }
        guard let base = SystemCalls.currentDirectory() else { return path }
        if path == "." { return base }
        return (base == "/" ? "" : base) + "/" + (path.hasPrefix("./") ? String(path.dropFirst(2)) : path)
    }

}

extension SharedPaths {
    /// Every path that resolving the absolute `path` goes through, below
    /// the root, `path`'s own last part left out: each directory above it,
    /// each symbolic link on the way (a link to a link too), and the
    /// directories above where each leads. Renaming or removing any of
    /// them, or making a link lead elsewhere, changes what `path` names.
    /// Up to 40 links are followed, as the kernel does.
    ///
    /// The corresponding C functions are `lstat` and `readlink`, per part.
    package static func pathsTraversed(to path: String) -> [String] {
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
package struct RecordedPath: Sendable, Equatable {
    package let path: String
    package let identity: FileIdentity

    /// The identity of what `path` names now (not following a link), or `nil`.
    package init?(_ path: String) {
        guard case .success(let info) = SystemCalls.linkStatus(path) else { return nil }
        self.path = path
        identity = info.identity
    }

    /// Whether `path` still names the same file.
    package var isStillThere: Bool {
        guard case .success(let info) = SystemCalls.linkStatus(path) else { return false }
        return info.identity == identity
    }

}

/// The path watches a transport keeps on its directory and on what it
/// depends on, and the file each path named when watched (see
/// ``watch(_:of:mounted:)``).
package struct DirectoryWatches {
    /// Set by close: a watch made after it is cancelled at once.
    package var isClosed = false
    package var fixed: [PathWatch] = []
    /// The paths of `fixed`, and the file each named when watched (`nil`:
    /// none was there).
    package var paths: [(path: String, recorded: RecordedPath?)] = []
    /// A watch its owner replaces on its own: the socket transport's
    /// registration file, made again when a repair replaces the file.
    package var registration: PathWatch?

    /// No watches yet; `isClosed` for one that refuses new watches.
    package init(isClosed: Bool = false) { self.isClosed = isClosed }

    /// Ends every watch: a transport's close.
    package mutating func close() -> [PathWatch] {
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
    package var anyMoved: Bool { withLock { $0.paths }.contains { RecordedPath($0.path) != $0.recorded } }

    /// Watches each of `paths` for its events with the process's path
    /// watcher, and every mount (`mounted`, on the watcher's thread),
    /// replacing the watches there were. Returns whether a path was
    /// missing: it is watched once a look made it again, which compares
    /// each path with what it was, and nothing was there. The `extra`
    /// watches are neither compared nor allowed to be missing.
    package func watch(
        _ paths: [(String, PathEvents, @Sendable () -> Void)],
        andAlso extra: [(String, PathEvents, @Sendable () -> Void)] = [],
        mounted: @escaping @Sendable () -> Void
    ) throws(ChangeMonitorError) -> Bool {
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
            for watch in made { watch.cancel() }
            throw error
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
package struct RemovalWatch {
    private let files: [RecordedPath]
    private var lastLook = SystemClock.monotonicNanoseconds()

    /// Watches `files` as they are now.
    package init(_ files: [RecordedPath]) {
        self.files = files
    }

    /// The path of a file that is gone at this look, or `nil` when they
    /// are all there or, unless `throttled` is false, the last look was
    /// under a second ago.
    package mutating func goneFile(throttled: Bool = true) -> String? {
        let now = SystemClock.monotonicNanoseconds()
        guard !throttled || now &- lastLook >= 1_000_000_000 else { return nil }
        lastLook = now
        return files.first(where: { !$0.isStillThere })?.path
    }
}
