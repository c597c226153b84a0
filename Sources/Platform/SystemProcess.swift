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
@_spi(TransportAuthoring) public enum SystemProcess {
    /// The calling process's id.
    ///
    /// The corresponding C function is `getpid`.
    @_spi(TransportAuthoring) public static var id: Int32 { Int32(getpid()) }

    /// The calling process's real user id.
    ///
    /// The corresponding C function is `getuid`.
    package static var userID: UInt32 { UInt32(getuid()) }

    /// Whether the process is in `group`: its effective group, or one of its
    /// supplementary groups (what the kernel checks a group's permission
    /// bits against).
    ///
    /// The corresponding C functions are `getegid` and `getgroups`.
    package static func isMember(ofGroup group: UInt32) -> Bool {
        if UInt32(getegid()) == group { return true }
        let count = getgroups(0, nil)
        guard count > 0 else { return false }
        var groups = [gid_t](repeating: 0, count: Int(count))
        let found = getgroups(count, &groups)
        return found > 0 && groups.prefix(Int(found)).contains { UInt32($0) == group }
    }

    /// The processors the process may run on now (at least 1).
    ///
    /// The corresponding C function is `sysconf(_SC_NPROCESSORS_ONLN)`.
    package static var processorCount: Int { max(1, Int(sysconf(CInt(_SC_NPROCESSORS_ONLN)))) }

    /// The value of an environment variable, or `nil` when it is not set.
    ///
    /// The corresponding C function is `getenv`.
    package static func environment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }

    /// `$XDG_RUNTIME_DIR/<name>` when that variable holds an absolute path,
    /// else `/tmp/<name>-<uid>`: a transport's default directory, private to
    /// this user. `runtime` stands for the variable's value.
    package static func runtimeDirectory(
        named name: String, runtime: String? = environment("XDG_RUNTIME_DIR")
    ) -> String {
        if let runtime, runtime.hasPrefix("/") {
            return runtime + "/" + name
        }
        return "/tmp/\(name)-\(userID)"
    }

    /// Suspends the calling thread for about `microseconds`.
    ///
    /// The corresponding C function is `nanosleep`.
    @_spi(TransportAuthoring) public static func pause(microseconds: UInt32) {
        var request = timespec(tv_sec: Int(microseconds / 1_000_000), tv_nsec: Int(microseconds % 1_000_000) * 1_000)
        var remaining = timespec()
        while nanosleep(&request, &remaining) == -1, Errno.current == .interrupted { request = remaining }
    }
}
