import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsRedis
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Durable identities and retention over Redis, against the adversaries that
/// break them: observer processes killed mid-backlog, the server killed and
/// restarted from its append-only file, an observer stopped while retention
/// trims its stream.
@Suite(
    "Redis Streams: durable identities and retention under faults", .serialized, .timeLimit(.minutes(10)),
    .enabled(if: RedisTestServer.suitesRun, RedisTestServer.skipReason))
struct RedisFaultTests {
    /// The server's count of calls per command since `CONFIG RESETSTAT`,
    /// and of those calls that failed or were refused, per command, so that
    /// every command a client sent counts (the test's own `INFO` and
    /// `CONFIG` left out); with the server's error replies by kind, for the
    /// message (`errorstats` also counts errors no command of the package's
    /// made, such as another client's protocol error).
    static func commandCounts(
        _ server: RedisTestServer
    ) throws -> (calls: [String: Int], errors: Int, said: String) {
        func text(_ section: String) throws -> String {
            guard case .bulkString(let bytes?) = try server.command("INFO", section) else { return "" }
            return String(decoding: bytes, as: UTF8.self)
        }
        var calls: [String: Int] = [:]
        var errors = 0
        for line in try text("commandstats").split(whereSeparator: \.isNewline)
        where line.hasPrefix("cmdstat_") {
            let parts = line.dropFirst("cmdstat_".count).split(separator: ":", maxSplits: 1)
            guard parts.count == 2, !parts[0].hasPrefix("info"), !parts[0].hasPrefix("config") else { continue }
            func field(_ name: String) -> Int {
                let value = parts[1].split(separator: ",").first { $0.hasPrefix(name + "=") }?.dropFirst(name.count + 1)
                return Int(value ?? "") ?? 0
            }
            calls[String(parts[0])] = field("calls")
            errors += field("failed_calls") + field("rejected_calls")
        }
        let said = try text("errorstats").split(whereSeparator: \.isNewline).filter { $0.hasPrefix("errorstat_") }
        return (calls, errors, said.joined(separator: " ") + " \(calls)")
    }

    @Test(
        "an idle reader sends one read per block and no command that fails: a name never posted, one posted before, and a durable identity; reconnecting, and after the server restarted empty, nothing fails either; a burst after the quiet comes whole",
        arguments: ["never", "posted", "durable"])
    func idleReaderSendsOnlyReads(kind: String) async throws {
        let server = try await RedisTestServer()
        let name: NotificationName = "idle.reader"
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        if kind == "posted" { try poster.post(Ping(index: -1), as: name) }
        let blocks = RedisStreamsConfiguration(blockTimeout: .milliseconds(100))
        let watcher = try redisHub(
            server, endpoint: "watcher", identity: kind == "durable" ? "auditor" : nil, configuration: blocks)
        defer { watcher.close() }
        let got = Collector<(index: Int, missed: Int)>()
        let token = try watcher.addObserver(.of(Ping.self, named: name), bufferingPolicy: .unbounded) {
            ping, delivery in
            got.append((ping.index, delivery.missed))
        }
        defer { token.cancel() }
        // Once quiet, the reader waits in the transport's shared watch: one
        // `XREAD` over the quiet names, whatever reads them (a durable
        // identity's group too: the watch takes nothing from it).
        let read = "xread"
        for round in ["from start", "after a new connection", "after a restart"] {
            let reconnects = watcher.transport.statistics.reconnects
            if round == "after a new connection" {
                _ = try server.command("CONFIG", "RESETSTAT")
                _ = try server.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            } else if round == "after a restart" {
                // Without persistence: every stream and group is gone.
                await server.kill()
                try await server.start()
            }
            if round != "from start" {
                // Connecting again asks what it must (whether the stream
                // and the group exist), and nothing it asks fails: no
                // `XINFO` of a key that is gone, no `XGROUP CREATE` of a
                // group that is there.
                #expect(await waitUntil { watcher.transport.statistics.reconnects > reconnects }, "\(kind)")
                #expect(await waitUntil { ((try? Self.commandCounts(server))?.calls[read] ?? 0) >= 3 })
                let connecting = try Self.commandCounts(server)
                #expect(connecting.errors == 0, "\(kind), \(round): \(connecting.said)")
                _ = try server.command("CONFIG", "RESETSTAT")
            }
            // Settled: reads went out on the connection and found nothing
            // (a durable identity's first, of its pending entries, too).
            #expect(await waitUntil { ((try? Self.commandCounts(server))?.calls[read] ?? 0) >= 3 })
            _ = try server.command("CONFIG", "RESETSTAT")
            #expect(await waitUntil { ((try? Self.commandCounts(server))?.calls[read] ?? 0) >= 20 })
            let counts = try Self.commandCounts(server)
            // Only reads, each blocking 100 ms: no counters, no check, no error.
            #expect(Set(counts.calls.keys) == [read], "\(kind), \(round): \(counts.calls)")
            #expect(counts.errors == 0, "\(kind), \(round): \(counts.said)")
        }
        // A burst after the quiet: the first read finds entries without
        // counters before it, and waits for those after it.
        for index in 0..<200 { try poster.post(Ping(index: index), as: name) }
        #expect(await waitUntil { got.values.map(\.index).last == 199 })
        #expect(got.values.map(\.index) == Array(0..<200))
        #expect(got.values.allSatisfy { $0.missed == 0 })
        let after = try Self.commandCounts(server)
        #expect(after.errors == 0, "\(kind): \(after.said)")
    }

