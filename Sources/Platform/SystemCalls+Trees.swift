#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

extension SystemCalls {
    /// How many levels below a directory ``removeTree(_:)`` goes: a tree
    /// deeper than that (only a hostile process makes one in a folder of
    /// ours) keeps what is below, and its directory stays.
    package static let deepestRemovedTree = 16

    /// Removes the directory at `path` and everything in it, never following
    /// a symbolic link: a link in the tree is removed as a link, and `path`
    /// itself must be a directory, not a link to one. Each entry is named
    /// by its bytes, so a name that is not UTF-8 goes too, and the tree is
    /// walked through descriptors, so a directory swapped for a link while
    /// it is walked is never followed either.
    ///
    /// Fails with what the last step that failed reported: `ENOENT` when
    /// there was nothing at `path`, `ENOTDIR` or `ELOOP` for a file or a
    /// link there, `ENOTEMPTY` when something in it stayed.
    ///
    /// The corresponding C functions are `open`, `openat`, `fdopendir`,
    /// `readdir`, `unlinkat` and `rmdir`.
    package static func removeTree(_ path: String) -> Result<Void, Errno> {
        let flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
        switch retrying({ open(path, flags) }) {
        case .failure(let error):
            return .failure(error)
        case .success(let raw):
            let directory = FileDescriptor(adopting: raw)
            removeContents(of: directory, levelsLeft: deepestRemovedTree)
            return removeDirectory(path)
        }
    }

    /// Removes the last of `components` from the folders the others name
    /// under `base`, reaching each folder, `base` included, through a
    /// descriptor opened without following a symbolic link: a folder that
    /// is a link, or is swapped for one while this runs (by anyone who may
    /// write to `base`), is never followed, so nothing outside `base` goes.
    /// With `tree`, the last component is a directory removed with all it
    /// holds, as ``removeTree(_:)`` removes one; otherwise it is unlinked,
    /// whatever it is but a directory (a link goes as a link).
    ///
    /// Fails with `ELOOP` or `ENOTDIR` when `base` or a folder on the way is
    /// a link or no folder, `ENOENT` when something is missing, `ENOTEMPTY`
    /// when something in a tree stayed, and `EINVAL`, calling nothing, for
    /// a component that is empty, `.`, `..` or holds a `/`.
    ///
    /// The corresponding C functions are `open`, `openat` and `unlinkat`.
    package static func removeEntry(_ components: [String], under base: String, tree: Bool = false) -> Result<
        Void, Errno
    > {
        guard let last = components.last, !components.contains(where: climbs) else {
            return .failure(.invalidArgument)
        }
        let folder: FileDescriptor
        do throws(Errno) {
            folder = try openFolder(components.dropLast(), under: base).get()
        } catch {
            return .failure(error)
        }
        return removeEntry(last, in: folder, tree: tree)
    }

    /// Removes the entry `name` of `folder`: a directory with all it holds
    /// with `tree`, else unlinked.
    private static func removeEntry(_ name: String, in folder: borrowing FileDescriptor, tree: Bool) -> Result<
        Void, Errno
    > {
        let parent = folder.rawValue
        guard tree else {
            return retrying { unlinkat(parent, name, 0) }.map { _ in }
        }
        let flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
        switch retrying({ openat(parent, name, flags) }) {
        case .failure(let error): return .failure(error)
        case .success(let raw):
            let inner = FileDescriptor(adopting: raw)
            removeContents(of: inner, levelsLeft: deepestRemovedTree)
            return retrying { unlinkat(parent, name, AT_REMOVEDIR) }.map { _ in }
        }
    }

    /// Opens the folder `components` name under `base`, each step (`base`
    /// included) without following a symbolic link: what is done relative
    /// to it stays inside it, whatever is swapped for a link later.
    ///
    /// The corresponding C functions are `open` and `openat`.
    package static func openFolder(_ components: some Collection<String>, under base: String) -> Result<
        FileDescriptor, Errno
    > {
        let flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
        var folder: FileDescriptor
        switch retrying({ open(base, flags) }) {
        case .failure(let error): return .failure(error)
        case .success(let raw): folder = FileDescriptor(adopting: raw)
        }
        for component in components {
            guard !climbs(component) else { return .failure(.invalidArgument) }
            switch retrying({ openat(folder.rawValue, component, flags) }) {
            case .failure(let error): return .failure(error)
            case .success(let raw): folder = FileDescriptor(adopting: raw)
            }
        }
        return .success(folder)
    }

    /// Whether `component` could name anything but an entry of its folder.
    private static func climbs(_ component: String) -> Bool {
        component.isEmpty || component == "." || component == ".." || component.contains("/")
    }

    /// Names in the folder `folder` is open on, without `.` and `..`, as
    /// ``directoryEntries(_:)`` gives them (a name that is not UTF-8
    /// repaired).
    ///
    /// The corresponding C functions are `fdopendir`, `readdir` and `closedir`.
    package static func directoryEntries(of folder: borrowing FileDescriptor) -> [String] {
        entryNames(of: folder).map { name in
            name.withUnsafeBufferPointer { bytes in bytes.baseAddress.map { String(cString: $0) } ?? "" }
        }
    }

    /// Opens the entry `name` of `folder`, close-on-exec, creating it with
    /// `permissions` when `options` say so.
    ///
    /// The corresponding C function is `openat`.
    package static func openFile(
        _ name: String, in folder: borrowing FileDescriptor, _ access: FileAccess, options: FileOpenOptions = [],
        permissions: FilePermissions = 0o600
    ) -> Result<FileDescriptor, Errno> {
        guard !climbs(name) else { return .failure(.invalidArgument) }
        let flags = access.flags | options.flags
        let parent = folder.rawValue
        return retrying { openat(parent, name, flags, permissions.mode) }.map(FileDescriptor.init(adopting:))
    }

