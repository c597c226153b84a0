import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@testable import TypedNotificationsRedis

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The Redis transport's namespaces against the processes and servers that
/// break them: a name first posted after the observer subscribed, by a
/// long-lived poster and by a new process; a durable namespace identity
/// killed mid-backlog and restarted while new names appeared; names spread
/// over a cluster's masters; announcements trimmed or forged by hand.
@Suite(
    "Redis Streams: a namespace observer between processes", .serialized, .timeLimit(.minutes(10)),
    .enabled(if: RedisTestServer.suitesRun, RedisTestServer.skipReason))
struct RedisNamespaceTests {
    @Test(
        "a long-lived poster and a new process both reach tnotify watch 'test.jobs.*' with names first posted after it started; no history, a near miss never"
    )
    func newNamesFromEveryone() async throws {
        let server = try await RedisTestServer()
        let redis = ["--transport", "redis", "--url", server.url()]
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        try await playNewNamesFromEveryone(transport: redis) { name, index in
            try poster.post(Ping(index: index), as: name)
        }
    }

    @Test(
        "a durable namespace identity killed mid-backlog and restarted gets every notification at least once, names that appeared while it was away from their first entry"
    )
    func durableIdentityKilledWhileNamesAppear() async throws {
        let server = try await RedisTestServer()
        let redis = ["--transport", "redis", "--url", server.url()]
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        try await playDurableNamespaceKill(transport: redis) { name, index in
            try poster.post(Ping(index: index), as: name)
        }
        // ls shows the durable namespace observer, none of the bookkeeping keys.
        let listed = try await tnotify(["ls"] + redis)
        let lines = listed.output.map { $0.trimmingCharacters(in: .whitespaces) }
        // Ten old names, five new, and the new process's.
        #expect(lines.contains("test.jobs.*  namespace, 16 names announced"), "\(listed.output)")
        #expect(lines.contains("identity dashboard observes it: 0 names being started"))
        #expect(!listed.output.contains { $0.contains("names:") || $0.contains("new:") })
    }

    @Test(
        "a namespace's announcements hold one entry per name, not per post or poster; a name is not announced to its own namespace"
    )
    func oneAnnouncementPerName() async throws {
        let server = try await RedisTestServer()
        let names: [NotificationName] = ["test.count.a", "test.count.b.c", "test.count"]
        for poster in 0..<4 {
            let hub = try redisHub(server, endpoint: "poster\(poster)")
            for index in 0..<25 { for name in names { try hub.post(Ping(index: index), as: name) } }
            hub.close()
        }
        let transport = try RedisStreamsTransport(url: server.url())
        func length(_ namespace: NotificationNamespace) throws -> RESPValue {
            try server.command("XLEN", transport.discoveryKey(of: namespace))
        }
        // `test` holds all three, `test.count` the two below it, `test.count.b` one.
        #expect(try length("test") == .integer(3))
        #expect(try length("test.count") == .integer(2))
        #expect(try length("test.count.b") == .integer(1))
        #expect(try length("test.count.a") == .integer(0))
        #expect(try server.command("SCARD", transport.namesKey(of: "test.count")) == .integer(2))
    }

