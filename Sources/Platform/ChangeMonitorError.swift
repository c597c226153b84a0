#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// A monitor could not be made or could not watch a directory: the error
/// number, and which of the kernel's limits it means when it means one.
package struct ChangeMonitorError: Error, CustomStringConvertible, Sendable {
    /// The failed call's error number.
    package let errno: Errno
    /// What happened, naming the limit that was reached where there is one.
    package let description: String

    /// Explains a failed `inotify_init1`: EMFILE is either the per-user
    /// limit of inotify instances or this process's descriptor limit, told
    /// apart by opening one more descriptor.
    init(creating error: Errno) {
        errno = error
        #if os(Linux)
            if error == .tooManyDescriptors, !Self.atDescriptorLimit() {
                let limit = Self.kernelSetting("/proc/sys/fs/inotify/max_user_instances")
                description =
                    "\(error): this user's processes already hold the most inotify instances the kernel allows"
                    + " (fs.inotify.max_user_instances = \(limit)); raise it with sysctl, or run fewer processes"
                    + " that watch files (each holds one to three)"
                return
            }
        #endif
        description = "\(error)"
    }

    /// Explains a failed `inotify_add_watch`: ENOSPC is the per-user limit of watches.
    init(watching error: Errno) {
        errno = error
        #if os(Linux)
            if error == .noSpace {
                let limit = Self.kernelSetting("/proc/sys/fs/inotify/max_user_watches")
                description =
                    "\(error): this user's processes already hold the most inotify watches the kernel allows"
                    + " (fs.inotify.max_user_watches = \(limit)); raise it with sysctl"
                return
            }
        #endif
        description = "\(error)"
    }

    #if os(Linux)
        private static func atDescriptorLimit() -> Bool {
            let probe = open("/dev/null", O_RDONLY | O_CLOEXEC)
            guard probe != -1 else { return true }
            close(probe)
            return false
        }

        private static func kernelSetting(_ path: String) -> String {
            guard let file = fopen(path, "r") else { return "unknown" }
            defer { fclose(file) }
            var line = [CChar](repeating: 0, count: 32)
            guard fgets(&line, 32, file) != nil else { return "unknown" }
            let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            return text.filter { !$0.isWhitespace }
        }
    #endif
}
