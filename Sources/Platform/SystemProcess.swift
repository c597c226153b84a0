#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// Who the current process is.
package enum SystemProcess {
    /// The calling process's id.
    ///
    /// The corresponding C function is `getpid`.
    package static var id: Int32 { Int32(getpid()) }

    /// The calling process's real user id.
    ///
    /// The corresponding C function is `getuid`.
    package static var userID: UInt32 { UInt32(getuid()) }

    /// The calling process's real group id.
    ///
    /// The corresponding C function is `getgid`.
    package static var groupID: UInt32 { UInt32(getgid()) }
}
