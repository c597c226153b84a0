import CTypedNotifications
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Kills every process the tests start once the test process ends, however
/// it ends: a `tnotify-test-helper reaper` holds the read end of a pipe
/// whose write end only this process has, and kills the processes listed
/// on it (and their process groups) when the kernel closes that end.
final class Lifeline: Sendable {
    /// The lifeline of every ``HelperProcess``, started on first use;
    /// `nil` if the reaper could not be started (processes are then only
    /// killed by their ``HelperProcess``'s deinit).
    static let shared: Lifeline? = try? Lifeline()

    // Written by any thread: each line is far below PIPE_BUF, so writes
    // never interleave. Closed only by `cut`.
    private let writeEnd: CInt
    /// The reaper's process id.
    let reaperPID: pid_t

    /// Starts a reaper of its own.
    init() throws {
        var ends: [CInt] = [-1, -1]
        guard ctn_pipe_cloexec(&ends) == 0 else { throw POSIXError(.EMFILE) }
        // A write after the reaper died fails with EPIPE instead of killing the tests.
        signal(SIGPIPE, SIG_IGN)
        let executable = HelperProcess.executable
        let words: [String] = [executable, "reaper"]
        let argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var child: pid_t = 0
        // In a group of its own: a signal to the test run's group (a killed
        // `swift test`) must not end the reaper with it.
        let status = withSpawnSettings { actions, attributes in
            posix_spawn_file_actions_adddup2(&actions, ends[0], 0)
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            return posix_spawn(&child, executable, &actions, &attributes, argv, environ)
        }
        close(ends[0])
        guard status == 0 else {
            close(ends[1])
            throw POSIXError(POSIXErrorCode(rawValue: status) ?? .EIO)
        }
        writeEnd = ends[1]
        reaperPID = child
    }

    /// Lists `pid` to be killed, with its process group, if this process ends first.
    func watch(_ pid: pid_t) {
        send("+\(pid)\n")
    }

    /// Takes `pid` off the list: it was reaped, and its number may be reused.
    func forget(_ pid: pid_t) {
        send("-\(pid)\n")
    }

    /// Does what the end of this process does: the reaper kills every
    /// process still listed. For the test of the lifeline itself.
    func cut() {
        close(writeEnd)
    }

    private func send(_ line: String) {
        let bytes = Array(line.utf8)
        _ = bytes.withUnsafeBytes { write(writeEnd, $0.baseAddress, $0.count) }
    }
}

#if canImport(Darwin)
    typealias SpawnActions = posix_spawn_file_actions_t?
    typealias SpawnAttributes = posix_spawnattr_t?
#else
    typealias SpawnActions = posix_spawn_file_actions_t
    typealias SpawnAttributes = posix_spawnattr_t
#endif

/// Runs `body` with file actions and attributes for a process that starts
/// in a process group of its own, with no signal blocked and the usual ones
/// at their default action: as a shell would start it, not as this thread
/// has them (the test runner's threads block some, and the lifeline
/// ignores SIGPIPE). Destroys them after.
func withSpawnSettings<T>(_ body: (inout SpawnActions, inout SpawnAttributes) throws -> T) rethrows -> T {
    #if canImport(Darwin)
        var actions: SpawnActions = nil
        var attributes: SpawnAttributes = nil
    #else
        var actions = SpawnActions()
        var attributes = SpawnAttributes()
    #endif
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    posix_spawnattr_setflags(
        &attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    posix_spawnattr_setpgroup(&attributes, 0)
    var none = sigset_t()
    sigemptyset(&none)
    posix_spawnattr_setsigmask(&attributes, &none)
    var defaults = sigset_t()
    sigemptyset(&defaults)
    for signal in [SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2] { sigaddset(&defaults, signal) }
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    return try body(&actions, &attributes)
}