    @Test(
        "a durable observer process SIGKILLed at random points in a backlog of 1,500, 12 rounds each way: all handled, every duplicate marked as a redelivery",
        arguments: ["sequence", "handler"])
    func observerKilled(mode: String) async throws {
        // This test is about the observer, not the server's disk: sync once a second.
        let server = try await RedisTestServer(arguments: ["--appendfsync", "everysec"])
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        var kills = 0
        var duplicates = 0
        for round in 0..<12 {
            let identity = "w\(round)"
            _ = try server.command("DEL", "tn:{test.helper.ping}")
            // The identity's first run starts at the stream's end: make its
            // group now, so all 1,500 below are its backlog.
            let first = try redisHub(server, endpoint: "durable", identity: identity)
            _ = try first.deliveries(.of(HelperPing.self))
            first.close()
            for index in 0..<1_500 { try poster.post(HelperPing(poster: 1, index: index)) }
            var last = 1_499
            var expected = Set(0...last)
            var handled: [Int: Int] = [:]
            var finished = false
            for run in 1...8 where !finished {
                if run > 1 {
                    // A fresh last entry: a run ends once it has read it, so
                    // it read everything before it (a killed run may have
                    // read and acknowledged the previous last one).
                    last += 1
                    try poster.post(HelperPing(poster: 1, index: last))
                    expected.insert(last)
                }
                let remaining = expected.count - handled.count
                // Killed, by the thread reading its output, at a random line
                // in its first three runs; at most two pages of short lines
                // (some 800) pass before the kill lands.
                let killed = run <= 3 && remaining > 1
                let helper = try HelperProcess(
                    ["fdurable", server.url(), identity, String(last), mode],
                    killedAtLine: killed ? 1 + Int.random(in: 1...min(300, remaining - 1)) : nil)
                let status = await helper.waitForExit()
                let said = helper.lines.values.contains("done")
                if !killed {
                    #expect(status == 0, "run \(run): \(helper.errors.values)")
                }
                if killed && !said { kills += 1 }
                duplicates += tallyDurableRun(helper.lines.values, run: run, into: &handled)
                // Only a run that ended by itself acknowledged all it handled.
                finished = !killed && said
            }
            #expect(finished)
            #expect(Set(handled.keys) == expected, "round \(round)")
            // Nothing is left pending in the identity's group.
            let count = try server.pendingCount("tn:{test.helper.ping}", group: identity)
            #expect(count == 0, "round \(round): \(count) entries still pending")
        }
        print("Redis \(mode): \(kills) kills, \(duplicates) duplicates, each marked")
        // The first run of every round was killed mid-backlog.
        #expect(kills >= 12)
    }