    /// Makes `path` another name of the entry `name` of `folder`, failing
    /// with `EEXIST` when `path` exists, whatever it is.
    ///
    /// The corresponding C function is `linkat`.
    package static func hardLink(_ name: String, in folder: borrowing FileDescriptor, to path: String) -> Result<
        Void, Errno
    > {
        guard !climbs(name) else { return .failure(.invalidArgument) }
        let parent = folder.rawValue
        return retrying { linkat(parent, name, AT_FDCWD, path, 0) }.map { _ in }
    }

    /// Makes the entry `name` of `folder` another name of the file at
    /// `path` (a link there is linked as a link, never followed), failing
    /// with `EEXIST` when `name` exists.
    ///
    /// The corresponding C function is `linkat`.
    package static func hardLink(_ path: String, toEntry name: String, in folder: borrowing FileDescriptor)
        -> Result<Void, Errno>
    {
        guard !climbs(name) else { return .failure(.invalidArgument) }
        let parent = folder.rawValue
        return retrying { linkat(AT_FDCWD, path, parent, name, 0) }.map { _ in }
    }

    /// Makes the entry `other` of `folder` another name of its entry `name`.
    ///
    /// The corresponding C function is `linkat`.
    package static func hardLink(_ name: String, asEntry other: String, in folder: borrowing FileDescriptor)
        -> Result<Void, Errno>
    {
        guard !climbs(name), !climbs(other) else { return .failure(.invalidArgument) }
        let parent = folder.rawValue
        return retrying { linkat(parent, name, parent, other, 0) }.map { _ in }
    }

    /// Renames the entry `name` of `folder` to `path`, replacing what is
    /// there as `rename` does.
    ///
    /// The corresponding C function is `renameat`.
    package static func renameFile(_ name: String, in folder: borrowing FileDescriptor, to path: String) -> Result<
        Void, Errno
    > {
        guard !climbs(name) else { return .failure(.invalidArgument) }
        let parent = folder.rawValue
        return retrying { renameat(parent, name, AT_FDCWD, path) }.map { _ in }
    }

    /// Renames the entry `name` of `folder` to its entry `other`, replacing
    /// what is there as `rename` does.
    ///
    /// The corresponding C function is `renameat`.
    package static func renameFile(_ name: String, toEntry other: String, in folder: borrowing FileDescriptor)
        -> Result<Void, Errno>
    {
        guard !climbs(name), !climbs(other) else { return .failure(.invalidArgument) }
        let parent = folder.rawValue
        return retrying { renameat(parent, name, parent, other) }.map { _ in }
    }

    /// Unlinks the entry `name` of `folder` (a link goes as a link).
    ///
    /// The corresponding C function is `unlinkat`.
    package static func removeFile(_ name: String, in folder: borrowing FileDescriptor) -> Result<Void, Errno> {
        guard !climbs(name) else { return .failure(.invalidArgument) }
        return retrying { unlinkat(folder.rawValue, name, 0) }.map { _ in }
    }

    /// The entry `name` of `folder`, not followed if it is a link.
    ///
    /// The corresponding C function is `fstatat`.
    package static func linkStatus(_ name: String, in folder: borrowing FileDescriptor) -> Result<FileStatus, Errno> {
        guard !climbs(name) else { return .failure(.invalidArgument) }
        var info = stat()
        return retrying { fstatat(folder.rawValue, name, &info, AT_SYMLINK_NOFOLLOW) }.map { _ in FileStatus(info) }
    }

    /// Removes what `directory` holds, as deep as `levelsLeft` allows; what
    /// cannot be removed stays, and its directory's removal says so.
    private static func removeContents(of directory: borrowing FileDescriptor, levelsLeft: Int) {
        guard levelsLeft > 0 else { return }
        // Every name first, then the removals: whether `readdir` still
        // lists what was removed after it was opened is unspecified.
        for name in entryNames(of: directory) {
            name.withUnsafeBufferPointer { bytes in
                guard let cName = bytes.baseAddress else { return }
                guard case .failure(let error) = retrying({ unlinkat(directory.rawValue, cName, 0) }) else { return }
                // A directory: Linux says EISDIR, Apple platforms EPERM.
                guard error.rawValue == EISDIR || error == .notPermitted else { return }
                let flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
                guard case .success(let raw) = retrying({ openat(directory.rawValue, cName, flags) }) else { return }
                let inner = FileDescriptor(adopting: raw)
                removeContents(of: inner, levelsLeft: levelsLeft - 1)
                _ = retrying { unlinkat(directory.rawValue, cName, AT_REMOVEDIR) }
            }
        }
    }

    /// The names in `directory`, each its bytes and a NUL, without `.` and
    /// `..`; none when it cannot be listed.
    private static func entryNames(of directory: borrowing FileDescriptor) -> [[CChar]] {
        // `fdopendir` owns the descriptor it is given and `closedir` closes
        // it: it gets a duplicate.
        guard case .success(let duplicate) = retrying({ dup(directory.rawValue) }) else { return [] }
        guard let stream = fdopendir(duplicate) else {
            _ = close(duplicate)
            return []
        }
        defer { closedir(stream) }
        // `fdopendir` reads from the descriptor's offset: from the start.
        rewinddir(stream)
        var names: [[CChar]] = []
        while let entry = readdir(stream) {
            // Read in place, up to its NUL (see `directoryEntries`).
            let start = UnsafeRawPointer(entry).advanced(by: nameOffset).assumingMemoryBound(to: CChar.self)
            let length = strlen(start)
            let name = Array(UnsafeBufferPointer(start: start, count: length + 1))
            if name == [46, 0] || name == [46, 46, 0] { continue }
            names.append(name)
        }
        return names
    }
}