    @Test(
        "announcements forged or trimmed by hand: forged entries start nothing, and names whose announcements were trimmed before a durable identity read them are found in the set and read from their first entry"
    )
    func forgedAndTrimmedAnnouncements() async throws {
        let server = try await RedisTestServer()
        let transport = try RedisStreamsTransport(url: server.url())
        let stream = transport.discoveryKey(of: "test.trim")
        let away = try redisHub(server, endpoint: "away", identity: "auditor")
        _ = try away.deliveries(.of(Ping.self, in: "test.trim"))
        away.close()
        // Hostile entries: another namespace's name, no name, a bad field.
        _ = try server.command("XADD", stream, "*", "n", "other.name")
        _ = try server.command("XADD", stream, "*", "n", "test.trim..bad")
        _ = try server.command("XADD", stream, "*", "x", "test.trim.field")
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        for index in 0..<5 { try poster.post(Ping(index: index), as: "test.trim.a") }
        for index in 0..<3 { try poster.post(Ping(index: index), as: "test.trim.b.c") }
        // Trimmed before the identity came back to read them.
        _ = try server.command("XTRIM", stream, "MAXLEN", "0")
        let back = try redisHub(server, endpoint: "away", identity: "auditor")
        defer { back.close() }
        let got = Collector<String>()
        let token = try back.addObserver(.of(Ping.self, in: "test.trim")) { ping, delivery in
            got.append("\(delivery.name) \(ping.index)")
        }
        defer { token.cancel() }
        #expect(await got.wait(forCount: 8, upTo: safetyNet))
        try poster.post(Ping(index: 9), as: "test.trim.a")
        #expect(await got.wait(forCount: 9, upTo: safetyNet))
        #expect(
            got.values.sorted()
                == [
                    "test.trim.a 0", "test.trim.a 1", "test.trim.a 2", "test.trim.a 3", "test.trim.a 4",
                    "test.trim.a 9",
                ]
                + ["test.trim.b.c 0", "test.trim.b.c 1", "test.trim.b.c 2"])
    }

    @Test(
        "a server restarted without its data: a long-lived poster announces its names again, so a namespace observer started after the restart gets the poster's next post"
    )
    func restartLosesAnnouncements() async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        try poster.post(Ping(index: 0), as: "test.restart.a")
        await server.kill()
        // The append-only file goes too: the server comes back empty.
        try FileManager.default.removeItem(atPath: server.directory + "/appendonlydir")
        try await server.start()
        #expect(try server.command("DBSIZE") == .integer(0))
        let observer = try redisHub(server, endpoint: "observer")
        defer { observer.close() }
        let got = Collector<Int>()
        let token = try observer.addObserver(.of(Ping.self, in: "test.restart")) { ping, _ in got.append(ping.index) }
        defer { token.cancel() }
        // The poster learns of the restart from its broken connection.
        try poster.post(Ping(index: 1), as: "test.restart.a")
        #expect(await got.wait(forCount: 1, upTo: safetyNet))
        try poster.post(Ping(index: 2), as: "test.restart.a")
        #expect(await got.wait(forCount: 2, upTo: safetyNet))
        #expect(got.values == [1, 2])
    }

    @Test(
        "a durable identity stopped after it read a name's announcement and before it made the name's group reads the name from its first entry on its next run"
    )
    func killedBetweenAnnouncementAndGroup() async throws {
        let server = try await RedisTestServer()
        let transport = try RedisStreamsTransport(url: server.url())
        let first = try redisHub(server, endpoint: "audit", identity: "audit")
        _ = try first.deliveries(.of(Ping.self, in: "test.det"))
        first.close()
        await first.closed()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        try poster.post(Ping(index: 0), as: "test.det.a")
        // The killed run's read: the announcement is pending, no group on the name.
        let stream = transport.discoveryKey(of: "test.det")
        let read = try server.command("XREADGROUP", "GROUP", "audit", "audit", "COUNT", "10", "STREAMS", stream, ">")
        #expect(read != .array(nil))
        try poster.post(Ping(index: 1), as: "test.det.a")
        let back = try redisHub(server, endpoint: "audit", identity: "audit")
        defer { back.close() }
        let got = Collector<Int>()
        let token = try back.addObserver(.of(Ping.self, in: "test.det")) { ping, _ in got.append(ping.index) }
        defer { token.cancel() }
        #expect(await got.wait(forCount: 2, upTo: safetyNet))
        #expect(got.values == [0, 1])
    }

    @Test(
        "a post whose announcement Redis refuses fails with a typed error, posts nothing and leaves the name unannounced, so a later post announces it"
    )
    func refusedAnnouncement() async throws {
        let server = try await RedisTestServer()
        // May write names' streams and sets, not announcements.
        let rules = ["on", ">pw", "~tn:{*", "~tn:names:*", "&*", "+@all"]
        #expect(
            try server.command(bytes: (["ACL", "SETUSER", "noannounce"] + rules).map { Array($0.utf8) })
                == .simpleString("OK"))
        let observer = try redisHub(server, endpoint: "observer")
        defer { observer.close() }
        let got = Collector<Int>()
        let token = try observer.addObserver(.of(Ping.self, in: "test.acl")) { ping, _ in got.append(ping.index) }
        defer { token.cancel() }
        let refused = try NotificationHub(
            endpoint: "refused", transport: RedisStreamsTransport(url: server.url(credentials: "noannounce:pw@")))
        defer { refused.close() }
        #expect {
            try refused.post(Ping(index: 0), as: "test.acl.job")
        } throws: { error in
            (error as? TypedNotificationError)?.code == .authenticationFailed
        }
        let transport = try RedisStreamsTransport(url: server.url())
        #expect(try server.command("SCARD", transport.namesKey(of: "test.acl")) == .integer(0))
        #expect(try server.command("EXISTS", "tn:{test.acl.job}") == .integer(0))
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        try poster.post(Ping(index: 1), as: "test.acl.job")
        #expect(await got.wait(forCount: 1, upTo: safetyNet))
        #expect(got.values == [1])
    }

    @Test(
        "a name of the namespace whose key is not a stream is not read and is said in readerErrors; the rest of the namespace goes on, plain or durable; names whose announcements were trimmed are found in the set"
    )
    func foreignKeyAndTrimmedAnnouncements() async throws {
        let server = try await RedisTestServer()
        let transport = try RedisStreamsTransport(url: server.url())
        _ = try server.command("SET", "tn:{test.odd.string}", "x")
        _ = try server.command("XADD", transport.discoveryKey(of: "test.odd"), "*", "n", "test.odd.string")
        _ = try server.command("SADD", transport.namesKey(of: "test.odd"), "test.odd.string")
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        try poster.post(Ping(index: 0), as: "test.odd.early")
        // Announcements trimmed: the set still names both.
        _ = try server.command("XTRIM", transport.discoveryKey(of: "test.odd"), "MAXLEN", "0")
        for (round, identity) in [nil, "audit"].enumerated() {
            let observer = try redisHub(server, endpoint: "observer", identity: identity)
            defer { observer.close() }
            let got = Collector<String>()
            let token = try observer.addObserver(.of(Ping.self, in: "test.odd")) { ping, delivery in
                got.append("\(delivery.name) \(ping.index)")
            }
            defer { token.cancel() }
            #expect(
                await waitUntil { observer.transport.readerErrors["test.odd.string"] != nil }, "\(identity ?? "plain")")
            _ = try server.command("XADD", transport.discoveryKey(of: "test.odd"), "*", "n", "test.odd.string")
            try poster.post(Ping(index: 1 + 10 * round), as: "test.odd.early")
            try poster.post(Ping(index: 2 + 10 * round), as: "test.odd.late")
            // A durable identity cannot tell whether a name whose announcement
            // was trimmed is older than itself: it reads it from the start.
            let expected =
                identity == nil
                ? ["test.odd.early 1", "test.odd.late 2"]
                : ["test.odd.early 0", "test.odd.early 1", "test.odd.early 11", "test.odd.late 12"]
            #expect(await got.wait(forCount: expected.count, upTo: safetyNet), "\(identity ?? "plain")")
            #expect(got.values.sorted() == expected, "\(identity ?? "plain")")
            #expect(observer.failure == nil)
        }
    }

    @Test(
        "names observed by name share connections once quiet, on a standalone server: 100 names, plain and durable, hold one watch and a few spare connections (a connection has one blocking read at a time), and a post to any arrives in order"
    )
    func quietNamesByNameShare() async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        let names = try (0..<100).map { try NotificationName(validating: "test.byname.n\($0)") }
        for identity in [nil, "auditor"] as [String?] {
            let observer = try redisHub(
                server, endpoint: "observer", identity: identity,
                configuration: RedisStreamsConfiguration(blockTimeout: .milliseconds(200)))
            let got = Collector<(name: String, index: Int, missed: Int)>()
            let tokens = try names.map { name in
                try observer.addObserver(.of(Ping.self, named: name)) { ping, delivery in
                    got.append((delivery.name.rawValue, ping.index, delivery.missed))
                }
            }
            // Quiet after one empty read each: one watch, a few spare.
            let quiet = 1 + IdleReaders.spareLimit
            #expect(await waitUntil { observer.transport.statistics.parkedReaders >= 100 })
            #expect(await waitUntil { server.clients(named: "tn-reader") <= quiet }, "\(String(describing: identity))")
            #expect(observer.transport.idleWatchCount == 1)

            let posted = names.prefix(10)
            for index in 1...3 { for name in posted { try poster.post(Ping(index: index), as: name) } }
            #expect(await got.wait(forCount: 30, upTo: safetyNet))
            for name in posted {
                #expect(got.values.filter { $0.name == name.rawValue }.map { $0.index } == [1, 2, 3])
            }
            #expect(got.values.allSatisfy { $0.missed == 0 })
            for token in tokens { token.cancel() }
            observer.close()
        }
    }

    @Test(
        "a plain namespace observer over 300 names holds one connection for its quiet names, not one each; a quiet name posted to, trimmed meanwhile or after a restart, is read in order with its losses counted exactly"
    )
    func quietNamesShareOneConnection() async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        let names = try (0..<300).map { try NotificationName(validating: "test.quiet.n\($0)") }
        for name in names { try poster.post(Ping(index: 0), as: name) }
        // Reads come back empty after 200 ms without a post: then a name is quiet.
        let observer = try redisHub(
            server, endpoint: "observer", configuration: RedisStreamsConfiguration(blockTimeout: .milliseconds(200)))
        defer { observer.close() }
        let got = Collector<(name: String, index: Int, missed: Int)>()
        let token = try observer.addObserver(.of(Ping.self, in: "test.quiet")) { ping, delivery in
            got.append((delivery.name.rawValue, ping.index, delivery.missed))
        }
        defer { token.cancel() }
        let connections = { server.clients(named: "tn-reader") }
        // The 300 listed names start quiet: one watch, and the announcements' reader.
        // (Every connection the observer reads on is named tn-reader.)
        #expect(await waitUntil { observer.transport.statistics.parkedReaders >= 300 })
        #expect(await waitUntil { connections() == 2 })

        // Posts to 30 quiet names, and to a name new to the namespace.
        let posted = names.prefix(30)
        for index in 1...3 { for name in posted { try poster.post(Ping(index: index), as: name) } }
        try poster.post(Ping(index: 1), as: "test.quiet.new")
        #expect(await got.wait(forCount: 91, upTo: safetyNet))
        for name in posted {
            #expect(got.values.filter { $0.name == name.rawValue }.map { $0.index } == [1, 2, 3])
        }
        #expect(got.values.allSatisfy { $0.missed == 0 })
        // Quiet again: back to one watch, a few connections kept spare.
        let quiet = 2 + IdleReaders.spareLimit
        #expect(await waitUntil { connections() <= quiet })
        #expect(await waitUntil { observer.transport.idleWatchCount == 1 })

        // Five entries added and three of them trimmed in one transaction
        // while the name waits: the wake comes after both.
        let trimmed = names[100]
        let key = observer.transport.key(for: trimmed)
        let forger = try forgedSender(instance: 77)
        let transaction = try RedisConnection.connect(RedisConnectionOptions(port: server.port))
        _ = try transaction.call([Array("MULTI".utf8)])
        for sequence in 1...5 {
            let message = try forgedMessage(
                Ping(index: 10 + sequence), named: trimmed, from: forger, sequence: UInt64(sequence))
            guard case .encoded(let encoded) = message.payload else { throw RedisTestFailure("not encoded") }
            _ = try transaction.call(["XADD", key, "*", "e"].map { Array($0.utf8) } + [Array(encoded.envelope)])
        }
        _ = try transaction.call(["XTRIM", key, "MAXLEN", "2"].map { Array($0.utf8) })
        _ = try transaction.call([Array("EXEC".utf8)])
        #expect(await got.wait(forCount: 93, upTo: safetyNet))
        let afterTrim = got.values.filter { $0.name == trimmed.rawValue }
        #expect(afterTrim.map { $0.index } == [14, 15])
        #expect(afterTrim.first?.missed == 3)
        let woken = observer.transport.statistics.wokenReaders
        #expect(woken >= 31)

        // The server restarts empty while every name waits: the watch's
        // connection breaks, each name finds its stream gone, and the next
        // post is read all the same.
        #expect(await waitUntil { connections() <= quiet })
        await server.kill()
        try FileManager.default.removeItem(atPath: server.directory + "/appendonlydir")
        try await server.start()
        try poster.post(Ping(index: 4), as: names[200])
        #expect(await got.wait(forCount: 94, upTo: safetyNet))
        #expect(got.values.last.map { [$0.name, String($0.index)] } == [names[200].rawValue, "4"])
        #expect(observer.transport.statistics.wokenReaders > woken)
    }

    @Test(
        "a server that takes 40 clients: a namespace of 300 names, each posted three times, arrives whole and in order, the observer waiting its turn for connections rather than failing"
    )
    func fewClientsAllowed() async throws {
        let server = try await RedisTestServer(arguments: ["--maxclients", "40"])
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        let observer = try redisHub(
            server, endpoint: "observer", configuration: RedisStreamsConfiguration(blockTimeout: .milliseconds(200)))
        defer { observer.close() }
        let got = Collector<(name: String, index: Int)>()
        let token = try observer.addObserver(.of(Ping.self, in: "test.crowd")) { ping, delivery in
            got.append((delivery.name.rawValue, ping.index))
        }
        defer { token.cancel() }
        let names = try (0..<300).map { try NotificationName(validating: "test.crowd.n\($0)") }
        try await offThePool {
            for index in 0..<3 { for name in names { try poster.post(Ping(index: index), as: name) } }
        }
        #expect(await got.wait(forCount: 900, upTo: safetyNet))
        for name in names {
            #expect(got.values.filter { $0.name == name.rawValue }.map { $0.index } == [0, 1, 2])
        }
        // Refused connections were waited out, not tried in a loop.
        #expect(observer.transport.statistics.failedReconnects < 1_000)
        // Once quiet, the observer leaves the server room for others.
        #expect(await waitUntil { server.clients(named: "tn-reader") <= 2 + IdleReaders.spareLimit })
    }

    @Test(
        "a name whose key is replaced by a non-stream is said in readerErrors while the rest goes on, and read again once its key is a stream again"
    )
    func keyReplacedAndRestored() async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        try poster.post(Ping(index: 0), as: "test.swap.a")
        try poster.post(Ping(index: 0), as: "test.swap.b")
        let observer = try redisHub(
            server, endpoint: "observer", configuration: RedisStreamsConfiguration(blockTimeout: .milliseconds(200)))
        defer { observer.close() }
        let got = Collector<String>()
        let token = try observer.addObserver(.of(Ping.self, in: "test.swap")) { ping, delivery in
            got.append("\(delivery.name.rawValue):\(ping.index)")
        }
        defer { token.cancel() }
        let key = observer.transport.key(for: "test.swap.b")
        _ = try server.command("DEL", key)
        _ = try server.command("SET", key, "junk")
        try poster.post(Ping(index: 1), as: "test.swap.a")
        #expect(await got.wait(forCount: 1, upTo: safetyNet))
        #expect(await waitUntil { observer.transport.readerErrors["test.swap.b"] != nil })
        try poster.post(Ping(index: 2), as: "test.swap.a")
        #expect(await got.wait(forCount: 2, upTo: safetyNet))
        // A stream again: its posts come, and the error goes.
        _ = try server.command("DEL", key)
        try poster.post(Ping(index: 1), as: "test.swap.b")
        try poster.post(Ping(index: 2), as: "test.swap.b")
        #expect(await got.wait(forCount: 4, upTo: safetyNet))
        #expect(got.values == ["test.swap.a:1", "test.swap.a:2", "test.swap.b:1", "test.swap.b:2"])
        #expect(await waitUntil { observer.transport.readerErrors.isEmpty })
    }

    @Test(
        "a durable namespace identity over 300 names waits on one connection while they are quiet; a quiet name's posts come once, acknowledged, and those posted while it was away come on its next run as first deliveries"
    )
    func durableQuietNames() async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        let names = try (0..<300).map { try NotificationName(validating: "test.still.n\($0)") }
        for name in names { try poster.post(Ping(index: 0), as: name) }
        let configuration = RedisStreamsConfiguration(blockTimeout: .milliseconds(200))
        func observe(_ got: Collector<(name: String, index: Int, again: Bool)>) throws -> (
            NotificationHub<RedisStreamsTransport>, ObservationToken
        ) {
            let hub = try redisHub(server, endpoint: "dashboard", identity: "still", configuration: configuration)
            let token = try hub.addObserver(.of(Ping.self, in: "test.still")) { ping, delivery in
                got.append((delivery.name.rawValue, ping.index, delivery.isRedelivery))
            }
            return (hub, token)
        }
        let connections = { server.clients(named: "tn-reader") }
        let got = Collector<(name: String, index: Int, again: Bool)>()
        var (observer, token) = try observe(got)
        // Every name reads its pending entries first, then goes quiet.
        #expect(await waitUntil { observer.transport.statistics.parkedReaders >= 300 })
        #expect(await waitUntil { connections() <= 2 + IdleReaders.spareLimit })

        let posted = Array(names.prefix(30))
        for index in 1...3 { for name in posted { try poster.post(Ping(index: index), as: name) } }
        #expect(await got.wait(forCount: 90, upTo: safetyNet))
        for name in posted {
            #expect(got.values.filter { $0.name == name.rawValue }.map { $0.index } == [1, 2, 3])
        }
        #expect(got.values.allSatisfy { !$0.again })
        let key = observer.transport.key(for: posted[0])
        #expect(await waitUntil { (try? server.pendingCount(key, group: "still")) == 0 })
        #expect(await waitUntil { connections() <= 2 + IdleReaders.spareLimit })

        // Away: two posts to a quiet name come on the next run, unmarked.
        token.cancel()
        observer.close()
        await observer.closed()
        try poster.post(Ping(index: 4), as: names[150])
        try poster.post(Ping(index: 5), as: names[150])
        let next = Collector<(name: String, index: Int, again: Bool)>()
        (observer, token) = try observe(next)
        defer {
            token.cancel()
            observer.close()
        }
        #expect(await next.wait(forCount: 2, upTo: safetyNet))
        #expect(next.values.map { $0.index } == [4, 5])
        #expect(next.values.allSatisfy { $0.name == names[150].rawValue && !$0.again })
    }

    @Test(
        "10,000 names first posted after a plain observer or a durable identity subscribed, each delivered once, on a bounded number of connections",
        arguments: [nil, "many"] as [String?])
    func tenThousandNames(identity: String?) async throws {
        await MachineLoad.acquire()
        defer { MachineLoad.release() }
        let server = try await RedisTestServer()
        let observer = try redisHub(server, endpoint: "observer", identity: identity)
        defer { observer.close() }
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        let count = manyNames
        let got = Collector<String>()
        let token = try observer.addObserver(.of(Ping.self, in: "test.many")) { _, delivery in
            got.append(delivery.name.rawValue)
        }
        defer { token.cancel() }
        let mostConnections = Locked(0)
        let mostListed = Locked(0)
        let connections = { @Sendable in server.clients(named: "tn-reader") }
        let started = ContinuousClock.now
        let rssBefore = residentKiB()
        try await offThePool {
            for index in 0..<count {
                try poster.post(Ping(index: index), as: NotificationName(validating: "test.many.n\(index)"))
                if index % 500 == 0 {
                    let listed = server.clients(named: "tn-reader", everyListed: true)
                    let now = connections()
                    mostConnections.withLock { $0 = max($0, now) }
                    mostListed.withLock { $0 = max($0, listed) }
                }
            }
        }
        #expect(await got.wait(forCount: count, upTo: safetyNet))
        let elapsed = ContinuousClock.now - started
        #expect(Set(got.values).count == count)
        // At most the reading connections, the announcements' reader, the
        // spare ones and the watches (one per 500 to 1,000 quiet names, 16 more).
        #expect(observer.transport.mostNamesReadingAtOnce <= IdleReaders.readingLimit)
        let bound = IdleReaders.readingLimit + 1 + IdleReaders.spareLimit + 16 + count / 500
        #expect(mostConnections.withLock { $0 } <= bound)
        #expect(await waitUntil { connections() <= 2 + IdleReaders.spareLimit + count / 500 })
        try poster.post(Ping(index: -1), as: "test.many.n0")
        #expect(await got.wait(forCount: count + 1, upTo: safetyNet))
        #expect(got.values.count == count + 1)
        print(
            "\(count) new names through one Redis namespace (identity \(identity ?? "none")): delivered in \(elapsed), at most \(mostConnections.withLock { $0 }) reading connections (the server listed up to \(mostListed.withLock { $0 }), closed ones too; names reading at once: up to \(observer.transport.mostNamesReadingAtOnce)), \(observer.transport.idleWatchCount) watches at the end, RSS +\(residentKiB() - rssBefore) KiB"
        )
    }

    @Test(
        "unsubscribing a namespace stops its names but one still observed by name; posts a namespace no longer covers reach nobody"
    )
    func unsubscribeKeepsNamedObservers() async throws {
        let server = try await RedisTestServer()
        let observer = try redisHub(server, endpoint: "observer")
        defer { observer.close() }
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        let inNamespace = Collector<String>()
        let named = Collector<Int>()
        let namespaceToken = try observer.addObserver(.of(Ping.self, in: "test.both")) { _, delivery in
            inNamespace.append(delivery.name.rawValue)
        }
        let nameToken = try observer.addObserver(.of(Ping.self, named: "test.both.kept")) { ping, _ in
            named.append(ping.index)
        }
        defer { nameToken.cancel() }
        try poster.post(Ping(index: 0), as: "test.both.kept")
        try poster.post(Ping(index: 0), as: "test.both.other")
        #expect(await inNamespace.wait(forCount: 2, upTo: safetyNet))
        #expect(await named.wait(forCount: 1, upTo: safetyNet))
        namespaceToken.cancel()
        // Readers of names no longer observed are gone; the named one stays.
        #expect(await waitUntil { observer.transport.namesRead == ["test.both.kept"] })
        try poster.post(Ping(index: 1), as: "test.both.other")
        try poster.post(Ping(index: 1), as: "test.both.kept")
        #expect(await named.wait(forCount: 2, upTo: safetyNet))
        #expect(named.values == [0, 1])
        #expect(inNamespace.values.sorted() == ["test.both.kept", "test.both.other"])
    }
}