    @Test(
        "the server SIGKILLed twice and restarted from its append-only file: a durable observer gets all 600, nothing it acknowledged comes again, what comes again is marked"
    )
    func serverKilled() async throws {
        let server = try await RedisTestServer()
        let observer = try redisHub(server, endpoint: "observer", identity: "durable")
        defer { observer.close() }
        let seen = Collector<(index: Int, redelivery: Bool)>()
        let token = try observer.addObserver(.of(Ping.self)) { ping, delivery in
            seen.append((ping.index, delivery.isRedelivery))
        }
        defer { withExtendedLifetime(token) {} }
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        var acknowledgedBeforeKill: Set<Int> = []
        for index in 0..<600 {
            if index == 200 {
                // Killed once everything so far was handled and acknowledged:
                // none of it may come again.
                await seen.wait(forCount: 200)
                #expect(await waitUntil { observer.transport.statistics.acknowledged >= 200 })
                acknowledgedBeforeKill = Set(0..<200)
                await server.kill()
                try await server.start()
            }
            if index == 400 {
                // Killed mid-stream, while entries are being read and handled.
                await server.kill()
                try await server.start()
            }
            // A post fails fast with unreachable while the server is down or
            // the connection is new; retried until Redis acknowledges it.
            var attempts = 0
            while !succeeds({ () throws(TypedNotificationError) in try poster.post(Ping(index: index)) }) {
                attempts += 1
                try #require(attempts < 1_000, "post \(index) never acknowledged")
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        let arrived = await seen.wait(forCount: 600, upTo: safetyNet)
        var handled: Set<Int> = []
        for (index, redelivery) in seen.values {
            if handled.contains(index) {
                #expect(redelivery, "\(index) came again unmarked")
                #expect(!acknowledgedBeforeKill.contains(index), "\(index) had been acknowledged and came again")
            }
            handled.insert(index)
        }
        #expect(arrived)
        #expect(handled == Set(0..<600))
        #expect(observer.transport.statistics.reconnects >= 2)
    }

    @Test(
        "a durable identity with a buffer of 100 gets a backlog of 3,000 whole, none dropped, and its next run starts after it"
    )
    func durableIdentityWithSmallBuffer() async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        for index in 0..<3_000 { try poster.post(Ping(index: index)) }
        let first = try redisHub(server, endpoint: "durable", identity: "small", firstRead: .beginning)
        let sequence = try first.deliveries(.of(Ping.self), bufferingPolicy: .bufferingNewest(100))
        // The loop starts once a first read of the backlog was handed over:
        // a read bigger than the buffer would drop at once, and the group
        // would hold what was dropped as read.
        #expect(await waitUntil { first.transport.statistics.delivered >= 50 })
        let loop = Task {
            var seen: (indexes: [Int], missed: Int) = ([], 0)
            for await delivered in sequence {
                seen.indexes.append(delivered.notification.index)
                seen.missed += delivered.delivery.missed
                if seen.indexes.count == 3_000 { break }
            }
            return seen
        }
        // A safety net for a loop that waits for what was lost.
        let safetyNet = Task {
            try await Task.sleep(for: .seconds(60))
            loop.cancel()
        }
        let (indexes, missed) = await loop.value
        safetyNet.cancel()
        first.close()
        await first.closed()
        #expect(indexes == Array(0..<3_000))
        #expect(missed == 0)
        try poster.post(Ping(index: 3_000))
        let second = try redisHub(server, endpoint: "durable", identity: "small", firstRead: .beginning)
        defer { second.close() }
        var again = try second.deliveries(.of(Ping.self)).makeAsyncIterator()
        let next = await again.next()
        #expect(next?.notification.index == 3_000)
        #expect(next?.delivery.isRedelivery == false)
    }

    @Test(
        "a loop stopped by a cancel at random moments, 200 runs: each post handled once, in order, none lost"
    )
    func cancelsAtRandomMoments() async throws {
        let server = try await RedisTestServer()
        let url = server.url()
        let seen = try await playCancelsAtRandomMoments(rounds: 200) { identity in
            try RedisStreamsTransport(url: url, identity: identity, firstRead: .beginning)
        }
        #expect(seen.skipped.isEmpty)
        #expect(seen.last == seen.posted - 1)
        #expect(seen.repeated == 0)
        print("Redis: \(seen.posted) posts over 200 cancelled runs, \(seen.repeated) repeated")
    }

    @Test(
        "a loop whose task is cancelled while its body runs has handled that delivery: it is acknowledged, and the next run starts after it, unmarked"
    )
    func cancelledWhileBodyRuns() async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        let (handled, next) = try await playCancelWhileLoopBodyRuns(
            durable: { try redisHub(server, endpoint: "durable", identity: "w") }, poster: poster)
        #expect(handled == [0, 1, 2])
        #expect(next?.notification.index == 3)
        #expect(next?.delivery.isRedelivery == false)
    }

