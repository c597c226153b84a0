import Foundation
import Testing

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsRedis
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

/// A hub over Redis at `server`.
func redisHub(
    _ server: RedisTestServer,
    endpoint: String = "test",
    identity: String? = nil,
    firstRead: ReadStart = .end,
    configuration: RedisStreamsConfiguration = .init()
) throws -> NotificationHub<RedisStreamsTransport> {
    try NotificationHub(
        endpoint: endpoint,
        transport: RedisStreamsTransport(
            url: server.url(), identity: identity, firstRead: firstRead, configuration: configuration))
}

@Suite("Redis URLs")
struct RedisURLTests {
    @Test("every URL form reads into host, port, user, password and database")
    func forms() throws {
        let plain = try RedisConnectionOptions(url: "redis://cache.internal")
        #expect(
            (plain.host, plain.port, plain.username, plain.password, plain.database) == (
                "cache.internal", 6379, nil, nil, 0
            ))
        let full = try RedisConnectionOptions(url: "redis://app:s%40cret@10.0.0.5:7000/3")
        #expect(
            (full.host, full.port, full.username, full.password, full.database) == (
                "10.0.0.5", 7000, "app", "s@cret", 3
            ))
        let passwordOnly = try RedisConnectionOptions(url: "redis://:pw@h")
        #expect(passwordOnly.username == nil && passwordOnly.password == "pw")
        let ipv6 = try RedisConnectionOptions(url: "redis://[::1]:6380")
        #expect((ipv6.host, ipv6.port) == ("::1", 6380))
        let unix = try RedisConnectionOptions(url: "unix:///run/redis/redis.sock?db=2")
        #expect((unix.host, unix.isUnixSocket, unix.database) == ("/run/redis/redis.sock", true, 2))
    }

    @Test("rediss:// is refused with how to tunnel TLS, never connected in plaintext")
    func tlsRefused() {
        #expect {
            _ = try RedisStreamsTransport(url: "rediss://app:pw@cache.internal:6380")
        } throws: { error in
            guard let error = error as? TypedNotificationError else { return false }
            return error.code == .invalidConfiguration && error.message.contains("TLS")
                && error.message.contains("tunnel") && !error.message.contains("pw")
        }
    }

    @Test(
        "bad URLs are typed errors that never show the password",
        arguments: [
            "cache.internal:6379", "http://h", "redis://", "redis://h:0", "redis://h:70000", "redis://h:x",
            "redis://u:secret@h/notanumber", "redis://[::1", "unix://relative", "redis://u:%zz@h", "redis://h?x=1",
        ]
    )
    func badURLs(_ url: String) {
        #expect {
            _ = try RedisConnectionOptions(url: url)
        } throws: { error in
            guard let error = error as? TypedNotificationError else { return false }
            return error.code == .invalidConfiguration && !error.message.contains("secret")
        }
    }

    @Test("printing options hides the password")
    func redacted() throws {
        let options = try RedisConnectionOptions(url: "redis://app:hunter2@h:1/2")
        #expect("\(options)" == "redis://app:***@h:1/2")
        #expect(!String(reflecting: options).contains("hunter2") || "\(options)".contains("***"))
    }

    @Test("a bad identity or key prefix is refused before any key is built")
    func badIdentity() {
        #expect(throws: TypedNotificationError.self) { try RedisStreamsTransport(url: "redis://h", identity: "a b") }
        #expect(throws: TypedNotificationError.self) {
            try RedisStreamsTransport(url: "redis://h", configuration: .init(keyPrefix: "tn}{x"))
        }
    }
}

@Suite(
    "Redis Streams transport against a real server", .serialized, .timeLimit(.minutes(10)),
    .enabled(if: RedisTestServer.suitesRun, RedisTestServer.skipReason))
struct RedisStreamsTransportTests {
    @Test("a typed post reaches another hub with its sender, sequence and value, in order")
    func roundTrip() async throws {
        let server = try await RedisTestServer()
        let observer = try redisHub(server, endpoint: "observer")
        defer { observer.close() }
        var iterator = try observer.deliveries(.of(Ping.self)).makeAsyncIterator()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        for index in 0..<100 { try poster.post(Ping(index: index)) }
        for index in 0..<100 {
            let delivered = try #require(await iterator.next())
            #expect(delivered.notification.index == index)
            #expect(delivered.delivery.sender.endpoint == "poster")
            #expect(delivered.delivery.sequence == UInt64(index + 1))
            #expect(delivered.delivery.missed == 0)
        }
        #expect(poster.transport.statistics.posted == 100)
        #expect(observer.transport.statistics.delivered == 100)
        // The stream holds exactly the envelopes, one per post.
        #expect(try server.command("XLEN", "tn:{test.ping}") == .integer(100))
    }

