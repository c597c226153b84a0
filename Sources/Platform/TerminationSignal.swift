import CTypedNotifications
import Foundation

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// SIGINT and SIGTERM, turned into an ordinary call: the signal handler only
/// writes a byte to a pipe (async-signal-safe, and nothing is lost once
/// ``handle(_:)`` returns); a thread of its own reads it and calls the body,
/// where anything may be done.
package enum TerminationSignal {
    /// Installs the handlers; the first SIGINT or SIGTERM then calls `body`
    /// once, on a thread of its own. Returns false when they could not be
    /// installed (the signals then keep their default action).
    ///
    /// The corresponding C functions are `pipe2` and `sigaction`.
    package static func handle(_ body: @escaping @Sendable () -> Void) -> Bool {
        var ends: [CInt] = [-1, -1]
        guard ctn_pipe_cloexec(&ends) == 0 else { return false }
        guard ctn_install_termination_pipe(ends[1]) == 0 else {
            close(ends[0])
            close(ends[1])
            return false
        }
        let readEnd = ends[0]
        let thread = Thread {
            // Named for the system too (Foundation does so only on Apple
            // platforms), so `top -H` and `/proc` say whose thread it is.
            ctn_name_current_thread("TerminationSig")
            var byte: UInt8 = 0
            while read(readEnd, &byte, 1) != 1 {}
            body()
        }
        thread.name = "TypedNotifications.TerminationSignal"
        thread.start()
        return true
    }
}
