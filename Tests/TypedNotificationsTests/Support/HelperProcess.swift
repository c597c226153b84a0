import CTypedNotifications
import Foundation
import Testing
import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A `tnotify-test-helper` process, started with `posix_spawn`. Its standard
/// output and error are read line by line on threads of their own, so a test
/// can await what it says; its exit is collected with `waitpid`.
///
/// It runs in a process group of its own, listed on a ``Lifeline``: if the
/// test process ends before it, it is killed with everything it started.
final class HelperProcess: Sendable {
    /// Lines the helper printed on standard output.
    let lines = Collector<String>()
    /// Lines it wrote to standard error, for failure messages.
    let errors = Collector<String>()
    let pid: pid_t
    /// Closed, the thread that reads standard output reads no more, so the
    /// helper's writes block once the pipe is full: a consumer that stalls.
    let outputGate = ThreadGate()
    private let exitStatus = Locked<Int32?>(nil)
    private let exited = Signal()
    private let outputEnded = Signal()
    private let errorsEnded = Signal()

    /// The helper binary, built beside the test binary.
    static var executable: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("tnotify-test-helper").path
    }

    /// The `tnotify` command-line tool, built beside the test binary.
    static var tnotify: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("tnotify").path
    }

    /// Starts the helper (or another `executable`); `standardInput`, if given,
    /// becomes its descriptor 0.
    ///
    /// With `killedAtLine`, the helper is sent SIGKILL by the thread that
    /// reads its output as soon as that line is read, before any later one,
    /// and its output pipe holds only one page: so it dies at most a few
    /// hundred short lines past that line, however late the test's own task
    /// is scheduled. With `smallPipe`, the pipe holds one page too, so a
    /// closed ``outputGate`` stalls the helper within a few lines. With
    /// `stalledAtLine` (and `smallPipe`), the thread that reads the output
    /// closes ``outputGate`` itself as soon as that line is read, however
    /// late the test's own task is scheduled.
    init(
        _ arguments: [String], executable: String = HelperProcess.executable, standardInput: CInt? = nil,
        killedAtLine: Int? = nil, smallPipe: Bool = false, stalledAtLine: Int? = nil,
        lifeline: Lifeline? = Lifeline.shared
    ) throws {
        var output: [CInt] = [-1, -1]
        var errorOutput: [CInt] = [-1, -1]
        guard ctn_pipe_cloexec(&output) == 0, ctn_pipe_cloexec(&errorOutput) == 0 else {
            throw POSIXError(.EMFILE)
        }
        #if os(Linux)
            if killedAtLine != nil || smallPipe {
                // F_SETPIPE_SZ (1031): the smallest pipe Linux allows, one page.
                _ = fcntl(output[1], 1031, 4096)
            }
        #endif
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        // Under ThreadSanitizer a process that exits while another of its
        // threads is still running sleeps a second first (atexit_sleep_ms):
        // a tool whose closed hub's thread is still returning from its last
        // call would, and a test starting 200 tools would wait minutes.
        var inherited = ProcessInfo.processInfo.environment
        let sanitizer = inherited["TSAN_OPTIONS"] ?? ""
        if !sanitizer.contains("atexit_sleep_ms") {
            inherited["TSAN_OPTIONS"] = (sanitizer.isEmpty ? "" : sanitizer + ":") + "atexit_sleep_ms=0"
        }
        let environment = inherited.map { strdup("\($0)=\($1)") } + [nil]
        defer { for pointer in environment { free(pointer) } }
        var child: pid_t = 0
        // A group of its own, so the lifeline ends what it starts too.
        let status = withSpawnSettings { actions, attributes in
            posix_spawn_file_actions_adddup2(&actions, output[1], 1)
            posix_spawn_file_actions_adddup2(&actions, errorOutput[1], 2)
            if let standardInput {
                posix_spawn_file_actions_adddup2(&actions, standardInput, 0)
            } else {
                // Never the terminal: a process outside the terminal's
                // foreground group that read it would be stopped.
                posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            }
            return posix_spawn(&child, executable, &actions, &attributes, argv, environment)
        }
        close(output[1])
        close(errorOutput[1])
        guard status == 0 else {
            close(output[0])
            close(errorOutput[0])
            throw POSIXError(POSIXErrorCode(rawValue: status) ?? .EIO)
        }
        pid = child
        lifeline?.watch(child)
        Self.readLines(
            from: output[0], into: lines, then: outputEnded, gate: outputGate, closingAt: stalledAtLine,
            killing: killedAtLine.map { (child, $0) })
        Self.readLines(from: errorOutput[0], into: errors, then: errorsEnded)
        let (pid, exitStatus, exited) = (child, self.exitStatus, self.exited)
        Thread.detachNewThread {
            // Waits for the exit without reaping: until it is reaped, the
            // process id cannot be given to another process, so `deinit`
            // may signal it (and its group) safely until then.
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == -1 && errno == EINTR {}
            var status: CInt = 0
            // Reaped under the lock `deinit` signals under: the exception to
            // "no system call under a lock", so that no signal ever reaches
            // another process that got this id. Both calls return at once.
            exitStatus.withLock { value in
                while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
                value = status
            }
            lifeline?.forget(pid)
            exited.fire()
        }
    }

    /// Reads `descriptor` to its end on a thread of its own, one line at a time;
    /// with `killing`, sends that process SIGKILL once that many lines are
    /// read; with `closingAt`, closes `gate` once that many are.
    private static func readLines(
        from descriptor: CInt, into lines: Collector<String>, then ended: Signal, gate: ThreadGate? = nil,
        closingAt: Int? = nil, killing: (process: pid_t, line: Int)? = nil
    ) {
        Thread.detachNewThread {
            defer {
                close(descriptor)
                lines.finish()
                ended.fire()
            }
            var pending: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65_536)
            var linesRead = 0
            while true {
                gate?.passThrough()
                let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }
                // Only the bytes just read can hold a newline not seen yet:
                // a long line costs its length once, not once a read.
                var searchFrom = pending.count
                pending += buffer[..<count]
                var lineStart = 0
                while let newline = pending[searchFrom...].firstIndex(of: UInt8(ascii: "\n")) {
                    lines.append(String(decoding: pending[lineStart..<newline], as: UTF8.self))
                    lineStart = newline + 1
                    searchFrom = lineStart
                    linesRead += 1
                    if let killing, linesRead == killing.line { kill(killing.process, SIGKILL) }
                    if linesRead == closingAt { gate?.close() }
                }
                pending.removeSubrange(..<lineStart)
            }
            if !pending.isEmpty { lines.append(String(decoding: pending, as: UTF8.self)) }
        }
    }

    /// Returns once the helper has printed a line that starts with `prefix`;
    /// if its output ends first (it exited, or died), records that as an
    /// issue, with what it wrote to standard error, and returns "".
    @discardableResult
    func waitForLine(startingWith prefix: String, containing part: String = "") async -> String {
        if let match = await line(startingWith: prefix, containing: part) { return match }
        await errorsEnded.wait()
        let wanted = "line starting \"\(prefix)\" containing \"\(part)\""
        Issue.record("helper \(pid) ended its output with no \(wanted): \(lines.values.suffix(5)) \(errors.values)")
        return ""
    }

    /// Returns the first line that starts with `prefix` and contains `part`
    /// once the helper has printed it, or `nil` once its output has ended
    /// without one: for a caller to whom an early exit is an answer (a
    /// server whose port was taken), not a failure.
    func line(startingWith prefix: String, containing part: String = "") async -> String? {
        var seen = 0
        while true {
            await lines.wait(forCount: seen + 1)
            let all = lines.values
            if let match = all[seen...].first(where: { $0.hasPrefix(prefix) && (part.isEmpty || $0.contains(part)) }) {
                return match
            }
            if lines.isFinished && all.count == lines.values.count { return nil }
            seen = all.count
        }
    }

    /// How long ``waitForExit()`` waits before it takes the helper as hung.
    static let hangLimit: Duration = .seconds(600)

    /// A hung helper's threads, from gdb where it is installed, for the
    /// issue that reports it.
    private static func threadsOf(_ pid: pid_t) async -> String {
        let gdb = "/usr/bin/gdb"
        guard FileManager.default.isExecutableFile(atPath: gdb),
            let trace = try? HelperProcess(
                ["-batch", "-nx", "-p", "\(pid)", "-ex", "thread apply all bt 30"], executable: gdb, lifeline: nil)
        else { return "(no gdb)" }
        await trace.exited.wait()
        await trace.waitForOutputEnd()
        return trace.lines.values.filter { $0.hasPrefix("#") || $0.hasPrefix("Thread ") }.joined(separator: "\n")
    }

    /// Returns once the helper's standard output and error have both ended.
    func waitForOutputEnd() async {
        await outputEnded.wait()
        await errorsEnded.wait()
    }

    /// Waits for the process to exit, not for its output to be read (which
    /// a closed ``outputGate`` holds back).
    func waitForProcessExit() async {
        await exited.wait()
    }

    /// Waits for the process to exit and for every line it wrote to be read;
    /// returns its exit code, or 128 + the signal that ended it.
    ///
    /// A safety net, never a synchronisation: a helper still running after
    /// ``hangLimit`` is recorded as an issue with its threads' backtraces,
    /// then killed, so a hang fails its test instead of the whole run.
    func waitForExit() async -> Int32 {
        let watchdog = Task { [pid, exited, exitStatus] in
            try await Task.sleep(for: Self.hangLimit)
            guard !exited.hasFired else { return }
            let threads = await Self.threadsOf(pid)
            Issue.record("helper \(pid) still running after \(Self.hangLimit), killed; its threads:\n\(threads)")
            exitStatus.withLock { status in
                // Not reaped yet (see init): the id is still this process's.
                guard status == nil else { return }
                kill(-pid, SIGKILL)
                kill(pid, SIGKILL)
            }
        }
        await exited.wait()
        watchdog.cancel()
        await waitForOutputEnd()
        let status = exitStatus.withLock { $0 } ?? -1
        let signal = status & 0x7F
        return signal == 0 ? (status >> 8) & 0xFF : 128 + signal
    }

    func signal(_ number: Int32) {
        kill(pid, number)
    }

    deinit {
        let pid = pid
        exitStatus.withLock { status in
            // Not reaped yet (see init): the id is still this process's.
            guard status == nil else { return }
            kill(-pid, SIGKILL)
            kill(pid, SIGKILL)
        }
    }
}

