/// The bytes of a Unix-domain socket address (`struct sockaddr_un`) for a
/// path, in Linux's layout or Darwin's: a pure value, so the tests on Linux
/// build and read Darwin's addresses too.
///
/// The two layouts differ where it matters for an app group container, whose
/// path alone is 84 bytes on an iPhone:
/// - **Linux** has a 2-byte family and a 108-byte `sun_path`; the kernel
///   refuses a longer path. Longer ones are reached through a directory
///   descriptor instead (see ``SystemCalls/bindSocket(_:toSocketPath:)``).
/// - **Darwin** declares a 104-byte `sun_path`, but xnu reads the path's
///   length from `sun_len`, the address's first byte, and accepts addresses up
///   to `SOCK_MAXADDRLEN` (255 bytes): a path of up to 252 bytes, with its NUL.
package struct UnixSocketAddress: Sendable, Equatable {
    /// Which system's `struct sockaddr_un`.
    package enum Layout: Sendable, Equatable {
        /// `sa_family_t sun_family` (2 bytes), then `char sun_path[108]`.
        case linux
        /// `uint8_t sun_len`, `uint8_t sun_family`, then the path, as long
        /// as `sun_len` (at most `SOCK_MAXADDRLEN`, 255) says.
        case darwin

        /// This system's layout.
        package static var current: Layout {
            #if canImport(Darwin)
                .darwin
            #else
                .linux
            #endif
        }

        /// The longest path an address of this layout carries, in bytes,
        /// not counting the NUL that ends it.
        package var maximumPathLength: Int {
            switch self {
            case .linux: 107  // sun_path's 108 bytes, with the NUL
            case .darwin: 252  // SOCK_MAXADDRLEN (255) minus sun_len, sun_family and the NUL
            }
        }

        /// Bytes before the path.
        var headerLength: Int { 2 }
    }

    /// `AF_UNIX`, 1 on both systems.
    static let family: UInt8 = 1

    /// The address, as `bind` and `connect` take it; its count is the length
    /// to pass with it.
    package let bytes: [UInt8]

    /// The address of `path` in `layout`.
    ///
    /// - Throws: ``Errno/nameTooLong`` for a path longer than the layout's
    ///   ``Layout/maximumPathLength``; ``Errno/invalidArgument`` for an empty
    ///   path or one with a NUL in it.
    package init(path: String, layout: Layout = .current) throws(Errno) {
        let path = Array(path.utf8)
        guard !path.isEmpty, !path.contains(0) else { throw .invalidArgument }
        guard path.count <= layout.maximumPathLength else { throw .nameTooLong }
        let length = layout.headerLength + path.count + 1
        var bytes: [UInt8]
        switch layout {
        case .linux:
            // sa_family_t in the machine's byte order: every Linux Swift runs on is little-endian.
            bytes = [Self.family, 0]
        case .darwin:
            bytes = [UInt8(length), Self.family]
        }
        bytes += path
        bytes.append(0)
        self.bytes = bytes
    }

    /// The path in an address that `getpeername` or `getsockname` filled in:
    /// `bytes` up to the `length` the call returned. `nil` for an unbound
    /// socket or an abstract one (Linux), for a family other than `AF_UNIX`,
    /// and for an address cut short by the buffer (`length` past its end),
    /// since a cut path names another file or none.
    package static func path(in bytes: some Collection<UInt8>, length: Int, layout: Layout = .current) -> String? {
        let bytes = Array(bytes)
        guard length <= bytes.count, length > layout.headerLength else { return nil }
        let declared: Int
        switch layout {
        case .linux:
            guard bytes[0] == family, bytes[1] == 0 else { return nil }
            declared = length
        case .darwin:
            guard bytes[1] == family else { return nil }
            // sun_len is the whole address's length: longer than what was
            // returned means the buffer cut it. 0 means "as long as returned".
            guard Int(bytes[0]) <= length else { return nil }
            declared = bytes[0] == 0 ? length : Int(bytes[0])
        }
        let path = bytes[layout.headerLength..<declared].prefix { $0 != 0 }
        guard !path.isEmpty else { return nil }
        return String(decoding: path, as: UTF8.self)
    }
}
