#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// An error number from a failed system call, with Swift names for the ones
/// this package reacts to.
@_spi(TransportAuthoring) public struct Errno: RawRepresentable, Error, Hashable, CustomStringConvertible, Sendable {
    /// The C `errno` value.
    @_spi(TransportAuthoring) public let rawValue: CInt

    /// Wraps an `errno` value.
    @_spi(TransportAuthoring) public init(rawValue: CInt) { self.rawValue = rawValue }

    /// The calling thread's `errno`, read at once.
    @_spi(TransportAuthoring) public static var current: Errno { Errno(rawValue: errno) }

    @_spi(TransportAuthoring) public static let interrupted = Errno(rawValue: EINTR)
    @_spi(TransportAuthoring) public static let wouldBlock = Errno(rawValue: EAGAIN)
    @_spi(TransportAuthoring) public static let noSuchFile = Errno(rawValue: ENOENT)
    @_spi(TransportAuthoring) public static let connectionRefused = Errno(rawValue: ECONNREFUSED)
    @_spi(TransportAuthoring) public static let fileExists = Errno(rawValue: EEXIST)
    @_spi(TransportAuthoring) public static let nameTooLong = Errno(rawValue: ENAMETOOLONG)
    @_spi(TransportAuthoring) public static let permissionDenied = Errno(rawValue: EACCES)
    @_spi(TransportAuthoring) public static let notPermitted = Errno(rawValue: EPERM)
    @_spi(TransportAuthoring) public static let noSpace = Errno(rawValue: ENOSPC)
    @_spi(TransportAuthoring) public static let fileTooLarge = Errno(rawValue: EFBIG)
    @_spi(TransportAuthoring) public static let quotaExceeded = Errno(rawValue: EDQUOT)
    @_spi(TransportAuthoring) public static let messageTooLong = Errno(rawValue: EMSGSIZE)
    @_spi(TransportAuthoring) public static let noSuchProcess = Errno(rawValue: ESRCH)
    @_spi(TransportAuthoring) public static let tooManySymbolicLinks = Errno(rawValue: ELOOP)
    @_spi(TransportAuthoring) public static let notADirectory = Errno(rawValue: ENOTDIR)
    @_spi(TransportAuthoring) public static let noBufferSpace = Errno(rawValue: ENOBUFS)
    @_spi(TransportAuthoring) public static let invalidArgument = Errno(rawValue: EINVAL)
    @_spi(TransportAuthoring) public static let notConnected = Errno(rawValue: ENOTCONN)
    @_spi(TransportAuthoring) public static let connectionReset = Errno(rawValue: ECONNRESET)
    @_spi(TransportAuthoring) public static let timedOut = Errno(rawValue: ETIMEDOUT)
    @_spi(TransportAuthoring) public static let brokenPipe = Errno(rawValue: EPIPE)
    @_spi(TransportAuthoring) public static let tooManyDescriptors = Errno(rawValue: EMFILE)
    @_spi(TransportAuthoring) public static let tooManyLinks = Errno(rawValue: EMLINK)

    /// The C library's text for the error, and its number.
    @_spi(TransportAuthoring) public var description: String {
        "\(String(cString: strerror(rawValue))) (errno \(rawValue))"
    }
}
