#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// A receive buffer that costs memory only for the bytes it has held: an
/// anonymous mapping whose pages the kernel supplies on first write. A
/// socket endpoint must be able to take its largest datagram (4 MiB), yet
/// almost all datagrams are small; a zero-filled array of that size made
/// every endpoint resident at 4 MiB.
///
/// Used by one thread at a time, as its owner is.
@_spi(TransportAuthoring) public final class LazyBuffer {
    /// Bytes kept resident after a large datagram; pages above are given back.
    @_spi(TransportAuthoring) public static let residentBytes = 64 * 1024

    private let base: UnsafeMutableRawPointer?
    /// The buffer's size in bytes.
    @_spi(TransportAuthoring) public let count: Int

    /// Maps `count` bytes, none of them resident yet. Where the mapping is
    /// refused, a heap allocation of the same size stands in.
    ///
    /// The corresponding C function is `mmap`.
    @_spi(TransportAuthoring) public init(count: Int) {
        self.count = count
        let mapped = mmap(nil, count, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if let mapped, mapped != MAP_FAILED {
            base = mapped
            isMapped = true
        } else {
            base = UnsafeMutableRawPointer.allocate(byteCount: count, alignment: 16)
            isMapped = false
        }
    }

    private let isMapped: Bool

    deinit {
        if isMapped {
            _ = munmap(base, count)
        } else {
            base?.deallocate()
        }
    }

    /// The whole buffer.
    @_spi(TransportAuthoring) public var bytes: UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(start: base, count: count)
    }

    /// After a datagram of `length` bytes held in `region` of the buffer:
    /// gives back the pages of that region above its first ``residentBytes``
    /// that it made resident, so one large datagram does not keep an
    /// endpoint large.
    ///
    /// The corresponding C function is `madvise(MADV_DONTNEED)`.
    @_spi(TransportAuthoring) public func shrink(region: Range<Int>, after length: Int) {
        guard isMapped, length > Self.residentBytes, let base else { return }
        let page = Int(sysconf(CInt(_SC_PAGESIZE)))
        let start = (region.lowerBound + Self.residentBytes + page - 1) / page * page
        let end = min(region.upperBound, count) / page * page
        guard start < end else { return }
        _ = madvise(base + start, end - start, MADV_DONTNEED)
    }
}
