import CTypedNotificationsBenchmarkSupport
import Foundation
@_spi(TransportAuthoring) import TypedNotifications
import TypedNotificationsCatalog
@_spi(TransportAuthoring) import TypedNotificationsPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// The idle section: what an observer costs while nothing is posted to it.
// Each scenario is an observer process of its own (one name, 100 names, a
// namespace, a namespace that sees 10,000 names; durable or not) over each
// transport. All of them wait through
// the same window, once from start and once after a peer observing the
// same names was killed and a burst of posts came, while
// this process counts, for every thread of each, its context switches
// (/proc/PID/task/TID/status) and, where `perf` can count them, its system
// calls. A wake-up of an idle observer has no cause but a timer or a poll,
// so the figures judge the package's threads (its loops and its deadline
// thread); the runtime's (libdispatch's workers and its once-a-second
// workqueue monitor, the process's main thread) are shown beside them.

/// One idle observer: its transport, what it observes, whether durably.
struct IdleScenario: Sendable {
    /// The catalog entry's name: socket, file or redis.
    var transport: String
    var shape: IdleShape
    var durable: Bool

    var label: String {
        "\(transport), \(shape.label)" + (durable ? ", durable" : "")
    }
}

/// What an idle observer observes.
enum IdleShape: String, Sendable {
    case one
    case hundred
    case namespace
    /// A namespace whose burst is one post to each of 10,000 names: after
    /// it, an observer that has seen them all.
    case manyNames = "many"

    var label: String {
        switch self {
        case .one: "one name"
        case .hundred: "100 names"
        case .namespace: "a namespace"
        case .manyNames: "a namespace, 10,000 names"
        }
    }

    /// Posts of each name in a burst.
    var postsPerName: Int { self == .manyNames ? 1 : idleBurstPerName }

    /// Its selectors, under `root` (each scenario has its own, so one's
    /// burst reaches no other observer on the same server).
    func selectors(under root: String) throws(TypedNotificationError) -> [NotificationSelector] {
        switch self {
        case .namespace, .manyNames: [.namespace(try NotificationNamespace(validating: root))]
        default: try postedNames(under: root).map { .name($0) }
        }
    }

    /// The names a burst posts to: every observed one, and three of a
    /// namespace (10,000 of the many names' one).
    func postedNames(under root: String) throws(TypedNotificationError) -> [NotificationName] {
        let count =
            switch self {
            case .one: 1
            case .hundred: 100
            case .namespace: 3
            case .manyNames: 10_000
            }
        return try (0..<count).map { index throws(TypedNotificationError) in
            try NotificationName(validating: "\(root).n\(index)")
        }
    }
}

/// Posts of each name in a burst.
private let idleBurstPerName = 10

/// The observer process: `idle-observer TRANSPORT SHAPE DURABLE PLACE ROOT`.
/// Prints "ready" once subscribed, "burst" each time another whole burst
/// has arrived, and waits until it is killed.
func runIdleObserver(_ arguments: ArraySlice<String>) throws {
    let values = Array(arguments)
    guard values.count == 5, let entry = TransportCatalog.entry(named: values[0]),
        let shape = IdleShape(rawValue: values[1])
    else { fail("usage: idle-observer TRANSPORT one|hundred|namespace|many durable|plain PLACE ROOT") }
    let request = TransportRequest(identity: values[2] == "durable" ? "idle" : nil)
    let hub = try entry.makeHub(at: entry.place(values[3]), endpoint: "idle-observer", request: request)
    let burst = try shape.postedNames(under: values[4]).count * shape.postsPerName
    let received = Locked(0)
    for selector in try shape.selectors(under: values[4]) {
        let sequence = try hub.deliveries(ofRaw: selector, bufferingPolicy: .unbounded)
        Task {
            for await _ in sequence {
                let count = received.withLock { count in
                    count += 1
                    return count
                }
                if count % burst == 0 { say("burst") }
            }
        }
    }
    say("ready")
    // Until the section kills it: nothing here wakes.
    DispatchSemaphore(value: 0).wait()
}

/// One thread's counters at one moment.
private struct ThreadSample {
    var name: String
    var contextSwitches: Int
}

