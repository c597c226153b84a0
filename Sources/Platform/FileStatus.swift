#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Permission bits of a file or directory (`0o600`, say), without its type.
package struct FilePermissions: RawRepresentable, Hashable, Sendable, ExpressibleByIntegerLiteral,
    CustomStringConvertible
{
    /// The bits, at most `0o7777`.
    package let rawValue: UInt32

    /// Wraps permission bits; bits above `0o7777` are dropped.
    package init(rawValue: UInt32) { self.rawValue = rawValue & 0o7777 }

    /// Permission bits from an octal literal: `0o600`.
    package init(integerLiteral value: UInt32) { self.init(rawValue: value) }

    /// Whether any of `other`'s bits are set here too.
    package func intersects(_ other: FilePermissions) -> Bool { rawValue & other.rawValue != 0 }

    /// Octal, as `chmod` takes it: `600`.
    package var description: String { String(rawValue, radix: 8) }

    var mode: mode_t { mode_t(rawValue) }
}

/// How ``SystemCalls/openFile(_:_:options:permissions:)`` opens a file: read,
/// write or both.
package enum FileAccess: Sendable {
    /// `O_RDONLY`.
    case readOnly
    /// `O_WRONLY`.
    case writeOnly
    /// `O_RDWR`.
    case readWrite

    var flags: CInt {
        switch self {
        case .readOnly: O_RDONLY
        case .writeOnly: O_WRONLY
        case .readWrite: O_RDWR
        }
    }
}

/// What else ``SystemCalls/openFile(_:_:options:permissions:)`` does; every
/// file is opened close-on-exec.
package struct FileOpenOptions: OptionSet, Sendable {
    /// The options as bits of this type's own; the C flags are built from them.
    package let rawValue: UInt8

    /// Wraps option bits.
    package init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Creates the file when it does not exist (`O_CREAT`).
    package static let create = FileOpenOptions(rawValue: 1 << 0)
    /// With ``create``: fails with ``Errno/fileExists`` when it does exist (`O_EXCL`).
    package static let exclusive = FileOpenOptions(rawValue: 1 << 1)
    /// Fails with ``Errno/tooManySymbolicLinks`` when the path's last part is
    /// a symbolic link (`O_NOFOLLOW`).
    package static let noFollow = FileOpenOptions(rawValue: 1 << 2)
    /// Never blocks opening it, on a FIFO say (`O_NONBLOCK`).
    package static let nonBlocking = FileOpenOptions(rawValue: 1 << 3)

    var flags: CInt {
        var flags = O_CLOEXEC
        if contains(.create) { flags |= O_CREAT }
        if contains(.exclusive) { flags |= O_EXCL }
        if contains(.noFollow) { flags |= O_NOFOLLOW }
        if contains(.nonBlocking) { flags |= O_NONBLOCK }
        return flags
    }
}

/// What kind of file a path names.
package enum FileKind: Sendable, Equatable, CustomStringConvertible {
    case regular
    case directory
    case socket
    case symbolicLink
    case fifo
    case device
    case other

    init(mode: mode_t) {
        switch mode & S_IFMT {
        case S_IFREG: self = .regular
        case S_IFDIR: self = .directory
        case S_IFSOCK: self = .socket
        case S_IFLNK: self = .symbolicLink
        case S_IFIFO: self = .fifo
        case S_IFCHR, S_IFBLK: self = .device
        default: self = .other
        }
    }

    /// With its article, for messages: "a directory".
    package var description: String {
        switch self {
        case .regular: "a regular file"
        case .directory: "a directory"
        case .socket: "a socket"
        case .symbolicLink: "a symbolic link"
        case .fifo: "a FIFO"
        case .device: "a device"
        case .other: "an unknown kind of file"
        }
    }
}

/// Which file an open descriptor or a path is: equal for the same file on the
/// same device, whatever its name now.
package struct FileIdentity: Hashable, Sendable {
    /// The device the file is on.
    package var device: UInt64
    /// The file's inode number on that device.
    package var inode: UInt64
}

/// A path in the form C functions take it, NUL-terminated, made once.
package struct SystemPath: Sendable {
    /// The path's bytes and a NUL.
    package let bytes: ContiguousArray<CChar>

    /// `path` in C form.
    package init(_ path: String) { bytes = path.utf8CString }
}

/// What a reader or writer of a growing file looks at between its reads and
/// writes: its size, its names and which file it is, never its timestamps
/// (see ``SystemCalls/fileExtent(_:)``).
package struct FileExtent: Sendable, Equatable {
    /// Its size in bytes.
    package var size: Int
    /// Names it has: 0 once an open file was removed.
    package var links: Int
    /// Which file it is.
    package var identity: FileIdentity
}

/// The parts of `stat` this package reads, in Swift types.
package struct FileStatus: Sendable, Equatable {
    /// Regular file, directory, socket, …
    package var kind: FileKind
    /// Its permission bits.
    package var permissions: FilePermissions
    /// The user that owns it.
    package var owner: UInt32
    /// The group it belongs to.
    package var group: UInt32
    /// Its size in bytes.
    package var size: Int
    /// Names it has: 0 once an open file was removed.
    package var links: Int
    /// Which file it is.
    package var identity: FileIdentity
    /// When it was last written, in nanoseconds since 1970.
    package var modifiedNanoseconds: Int64

    init(_ info: stat) {
        kind = FileKind(mode: info.st_mode)
        permissions = FilePermissions(rawValue: UInt32(info.st_mode))
        owner = UInt32(info.st_uid)
        group = UInt32(info.st_gid)
        size = Int(info.st_size)
        links = Int(info.st_nlink)
        identity = FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        #if canImport(Darwin)
            let time = info.st_mtimespec
        #else
            let time = info.st_mtim
        #endif
        modifiedNanoseconds = Int64(time.tv_sec) &* 1_000_000_000 &+ Int64(time.tv_nsec)
    }

    /// When it was last written, in whole seconds since 1970.
    package var modifiedSeconds: Int64 { modifiedNanoseconds / 1_000_000_000 }
}
