#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// The clocks a notification is stamped with.
///
/// Both read `clock_gettime`, so stamps taken in different processes on one
/// host are comparable: `CLOCK_MONOTONIC` is system-wide.
@_spi(TransportAuthoring) public enum SystemClock {
    /// Nanoseconds on the system-wide monotonic clock.
    ///
    /// The corresponding C function is `clock_gettime(CLOCK_MONOTONIC)`.
    @inlinable
    @_spi(TransportAuthoring) public static func monotonicNanoseconds() -> UInt64 {
        read(CLOCK_MONOTONIC).map { UInt64(clamping: $0) } ?? 0
    }

    /// Nanoseconds since 1970-01-01 00:00:00 UTC on the wall clock.
    ///
    /// The corresponding C function is `clock_gettime(CLOCK_REALTIME)`.
    @inlinable
    @_spi(TransportAuthoring) public static func wallClockNanoseconds() -> Int64 {
        read(CLOCK_REALTIME) ?? 0
    }

    @usableFromInline
    static func read(_ clock: clockid_t) -> Int64? {
        var spec = timespec()
        // clock_gettime fails only for an unknown clock id; both ids above are
        // required by POSIX, so a failure here means a broken libc and the
        // stamp falls back to zero rather than trapping.
        guard clock_gettime(clock, &spec) == 0 else { return nil }
        let (seconds, overflow) = Int64(spec.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? nil : seconds &+ Int64(spec.tv_nsec)
    }
}
