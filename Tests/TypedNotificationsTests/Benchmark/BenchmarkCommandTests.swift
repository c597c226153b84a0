import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The benchmark executable, built beside the test binary.
private var benchmark: String {
    URL(fileURLWithPath: HelperProcess.executable).deletingLastPathComponent()
        .appendingPathComponent("TypedNotificationsBenchmark").path
}

/// Every process below `root` that has not ended, with its command, from /proc.
private func descendants(of root: pid_t) -> [(pid: pid_t, command: String)] {
    guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
    var parents: [pid_t: pid_t] = [:]
    var commands: [pid_t: String] = [:]
    for entry in entries {
        guard let pid = pid_t(entry), let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")")
        else { continue }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 2, fields[0] != "Z", let parent = pid_t(fields[1]) else { continue }
        parents[pid] = parent
        commands[pid] = String(stat[stat.index(after: open)..<close])
    }
    return parents.keys.filter { pid in
        var current = pid
        while let parent = parents[current], parent > 1 {
            if parent == root { return true }
            current = parent
        }
        return false
    }.map { ($0, commands[$0] ?? "?") }
}

/// Whether `pid` has ended: gone, or a zombie waiting for whoever adopted it.
private func hasEnded(_ pid: pid_t) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return true }
    return stat[stat.index(after: close)...].split(separator: " ").first == "Z"
}

@Suite("The benchmark's command line, as a newcomer meets it", .serialized, .timeLimit(.minutes(10)))
struct BenchmarkCommandTests {
    @Test("--help prints the usage and exits at once; an unknown argument or kind is refused with it")
    func help() async throws {
        let help = try HelperProcess(["--help"], executable: benchmark)
        #expect(await help.waitForExit() == 0)
        #expect(help.lines.values.first?.hasPrefix("usage: TypedNotificationsBenchmark") == true)
        #expect(!help.lines.values.contains { $0.hasPrefix("Machine:") })
        let typo = try HelperProcess(["--hepl"], executable: benchmark)
        #expect(await typo.waitForExit() == 64)
        #expect(typo.errors.values.first?.contains("unknown argument --hepl") == true)
        #expect(!typo.lines.values.contains { $0.hasPrefix("Machine:") })
        // A kind that does not exist is said, with the ones that do: no trap.
        let kind = try HelperProcess(["--kinds", "socket,sockets"], executable: benchmark)
        #expect(await kind.waitForExit() == 64)
        #expect(kind.errors.values.first?.contains("unknown kind sockets; the kinds are") == true)
        #expect(kind.errors.values.first?.contains("raw-datagram") == true)
        #expect(!kind.lines.values.contains { $0.hasPrefix("Machine:") })
        let none = try HelperProcess(["--kinds", ","], executable: benchmark)
        #expect(await none.waitForExit() == 64)
        #expect(none.errors.values.first?.contains("--kinds names no kind") == true)
    }

    @Test("the anatomy joins a poster's stamps with an observer process's: every step from post to handler, with CPU")
    func anatomyAcrossProcesses() async throws {
        let output = try makeTemporaryDirectory()
        defer { removeDirectory(output) }
        let run = try HelperProcess(
            [
                "--quick", "--only", "fanout", "--kinds", "raw-datagram,socket", "--observers", "1", "--sizes", "16",
                "--count", "300", "--output", output,
            ],
            executable: benchmark)
        #expect(await run.waitForExit() == 0)
        let lines = run.lines.values
        // Each of our points a target judges ran twice, stamped once.
        #expect(lines.contains { $0.contains("SocketTransport") && $0.hasSuffix("(stamped)") })
        guard let start = lines.firstIndex(where: { $0.contains("SocketTransport, N=1, 16 B (") }) else {
            Issue.record("no anatomy for the socket point in \(lines)")
            return
        }
        // Its header says how many were sampled: the measured paced ones.
        #expect(lines[start].contains("(300 notifications sampled)"))
        let table = lines[start...].prefix(12).joined(separator: "\n")
        for step in ["message made", "send returned", "receive returned", "decoded", "queued", "handler began"] {
            #expect(table.contains("    \(step) "), "no \(step) in \(table)")
        }
        #expect(table.contains("observer") && table.contains("(floor "))
        #expect(table.contains("stamping on / off"))
    }

    @Test(
        "a benchmark killed mid-run leaves nothing running: no redis-server, no process of its own",
        .enabled(if: RedisTestServer.suitesRun, RedisTestServer.skipReason))
    func redisServerEndsWithTheBenchmark() async throws {
        let run = try HelperProcess(
            ["--only", "fanout", "--kinds", "redis", "--observers", "1", "--sizes", "16", "--count", "1000000"],
            executable: benchmark)
        // Its output is a pipe, so the benchmark's lines wait in its buffer:
        // the server is found among its children instead.
        // Its server, and a scenario process with its observer process
        // (grandchildren, which hold the benchmark's standard error open).
        var below: [(pid: pid_t, command: String)] = []
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            below = descendants(of: run.pid)
            if below.contains(where: { $0.command == "redis-server" }) && below.count >= 3 { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        try #require(below.contains { $0.command == "redis-server" }, "the benchmark started no redis-server")
        try #require(below.count >= 3, "no scenario and observer processes: \(below)")
        run.signal(SIGKILL)
        // Not `waitForExit` first: a process left running would hold the
        // benchmark's standard error open, and that wait with it.
        let ended = ContinuousClock.now + .seconds(30)
        var left = below.filter { !hasEnded($0.pid) }
        while !left.isEmpty && ContinuousClock.now < ended {
            try await Task.sleep(for: .milliseconds(10))
            left = left.filter { !hasEnded($0.pid) }
        }
        #expect(left.isEmpty, "outlived the benchmark: \(left)")
        for process in left { kill(process.pid, SIGKILL) }
        #expect(await run.waitForExit() == 128 + SIGKILL)
    }
}