@Suite(
    "Redis Cluster: a namespace across slots", .serialized, .timeLimit(.minutes(10)),
    .enabled(if: RedisTestCluster.suiteRuns, RedisTestCluster.skipReason))
struct RedisClusterNamespaceTests {
    @Test(
        "names first posted after the subscription, spread over three masters, each reach a namespace observer through another node in order; a durable identity away finds the names made meanwhile"
    )
    func namesAcrossMasters() async throws {
        let cluster = try await RedisTestCluster()
        let observer = try NotificationHub(
            endpoint: "observer", transport: RedisStreamsTransport(url: cluster.url(node: 2)))
        defer { observer.close() }
        let got = Collector<String>()
        let token = try observer.addObserver(.of(Ping.self, in: "spread")) { ping, delivery in
            got.append("\(delivery.name) \(ping.index)")
        }
        defer { token.cancel() }
        let durable = try NotificationHub(
            endpoint: "durable", transport: RedisStreamsTransport(url: cluster.url(node: 1), identity: "audit"))
        _ = try durable.deliveries(.of(Ping.self, in: "spread"))
        durable.close()
        await durable.closed()
        let poster = try NotificationHub(
            endpoint: "poster", transport: RedisStreamsTransport(url: cluster.url(node: 0)))
        defer { poster.close() }
        let names = try (0..<24).map { try NotificationName(validating: "spread.n\($0)") }
        for index in 0..<3 { for name in names { try poster.post(Ping(index: index), as: name) } }
        try poster.post(Ping(index: 0), as: "spreadx")
        #expect(await got.wait(forCount: 72, upTo: safetyNet))
        for name in names {
            #expect(got.values.filter { $0.hasPrefix("\(name) ") } == (0..<3).map { "\(name) \($0)" })
        }
        var owners = Set<Int>()
        for name in names {
            owners.insert(
                try #require(try cluster.owner(ofSlot: try cluster.slot(of: poster.transport.key(for: name)))))
        }
        #expect(owners == [0, 1, 2])
        // The identity comes back through another node: every name from its first entry.
        let back = try NotificationHub(
            endpoint: "durable", transport: RedisStreamsTransport(url: cluster.url(node: 0), identity: "audit"))
        defer { back.close() }
        let resumed = Collector<String>()
        let resumedToken = try back.addObserver(.of(Ping.self, in: "spread")) { ping, delivery in
            resumed.append("\(delivery.name) \(ping.index)")
        }
        defer { resumedToken.cancel() }
        #expect(await resumed.wait(forCount: 72, upTo: safetyNet))
        try poster.post(Ping(index: 3), as: "spread.n0")
        #expect(await got.wait(forCount: 73, upTo: safetyNet))
        #expect(await resumed.wait(forCount: 73, upTo: safetyNet))
        #expect(Set(resumed.values).count == 73)
        #expect(!got.values.contains { $0.hasPrefix("spreadx") })
    }
}

/// This process's resident memory, from /proc (0 where there is none).
private func residentKiB() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
    else { return 0 }
    return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
}