    @Test(
        "a durable loop that leaves after the first of 20 acknowledges only that one: the 19 it took and never handled come again, marked, when the name is observed again"
    )
    func abandonedEntries() async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        let observer = try redisHub(server, endpoint: "observer", identity: "leaver")
        defer { observer.close() }
        let sequence = try observer.deliveries(.of(Ping.self))
        for index in 0..<20 { try poster.post(Ping(index: index)) }
        // All 20 read and queued for the loop, which takes them together.
        #expect(await waitUntil { observer.transport.statistics.delivered >= 20 })
        for await delivered in sequence {
            #expect(delivered.notification.index == 0)
            break
        }
        #expect(await waitUntil { observer.transport.statistics.acknowledged >= 1 })
        // Observed again (the name was unsubscribed when the loop left): the
        // group hands this identity what it read and never acknowledged.
        let seen = Collector<(index: Int, redelivery: Bool)>()
        let token = try observer.addObserver(.of(Ping.self)) { ping, delivery in
            seen.append((ping.index, delivery.isRedelivery))
        }
        defer { withExtendedLifetime(token) {} }
        #expect(await seen.wait(forCount: 19, upTo: safetyNet))
        #expect(seen.values.map(\.index) == Array(1..<20))
        #expect(seen.values.allSatisfy { $0.redelivery })
        #expect(observer.transport.statistics.acknowledged >= 1)
        #expect(await waitUntil { observer.transport.statistics.acknowledged == 20 })
    }

    /// Whether a reader of `server` waits in a blocking read.
    private static func readerBlocked(_ server: RedisTestServer) -> Bool {
        readers(of: server).contains { $0.contains("flags=b") }
    }

    /// The `CLIENT LIST` lines of the transports' reading connections.
    private static func readers(of server: RedisTestServer) -> [Substring] {
        guard case .bulkString(let list?) = try? server.command("CLIENT", "LIST") else { return [] }
        return String(decoding: list, as: UTF8.self).split(separator: "\n").filter { $0.contains("name=tn-reader") }
    }

    /// Rounds of a durable identity whose only observer leaves, and at once
    /// a post: each round's observer first gets what the round before posted
    /// after its observer left. Returns every delivery, and how many entries
    /// the identity had pending right after each post.
    private static func leaveThenPost(
        rounds: Int, server: RedisTestServer, url: String, identity: String
    ) async throws -> (seen: [(index: Int, redelivery: Bool)], pending: [Int]) {
        let poster = try NotificationHub(endpoint: "poster", transport: RedisStreamsTransport(url: url))
        defer { poster.close() }
        let seen = Collector<(index: Int, redelivery: Bool)>()
        var pending: [Int] = []
        for round in 0..<rounds {
            let durable = try NotificationHub(
                endpoint: "durable", transport: RedisStreamsTransport(url: url, identity: identity))
            defer { durable.close() }
            let token = try durable.addObserver(.of(Ping.self)) { ping, delivery in
                seen.append((ping.index, delivery.isRedelivery))
            }
            // What the previous round posted, handled and acknowledged;
            // then this one's read waits.
            #expect(await seen.wait(forCount: round, upTo: safetyNet))
            #expect(await waitUntil { durable.transport.statistics.acknowledged == min(round, 1) })
            #expect(await waitUntil { readerBlocked(server) })
            // The last observer leaves, so the name is unsubscribed, and at
            // once a post: no read of this run may take it.
            token.cancel()
            try poster.post(Ping(index: round))
            pending.append(try server.pendingCount("tn:{\(Ping.name.rawValue)}", group: identity))
        }
        return (seen.values, pending)
    }

    @Test(
        "a post made right after a durable observer's cancel returned goes to the identity's next observer unmarked, 40 rounds: the reader's connection is ended at the server first"
    )
    func postedAfterLeaving() async throws {
        let server = try await RedisTestServer()
        let (seen, pending) = try await Self.leaveThenPost(
            rounds: 40, server: server, url: server.url(), identity: "svc")
        #expect(pending.allSatisfy { $0 == 0 }, "pending after each post: \(pending)")
        #expect(seen.map(\.index) == Array(0..<39))
        #expect(seen.allSatisfy { !$0.redelivery })
    }

    @Test(
        "a post made right after a durable hub's closed() returned goes to the next run unmarked, though a handler held the transport's thread when close() was called"
    )
    func postedAfterClose() async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        let seen = Collector<(index: Int, redelivery: Bool)>()
        let holding = Collector<Int>()
        /// A run: observes with a handler on the transport's thread, which
        /// holds it for 2.5 s on a post of index -1.
        func run() throws -> (NotificationHub<RedisStreamsTransport>, ObservationToken) {
            let durable = try redisHub(server, endpoint: "durable", identity: "svc")
            let token = try durable.addObserver(.of(Ping.self)) { ping, delivery in
                if ping.index < 0 {
                    holding.append(ping.index)
                    Thread.sleep(forTimeInterval: 2.5)
                } else {
                    seen.append((ping.index, delivery.isRedelivery))
                }
            }
            return (durable, token)
        }
        for round in 0..<2 {
            let (durable, token) = try run()
            defer { withExtendedLifetime(token) {} }
            #expect(await seen.wait(forCount: round, upTo: safetyNet))
            try poster.post(Ping(index: -1))
            #expect(await holding.wait(forCount: round + 1, upTo: safetyNet))
            // close() does not wait for the loop, which the handler holds;
            // the reads end at the server once the close is done.
            durable.close()
            await durable.closed()
            try poster.post(Ping(index: round))
            #expect(await waitUntil { Self.readers(of: server).isEmpty })
        }
        let (last, token) = try run()
        defer {
            token.cancel()
            last.close()
        }
        #expect(await seen.wait(forCount: 2, upTo: safetyNet))
        #expect(seen.values.map(\.index) == [0, 1])
        #expect(seen.values.allSatisfy { !$0.redelivery }, "\(seen.values)")
    }

    @Test(
        "an ACL user with only the commands the Across hosts article lists posts, observes as a durable identity, and stops with its read ended at the server; without client|kill it still works"
    )
    func leastPrivilege() async throws {
        let server = try await RedisTestServer()
        for (user, kill) in [("lean", true), ("nokill", false)] {
            let rules =
                ["on", ">pw", "~tn:*", "+@stream", "+sismember", "+sadd", "+smembers", "+client|setname", "+client|id"]
                + (kill ? ["+client|kill"] : [])
            let reply = try server.command(bytes: (["ACL", "SETUSER", user] + rules).map { Array($0.utf8) })
            #expect(reply == .simpleString("OK"))
            let (seen, pending) = try await Self.leaveThenPost(
                rounds: 3, server: server, url: server.url(credentials: "\(user):pw@"), identity: user)
            if kill {
                // Every post after a cancel was left for the next run.
                #expect(pending.allSatisfy { $0 == 0 }, "pending after each post: \(pending)")
                #expect(seen.map(\.index) == [0, 1])
                #expect(seen.allSatisfy { !$0.redelivery })
            } else {
                // Nothing lost: each post reached the next run, marked at worst.
                #expect(Set(seen.map(\.index)) == [0, 1])
            }
            let key = "tn:{\(Ping.name.rawValue)}"
            _ = try server.command("DEL", key)
        }
    }

    @Test(
        "close() of a durable identity reading four names from a server that stopped answering (SIGSTOP) waits for it once, not once a reader"
    )
    func closeWithSilentServer() async throws {
        let server = try await RedisTestServer()
        var options = try RedisConnectionOptions(url: server.url())
        options.commandTimeout = .seconds(1)
        let durable = try NotificationHub(
            endpoint: "durable", transport: RedisStreamsTransport(options: options, identity: "svc"))
        let names: [NotificationName] = ["test.a", "test.b", "test.c", "test.d"]
        let tokens = try names.map { name in try durable.addObserver(.of(String.self, named: name)) { _, _ in } }
        defer {
            for token in tokens { token.cancel() }
        }
        #expect(await waitUntil { Self.readers(of: server).filter { $0.contains("flags=b") }.count == 4 })
        server.signal(SIGSTOP)
        defer { server.signal(SIGCONT) }
        let clock = ContinuousClock()
        let started = clock.now
        durable.close()
        await durable.closed()
        let waited = clock.now - started
        // Once a reader, it would be four command timeouts (4 s); once, 1 s
        // and the loop's end. A generous bound, not a speed measurement.
        #expect(waited < .seconds(3), "close() waited \(waited)")
    }

    @Test(
        "an acknowledgement the server refuses (ACL -xack when it is sent) is kept and sent again once allowed: nothing stays pending"
    )
    func refusedAcknowledgement() async throws {
        let server = try await RedisTestServer()
        #expect(
            try server.command("ACL", "SETUSER", "app", "on", ">secret", "~*", "&*", "+@all") == .simpleString("OK"))
        let durable = try NotificationHub(
            endpoint: "durable",
            transport: RedisStreamsTransport(url: server.url(credentials: "app:secret@"), identity: "svc"))
        defer { durable.close() }
        // The handler runs on an actor of its own, not on the transport's
        // thread, which must stay free to send acknowledgements; the actor
        // runs on a thread of its own too, so holding it keeps none of the
        // shared pool's two threads from the rest of the run.
        let release = DispatchSemaphore(value: 0)
        let seen = Collector<Int>()
        // The observer holds its actor weakly: the test keeps it.
        let tally = try ThreadActor()
        defer { tally.loop.stopAndJoin() }
        let token = try durable.addObserver(.of(Ping.self), on: tally) { _, ping, _ in
            // The tenth is held until the server refuses acknowledgements.
            if ping.index == 9 { _ = release.wait(timeout: .now() + 60) }
            seen.append(ping.index)
        }
        defer { withExtendedLifetime((token, tally)) {} }
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        for index in 0..<10 { try poster.post(Ping(index: index)) }
        #expect(await seen.wait(forCount: 9, upTo: safetyNet))
        #expect(await waitUntil { durable.transport.statistics.acknowledged == 9 })
        #expect(try server.command("ACL", "SETUSER", "app", "-xack") == .simpleString("OK"))
        release.signal()
        // Refused: the server logs it.
        #expect(
            await waitUntil {
                guard case .array(let log?) = try? server.command("ACL", "LOG") else { return false }
                return !log.isEmpty
            })
        #expect(durable.transport.statistics.acknowledged == 9)
        #expect(try server.command("ACL", "SETUSER", "app", "+xack") == .simpleString("OK"))
        // Kept, and sent again.
        #expect(await waitUntil { durable.transport.statistics.acknowledged == 10 })
        #expect(try server.pendingCount("tn:{\(Ping.name.rawValue)}", group: "svc") == 0)
    }

    @Test(
        "a server that stops answering (SIGSTOP) is noticed by the readers' watchdog, which connects again once it answers; nothing is lost"
    )
    func unansweredRead() async throws {
        let server = try await RedisTestServer()
        var options = try RedisConnectionOptions(url: server.url())
        options.commandTimeout = .milliseconds(200)
        // A read may go unanswered 100 + 200 ms before it counts as lost.
        let transport = try RedisStreamsTransport(
            options: options, configuration: RedisStreamsConfiguration(blockTimeout: .milliseconds(100)))
        let observer = try NotificationHub(endpoint: "observer", transport: transport)
        defer { observer.close() }
        let seen = Collector<Int>()
        let token = try observer.addObserver(.of(Ping.self)) { ping, _ in seen.append(ping.index) }
        defer { withExtendedLifetime(token) {} }
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        try poster.post(Ping(index: 0))
        #expect(await seen.wait(forCount: 1, upTo: safetyNet))
        #expect(transport.statistics.reconnects == 0)
        // The fault: stopped for three times the reader's patience.
        server.signal(SIGSTOP)
        try await Task.sleep(for: .milliseconds(900))
        server.signal(SIGCONT)
        try poster.post(Ping(index: 1))
        #expect(await seen.wait(forCount: 2, upTo: safetyNet))
        #expect(seen.values == [0, 1])
        // Without the watchdog the old read just resumes: no reconnect.
        #expect(transport.statistics.reconnects >= 1)
    }

    @Test(
        "a flood to a slow loop with the default buffer arrives whole: the reader reads no more while the loop is backed up"
    )
    func backedUpObserver() async throws {
        let server = try await RedisTestServer(arguments: ["--appendfsync", "everysec"])
        let observer = try redisHub(server, endpoint: "observer")
        defer { observer.close() }
        // The default buffer: the newest 1,024.
        var iterator = try observer.deliveries(.of(Ping.self)).makeAsyncIterator()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        // 5,000, then an end marker the loop stops at.
        for index in 0...5_000 { try poster.post(Ping(index: index)) }
        var received: [Int] = []
        var missed = 0
        while let delivered = await iterator.next() {
            missed += delivered.delivery.missed
            if delivered.notification.index == 5_000 { break }
            received.append(delivered.notification.index)
            // A slow loop: 100 µs of work per notification, while the
            // stream holds all 5,000 at once.
            let until = ContinuousClock.now + .microseconds(100)
            while ContinuousClock.now < until {}
        }
        #expect(received == Array(0..<5_000))
        #expect(missed == 0)
        #expect(observer.metrics.dropped == 0)
    }

    @Test("a durable identity's first run starts where it chose; later runs resume where it stopped")
    func firstRead() async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        for index in 0..<100 { try poster.post(Ping(index: index)) }
        let starts: [(String, ReadStart, [Int])] = [
            ("at-end", .end, [100]), ("from-start", .beginning, Array(0...100)), ("newest", .newest(2), [98, 99, 100]),
        ]
        var hubs: [NotificationHub<RedisStreamsTransport>] = []
        var sequences: [DeliverySequence<Ping>] = []
        for (identity, start, _) in starts {
            let hub = try redisHub(server, endpoint: identity, identity: identity, firstRead: start)
            hubs.append(hub)
            sequences.append(try hub.deliveries(.of(Ping.self)))
        }
        try poster.post(Ping(index: 100))
        for (position, (identity, _, expected)) in starts.enumerated() {
            var iterator = sequences[position].makeAsyncIterator()
            var got: [Int] = []
            while got.count < expected.count, let delivered = await iterator.next() {
                #expect(!delivered.delivery.isRedelivery)
                got.append(delivered.notification.index)
            }
            #expect(got == expected, "\(identity)")
            // Closed holding the last one, not acknowledged; its reads end at
            // the server once the close is done.
            hubs[position].close()
            await hubs[position].closed()
        }
        try poster.post(Ping(index: 101))
        try poster.post(Ping(index: 102))
        // The second run of "at-end" resumes: 100 again, marked, then what
        // was posted while it was not running.
        let again = try redisHub(server, endpoint: "at-end", identity: "at-end", firstRead: .end)
        defer { again.close() }
        var iterator = try again.deliveries(.of(Ping.self)).makeAsyncIterator()
        var got: [(Int, Bool)] = []
        while got.count < 3, let delivered = await iterator.next() {
            got.append((delivered.notification.index, delivered.delivery.isRedelivery))
        }
        #expect(got.map(\.0) == [100, 101, 102])
        #expect(got.map(\.1) == [true, false, false])
    }

    @Test(
        "an observer process stopped while retention trims its stream is told, on SIGCONT, exactly how many it missed, of senders it never heard from too",
        arguments: [false, true])
    func behindRetention(stoppedWhileWaiting: Bool) async throws {
        let server = try await RedisTestServer(arguments: ["--appendfsync", "everysec"])
        let observer = try HelperProcess(["observe-total", server.url(), "5000"])
        await observer.waitForLine(startingWith: "ready")
        if stoppedWhileWaiting {
            // Its read waits at the server: the first post is handed to it
            // (into its socket) before retention trims the rest.
            #expect(await waitUntil { Self.readerBlocked(server) })
        }
        // Otherwise stopped at once, most likely before its first read: it
        // has heard nothing of either poster when their posts are trimmed.
        observer.signal(SIGSTOP)
        await waitUntilStopped(observer.pid)
        let first = try redisHub(server, endpoint: "first", configuration: .init(maximumLength: 100))
        defer { first.close() }
        let second = try redisHub(server, endpoint: "second", configuration: .init(maximumLength: 100))
        defer { second.close() }
        for index in 0..<2_500 {
            try first.post(HelperPing(poster: 1, index: index))
            try second.post(HelperPing(poster: 2, index: index))
        }
        // Redis trims whole nodes of 100 entries: a few hundred at most remain.
        guard case .integer(let length) = try server.command("XLEN", "tn:{test.helper.ping}") else {
            throw RedisTestFailure("XLEN")
        }
        #expect(length < 400)
        observer.signal(SIGCONT)
        #expect(await observer.waitForExit() == 0, "\(observer.errors.values)")
        let done = try #require(observer.lines.values.first { $0.hasPrefix("done") }.map(parseDone))
        let count = try #require(done["count"].flatMap { Int($0) })
        let missed = try #require(done["missed"].flatMap { Int($0) })
        // Exactly: what it read and what it was told it missed are every post.
        #expect(count + missed == 5_000)
        #expect(missed >= 5_000 - 400)
    }

    @Test(
        "retention by age: a post trims the entries older than maximumAge (whole nodes of the stream), and a durable identity away meanwhile is told exactly how many it missed"
    )
    func retentionByAge() async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(
            server, endpoint: "poster",
            configuration: .init(maximumLength: nil, maximumAge: .seconds(1)))
        defer { poster.close() }
        let key = "tn:{\(Ping.name.rawValue)}"
        // A first run of the identity takes post 0.
        let first = try redisHub(server, endpoint: "durable", identity: "svc")
        let seen = Collector<Int>()
        let token = try first.addObserver(.of(Ping.self)) { ping, _ in seen.append(ping.index) }
        try poster.post(Ping(index: 0))
        #expect(await seen.wait(forCount: 1, upTo: safetyNet))
        #expect(await waitUntil { first.transport.statistics.acknowledged == 1 })
        token.cancel()
        first.close()
        await first.closed()
        // Away while 300 more are posted and grow older than the age limit;
        // a trim goes out at most once a second per name, so the wait is
        // the limit itself, not synchronisation.
        for index in 1...300 { try poster.post(Ping(index: index)) }
        try await Task.sleep(for: .milliseconds(2_200))
        try poster.post(Ping(index: 301))
        // Every node of old entries went; the last node holds 300 and 301.
        guard case .integer(let length) = try server.command("XLEN", key) else { throw RedisTestFailure("XLEN") }
        #expect(length >= 1 && length <= 100, "XLEN \(length)")
        // The identity's next run: what is left, and the rest as missed.
        let second = try redisHub(server, endpoint: "durable", identity: "svc")
        defer { second.close() }
        var received: [Int] = []
        var missed = 0
        for await delivered in try second.deliveries(.of(Ping.self)) {
            missed += delivered.delivery.missed
            received.append(delivered.notification.index)
            if delivered.notification.index == 301 { break }
        }
        #expect(received.count == Int(length))
        #expect(received.count + missed == 301)
        #expect(received == Array((302 - received.count)...301))
    }

    @Test(
        "a durable identity away while retention trims its stream is told exactly how many it missed on its next run, and not again on the run after"
    )
    func durableBehindRetention() async throws {
        let server = try await RedisTestServer(arguments: ["--appendfsync", "everysec"])
        let poster = try redisHub(server, endpoint: "poster", configuration: .init(maximumLength: 100))
        defer { poster.close() }
        /// Every index delivered so far, over all runs.
        var seen: Set<Int> = []
        /// One run of the identity: reads until `total` posts from `first`
        /// on are received or counted missed; returns (received, missed).
        /// An entry a run took from Redis and never handled comes again,
        /// marked, on the next: a run's last delivery, or an entry Redis
        /// handed a closing run's blocked read just before it saw the
        /// connection close. It counts once; an unmarked one never comes twice.
        func run(from first: Int, until total: Int) async throws -> (received: Int, missed: Int) {
            let durable = try redisHub(server, endpoint: "durable", identity: "svc")
            defer { durable.close() }
            var received = 0
            var missed = 0
            for await delivered in try durable.deliveries(.of(Ping.self)) {
                missed += delivered.delivery.missed
                let index = delivered.notification.index
                let new = seen.insert(index).inserted
                if !delivered.delivery.isRedelivery { #expect(new, "\(index) came again unmarked") }
                if new && index >= first { received += 1 }
                if received + missed >= total { break }
            }
            return (received, missed)
        }
        // The first run makes the group and reads 10 posts.
        let started = try redisHub(server, endpoint: "durable", identity: "svc")
        var iterator = try started.deliveries(.of(Ping.self)).makeAsyncIterator()
        for index in 0..<10 { try poster.post(Ping(index: index)) }
        for _ in 0..<10 { seen.insert(try #require(await iterator.next()).notification.index) }
        started.close()
        await started.closed()
        // Away while 3,000 posts are trimmed to a few hundred.
        for index in 10..<3_010 { try poster.post(Ping(index: index)) }
        let second = try await run(from: 10, until: 3_000)
        #expect(second.received + second.missed == 3_000)
        #expect(second.missed >= 3_000 - 400)
        // Redis's counter was raised past what was counted: the next run,
        // after 50 more posts, is told of no loss.
        for index in 3_010..<3_060 { try poster.post(Ping(index: index)) }
        let third = try await run(from: 3_010, until: 50)
        #expect(third == (received: 50, missed: 0))
    }
}
