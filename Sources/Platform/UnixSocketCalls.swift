import CTypedNotifications

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// Binding and connecting Unix-domain sockets at paths of any length the
/// system allows, and connecting to exactly the socket file that was checked.
extension SystemCalls {
    /// Whether `/proc/self/fd/N` names this process's open descriptors
    /// (Linux with /proc mounted): then a socket path of any length is
    /// reached through a descriptor of its directory, and a checked socket
    /// file through a descriptor of the file itself.
    package static let descriptorPathsAvailable: Bool = {
        #if os(Linux)
            var info = stat()
            return stat("/proc/self/fd", &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
        #else
            return false
        #endif
    }()

    /// The longest socket path `bind` and `connect` reach here, in bytes:
    /// on Linux with /proc any path the file system takes (`PATH_MAX`, 4,095
    /// bytes); on Darwin 252 (an address of `SOCK_MAXADDRLEN`, see
    /// ``UnixSocketAddress``); 107 elsewhere.
    package static var maximumSocketPathLength: Int {
        descriptorPathsAvailable ? maximumPathLength : UnixSocketAddress.Layout.current.maximumPathLength
    }

    /// The longest path a file can have here, in bytes (`PATH_MAX` without
    /// its NUL): 4,095 on Linux, 1,023 on Apple platforms.
    package static var maximumPathLength: Int { Int(PATH_MAX) - 1 }

    /// Calls `body` with a path to `path` that fits in a socket address: the
    /// path itself when it fits, else (Linux) `/proc/self/fd/N/NAME` for a
    /// descriptor N of its directory (not a symbolic link), open for the call only.
    static func withAddressable<T>(_ path: String, _ body: (UnixSocketAddress) -> Result<T, Errno>) -> Result<T, Errno>
    {
        if let address = try? UnixSocketAddress(path: path) { return body(address) }
        guard path.utf8.count > UnixSocketAddress.Layout.current.maximumPathLength else {
            return .failure(.invalidArgument)
        }
        guard descriptorPathsAvailable, let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else {
            return .failure(.nameTooLong)
        }
        let directory = slash == path.utf8.startIndex ? "/" : String(path[..<slash])
        let name = String(path[path.index(after: slash)...])
        return retrying { ctn_open_location(-1, directory, 1) }.flatMap { raw in
            let opened = FileDescriptor(adopting: raw)
            do throws(Errno) {
                let address = try UnixSocketAddress(path: "/proc/self/fd/\(opened.rawValue)/" + name)
                return body(address)
            } catch {
                return .failure(error)
            }
        }
    }

    /// Binds a socket to `path`, creating the socket file there, at any
    /// length ``maximumSocketPathLength`` allows; ``Errno/nameTooLong`` beyond.
    ///
    /// The corresponding C function is `bind`.
    package static func bindSocket(_ descriptor: borrowing FileDescriptor, toSocketPath path: String) -> Result<
        Void, Errno
    > {
        bindSocket(raw: descriptor.rawValue, toSocketPath: path)
    }

    /// ``bindSocket(_:toSocketPath:)`` for a descriptor this layer does not own.
    ///
    /// The corresponding C function is `bind`.
    package static func bindSocket(raw descriptor: CInt, toSocketPath path: String) -> Result<Void, Errno> {
        withAddressable(path) { address in
            address.bytes.withUnsafeBytes { raw in
                retrying {
                    bind(descriptor, raw.baseAddress?.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
                }.map { _ in }
            }
        }
    }

    /// Connects a socket to the socket file at `path` (following links, as
    /// `connect` does), at any length ``maximumSocketPathLength`` allows.
    ///
    /// The corresponding C function is `connect`.
    package static func connectSocket(_ descriptor: borrowing FileDescriptor, toSocketPath path: String) -> Result<
        Void, Errno
    > {
        connectSocket(raw: descriptor.rawValue, toSocketPath: path)
    }

    /// ``connectSocket(_:toSocketPath:)`` for a descriptor this layer does not own.
    ///
    /// The corresponding C function is `connect`.
    package static func connectSocket(raw descriptor: CInt, toSocketPath path: String) -> Result<Void, Errno> {
        withAddressable(path) { address in connectAddress(raw: descriptor, to: address) }
    }

    static func connectAddress(raw descriptor: CInt, to address: UnixSocketAddress) -> Result<Void, Errno> {
        address.bytes.withUnsafeBytes { raw in
            retrying {
                connect(descriptor, raw.baseAddress?.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
            }.map { _ in }
        }
    }

    /// Connects a socket to the socket file at `path` only if neither it nor
    /// the directory it is in is a symbolic link and `accept` approves of
    /// its status, and makes sure the connection reaches that very file.
    /// Returns the status accepted, or `nil` for a refusal.
    ///
    /// On Linux the directory and then the file are opened without
    /// following a link (`O_PATH | O_NOFOLLOW`, the file relative to the
    /// directory's descriptor), the file is checked with `fstat`, and the
    /// connect goes through `/proc/self/fd/N`, which names that open file and
    /// nothing else: a link or another socket swapped in after the check is
    /// never reached. Elsewhere (Darwin: no `O_PATH`, no `/proc`) the
    /// directory and the file are checked with `lstat`, the file is connected
    /// to by path, and after `connect` the file the peer is bound to
    /// (`getpeername`, then `stat`) must be the same device and inode: a link
    /// to a socket bound anywhere else is refused. What that cannot refuse is
    /// a process that may write the directory racing a socket it bound itself
    /// in and back out; it gains nothing it could not have by observing.
    ///
    /// `throughDescriptor` chooses the way; tests pass `false` to run
    /// Darwin's on Linux (in a directory short enough for `sun_path`).
    ///
    /// The corresponding C functions are `open`, `openat`, `fstat` and
    /// `connect` (Linux), or `lstat`, `connect`, `getpeername` and `stat`.
    package static func connectSocket(
        _ descriptor: borrowing FileDescriptor, toSocketFile path: String,
        throughDescriptor: Bool = descriptorPathsAvailable, accepting accept: (FileStatus) -> Bool
    ) -> Result<FileStatus?, Errno> {
        let socket = descriptor.rawValue
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return .failure(.invalidArgument) }
        let directory = slash == path.utf8.startIndex ? "/" : String(path[..<slash])
        let name = String(path[path.index(after: slash)...])
        if throughDescriptor {
            let inDirectory = retrying { ctn_open_location(-1, directory, 1) }.flatMap { rawDirectory in
                let pinnedDirectory = FileDescriptor(adopting: rawDirectory)
                return retrying { ctn_open_location(pinnedDirectory.rawValue, name, 0) }
            }
            return refusingLinks(inDirectory).flatMap { opened in
                guard let raw = opened else { return .success(nil) }
                let pinned = FileDescriptor(adopting: raw)
                return fileStatus(pinned).flatMap { checked in
                    guard checked.kind == .socket, accept(checked) else { return .success(nil) }
                    do throws(Errno) {
                        let address = try UnixSocketAddress(path: "/proc/self/fd/\(pinned.rawValue)")
                        return connectAddress(raw: socket, to: address).map { checked }
                    } catch {
                        return .failure(error)
                    }
                }
            }
        }
        return linkStatus(directory).flatMap { directoryStatus in
            guard directoryStatus.kind == .directory else { return .success(nil) }
            return linkStatus(path).flatMap { checked in
                guard checked.kind == .socket, accept(checked) else { return .success(nil) }
                return connectSocket(raw: socket, toSocketPath: path).flatMap {
                    switch peerSocketPath(socket) {
                    case .success(let peer?):
                        guard case .success(let bound) = status(peer), bound.identity == checked.identity else {
                            return .success(nil)
                        }
                        return .success(checked)
                    case .success(nil):
                        return .success(nil)
                    case .failure(let error):
                        return .failure(error)
                    }
                }
            }
        }
    }

    /// A descriptor, or `nil` (refused) where a directory on the way was a
    /// symbolic link or not a directory at all; other failures as they are.
    private static func refusingLinks(_ opened: Result<CInt, Errno>) -> Result<CInt?, Errno> {
        switch opened {
        case .success(let raw): .success(raw)
        case .failure(.tooManySymbolicLinks), .failure(.notADirectory): .success(nil)
        case .failure(let error): .failure(error)
        }
    }

    /// The path the peer of a connected Unix socket is bound to, as that
    /// peer spelled it; `nil` for an unbound or abstract peer, or an address
    /// longer than any this system makes.
    ///
    /// The corresponding C function is `getpeername`.
    static func peerSocketPath(_ descriptor: CInt) -> Result<String?, Errno> {
        // SOCK_MAXADDRLEN (255) is the longest address either system returns.
        var buffer = [UInt8](repeating: 0, count: 256)
        var length = socklen_t(buffer.count)
        return buffer.withUnsafeMutableBytes { raw in
            retrying {
                getpeername(descriptor, raw.baseAddress?.assumingMemoryBound(to: sockaddr.self), &length)
            }
        }.map { _ in UnixSocketAddress.path(in: buffer, length: Int(length)) }
    }
}