    @Test("a durable identity whose group is destroyed while it reads gets what was posted meanwhile")
    func groupDestroyed() async throws {
        // The adversary: `XGROUP DESTROY` by an operator. The group used to
        // be made again at the stream's end, so posts made while it was
        // gone were skipped with nothing reported.
        let server = try await RedisTestServer()
        let observer = try redisHub(server, endpoint: "observer", identity: "gizmo")
        defer { observer.close() }
        let got = Collector<Int>()
        let token = try observer.addObserver(.of(Ping.self), bufferingPolicy: .unbounded) { ping, delivery in
            if !delivery.isRedelivery { got.append(ping.index) }
        }
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        try poster.post(Ping(index: 0))
        #expect(await got.wait(forCount: 1, upTo: safetyNet))
        #expect(try server.command("XGROUP", "DESTROY", "tn:{test.ping}", "gizmo") == .integer(1))
        for index in 1...5 { try poster.post(Ping(index: index)) }
        #expect(await got.wait(forCount: 6, upTo: safetyNet))
        #expect(got.values == Array(0...5))
        token.cancel()
    }

    @Test("registration is immediate: a post right after subscribing, from another hub, is received")
    func immediateRegistration() async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        // Entries from before the registration are not read (the stream's end).
        for index in 0..<5 { try poster.post(Ping(index: index)) }
        for round in 0..<20 {
            let observer = try redisHub(server, endpoint: "observer")
            var iterator = try observer.deliveries(.of(Ping.self)).makeAsyncIterator()
            try poster.post(Ping(index: 1000 + round))
            let delivered = try #require(await iterator.next())
            #expect(delivered.notification.index == 1000 + round)
            observer.close()
        }
    }

    @Test("hostile entries are skipped and counted, never delivered; the valid ones around them arrive")
    func hostileEntries() async throws {
        let server = try await RedisTestServer()
        let observer = try redisHub(server, endpoint: "observer")
        defer { observer.close() }
        var iterator = try observer.deliveries(.of(Ping.self)).makeAsyncIterator()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        try poster.post(Ping(index: 1))
        // A valid envelope, for forging variants of it.
        let valid = try #require(try poster.transport.latestMessage(of: Ping.name))
        guard case .encoded(let encoded) = valid.payload else { throw RedisTestFailure("not encoded") }
        var flipped = Array(encoded.envelope)
        flipped[flipped.count / 2] ^= 0xFF
        var hugeLength = Array(encoded.envelope)
        for offset in 8..<16 { hugeLength[offset] = 0xFF }
        let otherName = try #require(try? pingEnvelope(named: "test.other"))
        let key = Array("tn:{test.ping}".utf8)
        let forgeries: [[[UInt8]]] = [
            [Array("e".utf8), Array("garbage".utf8)],
            [Array("e".utf8), flipped],
            [Array("e".utf8), hugeLength],
            [Array("e".utf8), []],
            [Array("x".utf8), Array(encoded.envelope)],
            [Array("e".utf8), Array(encoded.envelope), Array("f".utf8), Array("1".utf8)],
            [Array("e".utf8), otherName],
            [Array("e".utf8), [UInt8](repeating: 0xFF, count: 100_000)],
        ]
        for fields in forgeries {
            let reply = try server.command(bytes: [Array("XADD".utf8), key, Array("*".utf8)] + fields)
            guard case .bulkString = reply else { throw RedisTestFailure("XADD failed: \(reply)") }
        }
        try poster.post(Ping(index: 2))
        let first = try #require(await iterator.next())
        let second = try #require(await iterator.next())
        #expect(first.notification.index == 1 && second.notification.index == 2)
        #expect(second.delivery.missed == 0)
        #expect(observer.transport.statistics.corruptEntriesSkipped == forgeries.count)
    }

    @Test("a wrong password is authenticationFailed; the right one works; an unreachable server is unreachable")
    func credentials() async throws {
        let server = try await RedisTestServer(arguments: ["--requirepass", "right-password"])
        #expect {
            _ = try NotificationHub(
                endpoint: "x", transport: RedisStreamsTransport(url: server.url(credentials: ":wrong-password@")))
        } throws: { error in
            let error = error as? TypedNotificationError
            return error?.code == .authenticationFailed && error?.message.contains("wrong-password") == false
        }
        #expect {
            _ = try NotificationHub(endpoint: "x", transport: RedisStreamsTransport(url: server.url()))
        } throws: { ($0 as? TypedNotificationError)?.code == .authenticationFailed }
        let hub = try NotificationHub(
            endpoint: "x", transport: RedisStreamsTransport(url: server.url(credentials: ":right-password@")))
        var iterator = try hub.deliveries(.of(Ping.self)).makeAsyncIterator()
        try hub.post(Ping(index: 7))
        #expect(await iterator.next()?.notification.index == 7)
        hub.close()
        let closedPort = try RedisTestServer.freePort()
        #expect {
            _ = try NotificationHub(
                endpoint: "x", transport: RedisStreamsTransport(url: "redis://127.0.0.1:\(closedPort)"))
        } throws: { ($0 as? TypedNotificationError)?.code == .unreachable }
    }

    @Test("latest(_:) reads the newest valid entry without observing")
    func latest() async throws {
        let server = try await RedisTestServer()
        let hub = try redisHub(server)
        defer { hub.close() }
        #expect(try hub.latest(.of(Ping.self)) == nil)
        for index in 0..<3 { try hub.post(Ping(index: index)) }
        _ = try server.command("XADD", "tn:{test.ping}", "*", "e", "garbage")
        let latest = try #require(try hub.latest(.of(Ping.self)))
        #expect(latest.notification.index == 2)
        #expect(latest.delivery.sequence == 3)
    }

    @Test(
        "post(contentsOf:) goes out pipelined: 640 posts reach the server in a few reads, not 640, and arrive in order")
    func pipelinedPosts() async throws {
        let server = try await RedisTestServer()
        let observer = try redisHub(server, endpoint: "observer")
        defer { observer.close() }
        var iterator = try observer.deliveries(.of(Ping.self)).makeAsyncIterator()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        func readsProcessed() throws -> Int {
            guard case .bulkString(let text?) = try server.command("INFO", "stats") else { return -1 }
            let line = String(decoding: text, as: UTF8.self).split(separator: "\r\n")
                .first { $0.hasPrefix("total_reads_processed:") }
            return line.flatMap { Int($0.dropFirst("total_reads_processed:".count)) } ?? -1
        }
        let before = try readsProcessed()
        #expect(try poster.post(contentsOf: (0..<640).map { Ping(index: $0) }) == 640)
        let pipelined = try readsProcessed() - before
        // One read per batch of 64 (a batch may arrive in two), plus INFO itself.
        #expect((1...40).contains(pipelined), "\(pipelined) reads for 640 pipelined posts")
        let single = try readsProcessed()
        for index in 640..<740 { try poster.post(Ping(index: index)) }
        #expect(try readsProcessed() - single >= 100, "one by one, each post is a read of its own")
        var received: [Int] = []
        while received.count < 740, let delivered = await iterator.next() {
            received.append(delivered.notification.index)
        }
        #expect(received == Array(0..<740))
    }

    @Test("connections killed by the server (CLIENT KILL) are made again; nothing posted meanwhile is lost")
    func clientKill() async throws {
        let server = try await RedisTestServer()
        let observer = try redisHub(server, endpoint: "observer")
        defer { observer.close() }
        var iterator = try observer.deliveries(.of(Ping.self)).makeAsyncIterator()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        var received: [Int] = []
        var kills = 0
        for index in 0..<300 {
            if index % 100 == 50 {
                // Each kill finds the reader connected again after the
                // previous one; the posts right after a kill are made while
                // it is not.
                #expect(await waitUntil { observer.transport.statistics.reconnects >= kills })
                _ = try server.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
                kills += 1
            }
            // A post whose connection was killed under it fails with
            // unreachable: the poster is told, and retries once.
            if !succeeds({ () throws(TypedNotificationError) in try poster.post(Ping(index: index)) }) {
                try poster.post(Ping(index: index))
            }
        }
        while received.count < 300 {
            guard let delivered = await iterator.next() else { break }
            received.append(delivered.notification.index)
        }
        // Every index, in order; a post whose connection died after Redis
        // stored it may be there twice (the retry), never missing.
        #expect(Array(Set(received)).sorted() == Array(0..<300) || received.count >= 300)
        var deduplicated: [Int] = []
        for index in received where deduplicated.last != index { deduplicated.append(index) }
        #expect(deduplicated.prefix(300) == ArraySlice(0..<300))
        #expect(observer.transport.statistics.reconnects >= 3)
        #expect(kills == 3)
    }

    @Test("a post while the server is down fails at once with unreachable; after a restart, posting resumes")
    func serverDown() async throws {
        let server = try await RedisTestServer()
        let hub = try redisHub(server)
        defer { hub.close() }
        try hub.post(Ping(index: 0))
        await server.kill()
        let started = ContinuousClock.now
        #expect {
            try hub.post(Ping(index: 1))
        } throws: { ($0 as? TypedNotificationError)?.code == .unreachable }
        #expect {
            try hub.post(Ping(index: 2))
        } throws: { ($0 as? TypedNotificationError)?.code == .unreachable }
        // Fail fast: no waiting for the server (a generous bound: refused connections take microseconds).
        #expect(ContinuousClock.now - started < .seconds(5))
        try await server.start()
        // Posts fail fast within the backoff (at most 2 s); one after it succeeds.
        var attempts = 1
        while !succeeds({ () throws(TypedNotificationError) in try hub.post(Ping(index: 3)) }), attempts < 100 {
            attempts += 1
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(attempts < 100)
        #expect(try hub.latest(.of(Ping.self))?.notification.index == 3)
    }
}

/// A valid envelope of a `Ping` under another name.
func pingEnvelope(named name: String) throws -> [UInt8] {
    let encoded = try NotificationEnvelope.encode(
        name: try NotificationName(validating: name), sender: try forgedSender(instance: 1), sequence: 1,
        timestamp: .now
    ) { buffer in
        try Ping(index: 9).encodePayload(into: &buffer)
    }
    return Array(encoded.envelope)
}

/// Whether `body` ran without throwing.
func succeeds(_ body: () throws(TypedNotificationError) -> Void) -> Bool {
    do {
        try body()
        return true
    } catch {
        return false
    }
}