/// Every thread of `process`, by thread id; empty where there is no /proc.
private func threadSamples(of process: pid_t) -> [Int: ThreadSample] {
    let taskDirectory = "/proc/\(process)/task"
    guard let threads = try? FileManager.default.contentsOfDirectory(atPath: taskDirectory) else { return [:] }
    var samples: [Int: ThreadSample] = [:]
    for thread in threads {
        guard let id = Int(thread),
            let status = try? String(contentsOfFile: "\(taskDirectory)/\(thread)/status", encoding: .utf8)
        else { continue }
        var sample = ThreadSample(name: "?", contextSwitches: 0)
        for line in status.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2 else { continue }
            switch parts[0] {
            case "Name": sample.name = parts[1]
            case "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches":
                sample.contextSwitches += Int(parts[1]) ?? 0
            default: break
            }
        }
        samples[id] = sample
    }
    return samples
}

/// Whether a thread of this name is one the package made: a transport's
/// loop (named after its type), the file transport's deadline thread
/// (which shows its creator's name on Linux, as measured, or its own), or
/// the process's path watcher.
/// Linux keeps 15 bytes of a thread's name.
private func isPackageThread(_ name: String) -> Bool {
    ["SocketTransport", "FileSignalTrans", "RedisStreamsTra", "SleepDeadlines", "PathWatcher"].contains {
        name.hasPrefix($0)
    }
}

/// System calls per thread id over `seconds`, counted by `perf stat` for
/// `processes`; `nil` where `perf` is missing or cannot count them (then
/// the window is slept through all the same).
private func countSystemCalls(of processes: [pid_t], seconds: Int) -> [Int: Int]? {
    let perf = ["/usr/bin/perf", "/usr/local/bin/perf"].first { FileManager.default.isExecutableFile(atPath: $0) }
    guard let perf else {
        sleep(UInt32(seconds))
        return nil
    }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: perf)
    process.arguments = [
        "stat", "-x", ",", "--per-thread", "-e", "raw_syscalls:sys_enter",
        "-p", processes.map(String.init).joined(separator: ","), "--", "sleep", "\(seconds)",
    ]
    let errors = Pipe()
    process.standardError = errors
    process.standardOutput = FileHandle.nullDevice
    do { try process.run() } catch {
        sleep(UInt32(seconds))
        return nil
    }
    let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    // Lines such as "FileSignalTrans-24320,10,,raw_syscalls:sys_enter,...".
    var counts: [Int: Int] = [:]
    for line in text.split(separator: "\n") {
        let fields = line.split(separator: ",", omittingEmptySubsequences: false)
        guard fields.count > 3, fields[3].hasPrefix("raw_syscalls:sys_enter"),
            let dash = fields[0].lastIndex(of: "-"), let thread = Int(fields[0][fields[0].index(after: dash)...])
        else { continue }
        counts[thread] = Int(fields[1]) ?? 0
    }
    return counts.isEmpty ? nil : counts
}

/// What one idle observer did over a window.
struct IdleFigures: Codable, Sendable {
    var scenario: String
    var phase: String
    var seconds: Int
    /// Context switches of the package's threads.
    var packageWakeUps: Int
    /// Their system calls; nil where they could not be counted.
    var packageSystemCalls: Int?
    var packageThreads: Int
    /// The runtime's threads (libdispatch, the main thread), for comparison.
    var otherWakeUps: Int
    var otherThreads: Int
    /// The package's threads that woke: name and context switches.
    var busiest: [String]
}

