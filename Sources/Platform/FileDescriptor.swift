#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// An open file descriptor that is closed exactly once: when its owner
/// releases it.
@_spi(TransportAuthoring) public struct FileDescriptor: ~Copyable, Sendable {
    /// The descriptor number; valid while this value lives.
    @_spi(TransportAuthoring) public let rawValue: CInt

    /// Takes ownership of an open descriptor.
    @_spi(TransportAuthoring) public init(adopting rawValue: CInt) {
        self.rawValue = rawValue
    }

    deinit {
        // Linux and Darwin release the descriptor even when close reports an
        // error, so retrying on EINTR could close a descriptor reused meanwhile.
        _ = close(rawValue)
    }
}