/// A gate a thread passes through, or waits at while it is closed.
final class ThreadGate: Sendable {
    private let state = Locked<(closed: Bool, waiting: Int)>((false, 0))
    private let opened = DispatchSemaphore(value: 0)

    /// Threads that come to the gate from now on wait there.
    func close() {
        state.withLock { $0.closed = true }
    }

    /// Lets every waiting thread go, and the later ones pass.
    func open() {
        let waiting = state.withLock { state in
            state.closed = false
            defer { state.waiting = 0 }
            return state.waiting
        }
        for _ in 0..<waiting { opened.signal() }
    }

    /// Returns at once while the gate is open; else once it is opened.
    func passThrough() {
        let waits = state.withLock { state in
            if state.closed { state.waiting += 1 }
            return state.closed
        }
        if waits { opened.wait() }
    }
}

/// A fresh, owner-only directory for one test, removed afterwards by the caller.
func makeTemporaryDirectory() throws -> String {
    var template = Array("/tmp/tn-test-XXXXXX".utf8CString)
    let created = template.withUnsafeMutableBufferPointer { buffer -> Bool in
        guard let base = buffer.baseAddress else { return false }
        return mkdtemp(base) != nil
    }
    guard created else { throw POSIXError(.EIO) }
    return String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

func removeDirectory(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

/// The fields of a helper's "done count=… inorder=… missed=…" line.
func parseDone(_ line: String) -> [String: String] {
    Dictionary(
        line.split(separator: " ").dropFirst().compactMap { field -> (String, String)? in
            let parts = field.split(separator: "=", maxSplits: 1)
            return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
        },
        uniquingKeysWith: { $1 }
    )
}

/// Tallies the "got INDEX 0|1" lines of one run of the helper's `fdurable`
/// into `handled` (how often each index was handled) and returns how many
/// came again; each one handled before must come marked as a redelivery (1).
func tallyDurableRun(_ lines: [String], run: Int, into handled: inout [Int: Int]) -> Int {
    var duplicates = 0
    for line in lines where line.hasPrefix("got ") {
        let fields = line.split(separator: " ")
        guard fields.count == 3, let index = Int(fields[1]) else {
            Issue.record("unexpected line \(line)")
            continue
        }
        if handled[index] != nil {
            duplicates += 1
            #expect(fields[2] == "1", "\(index) was handled before and came again unmarked (run \(run))")
        }
        handled[index, default: 0] += 1
    }
    return duplicates
}
