import CTypedNotifications
import CTypedNotificationsAllocationCounter
import CTypedNotificationsBenchmarkSupport
import Dispatch
import Foundation
import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// CLOCK_MONOTONIC in nanoseconds: comparable across processes on one machine.
@inline(__always) func now() -> UInt64 { SystemClock.monotonicNanoseconds() }

/// Sleeps until CLOCK_MONOTONIC reaches `deadline` (nanoseconds).
func sleep(until deadline: UInt64) {
    #if os(Linux)
        var time = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &time, nil) == EINTR {}
    #else
        // Darwin has no absolute sleep: sleep what is left, until none is.
        while case let current = now(), current < deadline {
            let left = deadline - current
            var time = timespec(tv_sec: Int(left / 1_000_000_000), tv_nsec: Int(left % 1_000_000_000))
            _ = nanosleep(&time, nil)
        }
    #endif
}

/// A close-on-exec socket of `family`, a datagram or a stream one; -1 with
/// errno on failure.
func rawSocket(_ family: Int32, stream: Bool) -> Int32 {
    #if os(Linux)
        let type = Int32((stream ? SOCK_STREAM : SOCK_DGRAM).rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        return socket(family, type, 0)
    #else
        let descriptor = socket(family, stream ? SOCK_STREAM : SOCK_DGRAM, 0)
        if descriptor >= 0 { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        return descriptor
    #endif
}

#if os(Linux)
    let rusageSelf = Int32(RUSAGE_SELF.rawValue)
#else
    let rusageSelf = RUSAGE_SELF
#endif

/// CPU time (user plus system, all threads) this process has used, in nanoseconds.
func processCPUNanoseconds() -> UInt64 {
    var usage = rusage()
    getrusage(rusageSelf, &usage)
    func nanoseconds(_ time: timeval) -> UInt64 { UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_usec) * 1000 }
    return nanoseconds(usage.ru_utime) + nanoseconds(usage.ru_stime)
}

/// This process's peak resident set, in KiB: VmHWM on Linux, which starts
/// afresh at exec (getrusage's ru_maxrss would carry the parent's peak over).
func peakResidentKiB() -> Int {
    if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
        let kilobytes = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
    {
        return kilobytes
    }
    var usage = rusage()
    getrusage(rusageSelf, &usage)
    return Int(usage.ru_maxrss)
}

/// This process's resident set now, in KiB (Linux: /proc/self/statm).
func currentResidentKiB() -> Int? {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
    let fields = text.split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE))) / 1024
}

/// Heap bytes in use (glibc mallinfo2), for per-observer overhead.
func heapBytesInUse() -> Int? {
    let bytes = tnb_heap_bytes_in_use()
    return bytes >= 0 ? Int(bytes) : nil
}

/// Heap allocations so far, or nil where they cannot be counted.
func allocationCount() -> Int64? {
    let count = tnb_allocation_count()
    return count >= 0 ? count : nil
}

/// Writes one line to stdout at once: parents read children line by line.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// Writes to stderr and exits 1.
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("TypedNotificationsBenchmark: \(message)\n".utf8))
    exit(1)
}

/// Receive stamps of one observer, indexed by notification index.
///
/// `@unchecked Sendable`: exactly one observer writes to a recorder, and its
/// deliveries are serial (one handler loop, one task, one thread or the
/// posting thread itself). The poster reads `stamps` and `received` only
/// after `finished` was signalled, which happens after the observer's last
/// write; the semaphore orders those writes before the reads. An observer
/// process sets `readyCPUNanoseconds` on its main thread before it says
/// "ready" and reads it there after `finished`.
final class Recorder: @unchecked Sendable {
    let stamps: UnsafeMutableBufferPointer<UInt64>
    /// The observer process's CPU time when it said "ready".
    var readyCPUNanoseconds: UInt64?
    private(set) var received = 0
    private var isPrimed = false
    private let primedCount: Countdown
    let finished = DispatchSemaphore(value: 0)

    init(total: Int, primed: Countdown) {
        stamps = .allocate(capacity: total)
        stamps.initialize(repeating: 0)
        primedCount = primed
    }

    deinit { stamps.deallocate() }

    /// Files the receive time of notification `index`.
    @inline(__always) func record(_ index: UInt64) {
        let stamp = now()
        if index < UInt64(stamps.count) {
            stamps[Int(index)] = stamp
            received += 1
        } else if index == BenchTick.probeIndex {
            if !isPrimed {
                isPrimed = true
                primedCount.arrive()
            }
        } else if index == BenchTick.endIndex {
            finished.signal()
        }
    }
}

/// Counts observers that reached some point.
final class Countdown: Sendable {
    private let count = Atomic(0)
    func arrive() { count.add(1, ordering: .releasing) }
    var arrived: Int { count.load(ordering: .acquiring) }
}

/// A child process of this executable with its stdout on a pipe.
final class Child {
    let processID: pid_t
    private let output: UnsafeMutablePointer<FILE>

    /// Starts this executable again with `arguments`.
    init(_ arguments: [String]) {
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else { fail("pipe: errno \(errno)") }
        let executable = Child.executablePath
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        // It dies with this process, and its children with it: a benchmark
        // ended by a signal or a closed pipe leaves nothing running.
        let child = cbs_spawn_dying_with_parent(executable, argv, environ, pipeEnds[1], pipeEnds[0])
        let spawnError = errno
        for argument in argv { free(argument) }
        close(pipeEnds[1])
        guard child > 0 else { fail("could not start \(executable): errno \(spawnError)") }
        processID = child
        guard let stream = fdopen(pipeEnds[0], "r") else { fail("fdopen: errno \(errno)") }
        output = stream
    }

    /// The next line the child printed, or nil at the end of its output.
    func readLine() -> String? {
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        guard getline(&line, &capacity, output) > 0, let line else { return nil }
        return String(cString: line).trimmingCharacters(in: .newlines)
    }

    /// Reads lines until one starts with `prefix`; fails if the output ends first.
    func expect(_ prefix: String) -> String {
        while let line = readLine() {
            if line.hasPrefix(prefix) { return line }
        }
        fail("a child ended without printing \(prefix)")
    }

    /// Waits for the child to exit; fails unless it exited 0.
    func wait() {
        fclose(output)
        var status: Int32 = 0
        while waitpid(processID, &status, 0) == -1 && errno == EINTR {}
        guard status == 0 else { fail("a child process failed (wait status \(status))") }
    }

    /// This executable's path.
    static let executablePath: String = {
        #if os(Linux)
            if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") { return path }
        #endif
        return CommandLine.arguments[0]
    }()
}

/// A fresh, empty directory under the system's temporary directory.
func makeScratchDirectory(_ label: String) -> String {
    let template = NSTemporaryDirectory() + "/tnb-\(label)-XXXXXX"
    var bytes = Array(template.utf8CString)
    guard let made = mkdtemp(&bytes) else { fail("mkdtemp: errno \(errno)") }
    return String(cString: made)
}

/// Removes a scratch directory and everything in it.
func removeScratchDirectory(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

/// Closes a raw descriptor of the baselines.
func closeDescriptor(_ descriptor: Int32) { _ = close(descriptor) }