/// Starts every scenario, then measures each window with all of them idle.
func measureIdle(quick: Bool, redis: BenchRedisServer?) throws -> [IdleFigures] {
    #if !os(Linux)
        print("\nIdle: skipped, it reads /proc, which only Linux has")
        return []
    #else
        var scenarios: [IdleScenario] = [
            IdleScenario(transport: "socket", shape: .one, durable: false),
            IdleScenario(transport: "socket", shape: .hundred, durable: false),
            IdleScenario(transport: "socket", shape: .namespace, durable: false),
            IdleScenario(transport: "socket", shape: .manyNames, durable: false),
            IdleScenario(transport: "file", shape: .one, durable: false),
            IdleScenario(transport: "file", shape: .hundred, durable: false),
            IdleScenario(transport: "file", shape: .namespace, durable: false),
            IdleScenario(transport: "file", shape: .one, durable: true),
            IdleScenario(transport: "file", shape: .namespace, durable: true),
            IdleScenario(transport: "file", shape: .manyNames, durable: false),
            // On a thread of the loop group, as hubs past a process's first
            // few are (and every hub on Apple platforms).
            IdleScenario(transport: "socket-without-credentials", shape: .hundred, durable: false),
            IdleScenario(transport: "file-in-event-queue", shape: .hundred, durable: false),
        ]
        if redis != nil {
            scenarios += [
                IdleScenario(transport: "redis", shape: .one, durable: false),
                IdleScenario(transport: "redis", shape: .namespace, durable: false),
                IdleScenario(transport: "redis", shape: .one, durable: true),
            ]
        }
        let seconds = quick ? 10 : 60
        print(
            "\nIdle: an observer process that nobody posts to, per transport; wake-ups (context switches) and system calls of the package's threads over \(seconds) s, from start and after a burst; the runtime's threads beside them"
        )
        redis?.flush()
        var running: [(scenario: IdleScenario, child: Child, directory: String?, poster: AnyHub, root: String)] = []
        defer {
            for (_, child, directory, poster, _) in running {
                poster.closeAndWait()
                kill(child.processID, SIGKILL)
                var status: Int32 = 0
                while waitpid(child.processID, &status, 0) == -1 && errno == EINTR {}
                if let directory { removeScratchDirectory(directory) }
            }
        }
        for (index, scenario) in scenarios.enumerated() {
            guard let entry = TransportCatalog.entry(named: scenario.transport) else { continue }
            let directory = scenario.transport == "redis" ? nil : makeScratchDirectory("idle")
            let place = directory ?? redis?.url ?? ""
            let root = "bench.idle.s\(index)"
            let child = Child([
                "idle-observer", scenario.transport, scenario.shape.rawValue,
                scenario.durable ? "durable" : "plain", place, root,
            ])
            _ = child.expect("ready")
            let poster = try entry.makeHub(at: entry.place(place), endpoint: "idle-poster")
            running.append((scenario, child, directory, poster, root))
        }
        var figures: [IdleFigures] = []
        for phase in ["from start", "after a burst"] {
            if phase == "after a burst" {
                for (scenario, child, directory, poster, root) in running {
                    // A peer observing the same names dies first (SIGKILL):
                    // what it leaves is the burst's posters' to reap.
                    let peer = Child([
                        "idle-observer", scenario.transport, scenario.shape.rawValue, "plain",
                        directory ?? redis?.url ?? "", root,
                    ])
                    _ = peer.expect("ready")
                    kill(peer.processID, SIGKILL)
                    var status: Int32 = 0
                    while waitpid(peer.processID, &status, 0) == -1 && errno == EINTR {}
                    for index in 0..<scenario.shape.postsPerName {
                        for name in try scenario.shape.postedNames(under: root) {
                            try poster.post(RawNotification(bytes: Array("\(index)".utf8)), as: name)
                        }
                    }
                    _ = child.expect("burst")
                }
            }
            // What starting or the burst set going settles first.
            sleep(1)
            let processes = running.map(\.child.processID)
            let before = processes.map(threadSamples(of:))
            let calls = countSystemCalls(of: processes, seconds: seconds)
            let after = processes.map(threadSamples(of:))
            for (index, (scenario, _, _, _, _)) in running.enumerated() {
                var figure = IdleFigures(
                    scenario: scenario.label, phase: phase, seconds: seconds, packageWakeUps: 0,
                    packageSystemCalls: calls == nil ? nil : 0, packageThreads: 0, otherWakeUps: 0, otherThreads: 0,
                    busiest: [])
                for (thread, sample) in after[index] {
                    let woke = sample.contextSwitches - (before[index][thread]?.contextSwitches ?? 0)
                    if isPackageThread(sample.name) {
                        figure.packageThreads += 1
                        figure.packageWakeUps += woke
                        if let calls { figure.packageSystemCalls? += calls[thread] ?? 0 }
                        if woke > 0 { figure.busiest.append("\(sample.name) \(woke)") }
                    } else {
                        figure.otherThreads += 1
                        figure.otherWakeUps += woke
                    }
                }
                figures.append(figure)
            }
        }
        for figure in figures {
            let calls = figure.packageSystemCalls.map(String.init) ?? "n/a"
            print(
                "  \(padded(figure.scenario, 38)) \(padded(figure.phase, 14)) wake-ups \(padded("\(figure.packageWakeUps)", 5)) system calls \(padded(calls, 5)) on \(figure.packageThreads) thread\(figure.packageThreads == 1 ? "" : "s")"
                    + "; runtime: \(figure.otherWakeUps) on \(figure.otherThreads)"
                    + (figure.busiest.isEmpty ? "" : " (\(figure.busiest.sorted().joined(separator: ", ")))"))
        }
        if figures.contains(where: { $0.packageSystemCalls == nil }) {
            print("  (system calls need perf with access to raw_syscalls tracepoints; n/a without)")
        }
        return figures
    #endif
}
