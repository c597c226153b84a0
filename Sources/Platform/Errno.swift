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
package struct Errno: RawRepresentable, Error, Hashable, CustomStringConvertible, Sendable {
    /// The C `errno` value.
    package let rawValue: CInt

    /// Wraps an `errno` value.
    package init(rawValue: CInt) { self.rawValue = rawValue }

    /// The calling thread's `errno`, read at once.
    package static var current: Errno { Errno(rawValue: errno) }

    package static let interrupted = Errno(rawValue: EINTR)
    package static let wouldBlock = Errno(rawValue: EAGAIN)
    package static let noSuchFile = Errno(rawValue: ENOENT)
    package static let connectionRefused = Errno(rawValue: ECONNREFUSED)
    package static let fileExists = Errno(rawValue: EEXIST)
    package static let nameTooLong = Errno(rawValue: ENAMETOOLONG)
    package static let permissionDenied = Errno(rawValue: EACCES)
    package static let notPermitted = Errno(rawValue: EPERM)
    package static let noSpace = Errno(rawValue: ENOSPC)
    package static let fileTooLarge = Errno(rawValue: EFBIG)
    package static let quotaExceeded = Errno(rawValue: EDQUOT)
    package static let messageTooLong = Errno(rawValue: EMSGSIZE)
    package static let noSuchProcess = Errno(rawValue: ESRCH)
    package static let tooManySymbolicLinks = Errno(rawValue: ELOOP)
    package static let notADirectory = Errno(rawValue: ENOTDIR)
    package static let noBufferSpace = Errno(rawValue: ENOBUFS)
    package static let invalidArgument = Errno(rawValue: EINVAL)
    package static let notConnected = Errno(rawValue: ENOTCONN)
    package static let connectionReset = Errno(rawValue: ECONNRESET)
    package static let timedOut = Errno(rawValue: ETIMEDOUT)
    package static let brokenPipe = Errno(rawValue: EPIPE)
    package static let tooManyDescriptors = Errno(rawValue: EMFILE)
    package static let tooManyLinks = Errno(rawValue: EMLINK)

    /// The C library's text for the error, and its number.
    package var description: String {
        "\(String(cString: strerror(rawValue))) (errno \(rawValue))"
    }
}
