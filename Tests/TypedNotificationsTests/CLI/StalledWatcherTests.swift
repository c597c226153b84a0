import Foundation
import Testing
import TypedNotifications

@testable import TypedNotificationsRedis

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A watcher whose output stalls with a buffer of 8 while a backlog of 3,000
/// arrives (see ``playStalledWatcher(transport:selector:names:count:durable:post:)``).
/// Where posts are kept (a log, a stream) nothing is dropped for being read
/// too fast: every post is printed once, in order, none missed. The socket
/// transport keeps nothing a live observer has not taken: its buffer drops
/// the oldest, and every drop is counted on a later line.
@Suite("A stalled watcher with a small buffer", .serialized, .timeLimit(.minutes(10)))
struct StalledWatcherTests {
    static let namespace: [NotificationName] = ["test.slow.a", "test.slow.b", "test.slow.c"]

    @Test(
        "file: a name and a namespace, plain and durable: all 3,000 printed, none missed",
        arguments: [(false, false), (false, true), (true, false), (true, true)])
    func file(inNamespace: Bool, durable: Bool) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        let names: [NotificationName] = inNamespace ? Self.namespace : ["test.slow"]
        let watch = try await playStalledWatcher(
            transport: ["--transport", "file", "--dir", directory], selector: inNamespace ? "test.slow.*" : "test.slow",
            names: names, durable: durable
        ) { name, index in
            try poster.post(RawNotification(bytes: Array("\(index)".utf8)), as: name)
        }
        #expect(watch.missed == 0)
        #expect(watch.printedCount == 3_000)
        #expect(watch.redeliveries == 0)
    }

    @Test("socket: a name and a namespace: every post printed or counted as missed", arguments: [false, true])
    func socket(inNamespace: Bool) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        let names: [NotificationName] = inNamespace ? Self.namespace : ["test.slow"]
        let watch = try await playStalledWatcher(
            transport: ["--transport", "socket", "--dir", directory],
            selector: inNamespace ? "test.slow.*" : "test.slow", names: names
        ) { name, index in
            try poster.post(RawNotification(bytes: Array("\(index)".utf8)), as: name)
        }
        #expect(watch.printedCount + watch.missed == 3_000)
        #expect(watch.printedCount >= 8)
    }

    @Test(
        "socket: a watcher stopped while 3,000 are posted gets them from its spool on resume, its buffer's worth printed, the rest counted"
    )
    func stoppedSocketWatcher() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watcher = try HelperProcess(
            ["watch", "test.slow", "--buffer", "8", "--json", "--transport", "socket", "--dir", directory],
            executable: HelperProcess.tnotify)
        await watcher.waitForLine(startingWith: "watching")
        watcher.signal(SIGSTOP)
        await waitUntilStopped(watcher.pid)
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        for index in 1...3_000 { try poster.post(RawNotification(bytes: Array("\(index)".utf8)), as: "test.slow") }
        #expect(poster.transport.statistics.spooled > 0)
        watcher.signal(SIGCONT)
        var printed = 0
        var missed = 0
        var seen = 0
        while printed + missed < 3_000 {
            guard await watcher.lines.wait(forCount: seen + 1, upTo: safetyNet) else { break }
            let lines = watcher.lines.values
            for line in Watched.jsonObjects(lines[seen...]) {
                printed += 1
                missed += line["missed"] as? Int ?? 0
            }
            seen = lines.count
        }
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)
        // The spool kept every post; the buffer of 8 takes what the spool
        // hands it at once, and what it drops is counted, never lost silently.
        #expect(printed + missed == 3_000)
        #expect(printed >= 8)
    }
}

@Suite(
    "A stalled watcher with a small buffer, over Redis", .serialized, .timeLimit(.minutes(10)),
    .enabled(if: RedisTestServer.suitesRun, RedisTestServer.skipReason))
struct RedisStalledWatcherTests {
    @Test(
        "Redis: a name and a namespace, plain and durable: all 3,000 printed, none missed",
        arguments: [(false, false), (false, true), (true, false), (true, true)])
    func redis(inNamespace: Bool, durable: Bool) async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        let names: [NotificationName] = inNamespace ? StalledWatcherTests.namespace : ["test.slow"]
        let watch = try await playStalledWatcher(
            transport: ["--transport", "redis", "--url", server.url()],
            selector: inNamespace ? "test.slow.*" : "test.slow", names: names, durable: durable
        ) { name, index in
            try poster.post(RawNotification(bytes: Array("\(index)".utf8)), as: name)
        }
        #expect(watch.missed == 0)
        #expect(watch.printedCount == 3_000)
        #expect(watch.redeliveries == 0)
    }

    @Test(
        "Redis: a durable namespace identity stopped with SIGTERM, three times: its next run marks as redeliveries at most what its buffer and readers held"
    )
    func stoppedIdentityMarksLittle() async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        let redis = ["--transport", "redis", "--url", server.url()]
        let arguments = ["watch", "test.slow.*", "--cursor", "slow", "--buffer", "8", "--json"] + redis
        let first = try HelperProcess(arguments, executable: HelperProcess.tnotify)
        await first.waitForLine(startingWith: "watching")
        first.signal(SIGTERM)
        #expect(await first.waitForExit() == 0)
        for index in 0..<3_000 {
            try poster.post(
                RawNotification(bytes: Array("\(index)".utf8)), as: StalledWatcherTests.namespace[index % 3])
        }
        var printed: Set<String> = []
        for run in 1...3 {
            // Its output stalls at its 151st line (the thread reading it
            // stops there, and the pipe takes a page at most more), however
            // late this task runs: so each run leaves a backlog.
            let watcher = try HelperProcess(
                arguments, executable: HelperProcess.tnotify, smallPipe: true, stalledAtLine: 151)
            let arrived = await watcher.lines.wait(forCount: 151, upTo: safetyNet)
            #expect(arrived, "run \(run): \(watcher.lines.values.count) lines; \(watcher.errors.values)")
            // Stopped with a backlog left, SIGTERM ends it with the line it
            // is writing unfinished (it closes its hub and exits after 2 s).
            watcher.signal(SIGTERM)
            await watcher.waitForProcessExit()
            watcher.outputGate.open()
            #expect(await watcher.waitForExit() == 0)
            var unprintedButMarked = 0
            for line in Watched.jsonObjects(watcher.lines.values) {
                guard let name = line["name"] as? String, let sequence = line["sequence"] as? NSNumber else { continue }
                let key = name + " " + sequence.stringValue
                if line["redelivery"] as? Bool == true, !printed.contains(key) { unprintedButMarked += 1 }
                printed.insert(key)
            }
            // What it held when stopped: its buffer of 8, the 8 its loop
            // took out of it, a read's worth for each of three names, and
            // the line it was writing.
            #expect(unprintedButMarked <= 8 + 8 + 3 * 8 + 1, "run \(run)")
        }
        #expect(printed.count >= 450)
        #expect(printed.count < 3_000)
    }
}
