#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// Which thread is running, so a thread can tell whether it is about to wait
/// for itself.
package struct ThreadIdentity: Sendable, Hashable {
    // pthread_t as a number: an integer on Linux, a pointer on Darwin.
    private let bits: UInt

    /// The calling thread.
    ///
    /// The corresponding C function is `pthread_self`.
    package static var current: ThreadIdentity {
        #if canImport(Darwin)
            ThreadIdentity(bits: UInt(bitPattern: pthread_self()))
        #else
            ThreadIdentity(bits: UInt(pthread_self()))
        #endif
    }

    /// The identity as a number, never 0, for an atomic.
    package var rawValue: UInt { bits }

    /// Whether this is the calling thread.
    package var isCurrent: Bool { self == .current }
}
