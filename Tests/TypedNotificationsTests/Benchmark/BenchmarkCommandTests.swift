import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The benchmark executable, built beside the test binary.
private var benchmark: String {
    URL(fileURLWithPath: HelperProcess.executable).deletingLastPathComponent()
        .appendingPathComponent("TypedNotificationsBenchmark").path
}

/// The pids of `parent`'s children whose command is `command`, from /proc.
private func children(of parent: pid_t, named command: String) -> [pid_t] {
    guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
    return entries.compactMap { entry -> pid_t? in
        guard let pid = pid_t(entry), let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")")
        else { return nil }
        let name = stat[stat.index(after: open)..<close]
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard name == command, fields.count > 2, pid_t(fields[1]) == parent else { return nil }
        return pid
    }
}

/// Whether `pid` has ended: gone, or a zombie waiting for whoever adopted it.
private func hasEnded(_ pid: pid_t) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return true }
    return stat[stat.index(after: close)...].split(separator: " ").first == "Z"
}

@Suite("The benchmark's command line, as a newcomer meets it", .serialized, .timeLimit(.minutes(5)))
struct BenchmarkCommandTests {
    @Test("--help prints the usage and exits at once; an unknown argument is refused with it")
    func help() async throws {
        let help = try HelperProcess(["--help"], executable: benchmark)
        #expect(await help.waitForExit() == 0)
        #expect(help.lines.values.first?.hasPrefix("usage: TypedNotificationsBenchmark") == true)
        #expect(!help.lines.values.contains { $0.hasPrefix("Machine:") })
        let typo = try HelperProcess(["--hepl"], executable: benchmark)
        #expect(await typo.waitForExit() == 64)
        #expect(typo.errors.values.first?.contains("unknown argument --hepl") == true)
        #expect(!typo.lines.values.contains { $0.hasPrefix("Machine:") })
    }

    @Test(
        "a benchmark killed mid-run leaves no redis-server running",
        .enabled(if: RedisTestServer.suitesRun, RedisTestServer.skipReason))
    func redisServerEndsWithTheBenchmark() async throws {
        let run = try HelperProcess(
            ["--only", "fanout", "--kinds", "redis", "--observers", "1", "--sizes", "16", "--count", "1000000"],
            executable: benchmark)
        // Its output is a pipe, so the benchmark's lines wait in its buffer:
        // the server is found among its children instead.
        var server: [pid_t] = []
        let deadline = ContinuousClock.now + .seconds(60)
        while server.isEmpty && ContinuousClock.now < deadline {
            server = children(of: run.pid, named: "redis-server")
            if server.isEmpty { try await Task.sleep(for: .milliseconds(10)) }
        }
        try #require(server.count == 1, "the benchmark started no redis-server of its own")
        run.signal(SIGKILL)
        // Not `waitForExit` first: a server left running would hold the
        // benchmark's standard error open, and that wait with it.
        let ended = ContinuousClock.now + .seconds(30)
        while !hasEnded(server[0]) && ContinuousClock.now < ended { try await Task.sleep(for: .milliseconds(10)) }
        #expect(hasEnded(server[0]), "redis-server \(server[0]) outlived the benchmark")
        if !hasEnded(server[0]) { kill(server[0], SIGKILL) }
        #expect(await run.waitForExit() == 128 + SIGKILL)
    }
}
