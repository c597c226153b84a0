import Foundation
import Testing
import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@testable import TypedNotificationsRedis

/// A hub on the cluster, through node `node`.
private func clusterHub(
    _ cluster: RedisTestCluster, node: Int, endpoint: String, identity: String? = nil
) throws -> NotificationHub<RedisStreamsTransport> {
    try NotificationHub(
        endpoint: endpoint, transport: RedisStreamsTransport(url: cluster.url(node: node), identity: identity))
}

/// A notification whose name hashes to slot 30, among the lowest 64 slots
/// that node 0 owns and the reshard moves.
private struct ReshardPing: TypedNotification, Codable {
    static let name: NotificationName = "reshard.n271"
    var index: Int
}

@Suite(
    "Redis Cluster: three real masters", .serialized, .timeLimit(.minutes(10)),
    .enabled(if: RedisTestCluster.suiteRuns, RedisTestCluster.skipReason))
struct RedisClusterTests {
    @Test("a key's hash slot is the server's (CLUSTER KEYSLOT), hash tags and their odd cases included")
    func hashSlots() async throws {
        let cluster = try await RedisTestCluster()
        // The CRC16 (XMODEM) check value: "123456789" is 0x31C3.
        #expect(HashSlot.of(Array("123456789".utf8)) == 0x31C3 % 16_384)
        var keys = ["tn:{test.ping}", "{}", "{", "}", "}{", "a{b}c", "a{}b{c}", "{{a}}", "x{y", "{a}{b}", "", "é{ü}"]
        for index in 0..<500 { keys.append("tn:{names.n\(index)}") }
        for key in keys {
            #expect(HashSlot.of(Array(key.utf8)) == (try cluster.slot(of: key)), "\(key)")
        }
        // Only the hash tag counts: every key of a name shares its slot.
        #expect(HashSlot.of(Array("tn:{a.b}".utf8)) == HashSlot.of(Array("other:{a.b}".utf8)))
    }

    @Test(
        "names spread over the three masters; posts through one node reach observers through another, in order; latest and ls find every stream"
    )
    func namesSpread() async throws {
        let cluster = try await RedisTestCluster()
        let names = try (0..<24).map { try NotificationName(validating: "spread.n\($0)") }
        let observer = try clusterHub(cluster, node: 2, endpoint: "observer")
        defer { observer.close() }
        var iterators = try names.map { try observer.deliveries(.of(Ping.self, named: $0)).makeAsyncIterator() }
        let poster = try clusterHub(cluster, node: 0, endpoint: "poster")
        defer { poster.close() }
        for index in 0..<20 {
            for name in names { try poster.post(Ping(index: index), as: name) }
        }
        for position in iterators.indices {
            for index in 0..<20 {
                let delivered = try #require(await iterators[position].next())
                #expect(delivered.notification.index == index)
                #expect(delivered.delivery.missed == 0)
            }
        }
        // Each stream is on the node that owns its slot, and all three hold some.
        var owners = Set<Int>()
        for name in names {
            let key = poster.transport.key(for: name)
            let owner = try #require(try cluster.owner(ofSlot: try cluster.slot(of: key)))
            #expect(try cluster.nodes[owner].command("XLEN", key) == .integer(20), "\(key)")
            owners.insert(owner)
        }
        #expect(owners == [0, 1, 2])
        // Redirections are learnt once per slot at most: the map comes from
        // CLUSTER SLOTS when the transport opens.
        #expect(poster.transport.statistics.redirections == 0)
        #expect(observer.transport.statistics.redirections == 0)
        let reader = try clusterHub(cluster, node: 1, endpoint: "reader")
        defer { reader.close() }
        for name in names {
            #expect(try reader.latest(.of(Ping.self, named: name))?.notification.index == 19)
        }
        let listed = try RedisStreamsTransport.streams(options: RedisConnectionOptions(url: cluster.url(node: 1)))
            .filter { !$0.isNamespace }
        #expect(listed.map(\.name).sorted() == names.map(\.rawValue).sorted())
        #expect(listed.allSatisfy { $0.length == 20 })
    }

    @Test(
        "slots resharded while posting (redis-cli --cluster reshard): nothing lost or reordered for a plain observer and a durable identity; acknowledgements follow the slot"
    )
    func reshardWhilePosting() async throws {
        let cluster = try await RedisTestCluster()
        // Three names in the lowest 64 slots, which node 0 owns and the
        // reshard moves to node 1.
        var found = [ReshardPing.name]
        var candidate = 0
        while found.count < 3 {
            let name = try NotificationName(validating: "reshard.n\(candidate)")
            if HashSlot.of(Array("tn:{\(name.rawValue)}".utf8)) < 64, name != found[0] { found.append(name) }
            candidate += 1
        }
        let names = found
        for name in names {
            let slot = try cluster.slot(of: "tn:{\(name.rawValue)}")
            let owner = try cluster.owner(ofSlot: slot)
            #expect(slot < 64 && owner == 0)
        }
        let observer = try clusterHub(cluster, node: 2, endpoint: "observer")
        defer { observer.close() }
        let durable = try clusterHub(cluster, node: 1, endpoint: "durable", identity: "svc")
        defer { durable.close() }
        var plainIterators = try names.map {
            try observer.deliveries(.of(ReshardPing.self, named: $0)).makeAsyncIterator()
        }
        var durableIterators = try names.map {
            try durable.deliveries(.of(ReshardPing.self, named: $0)).makeAsyncIterator()
        }
        let poster = try clusterHub(cluster, node: 0, endpoint: "poster")
        defer { poster.close() }

        // One thread posts until told to stop: one at a time, and every
        // tenth round a batch of the first name (post(contentsOf:), pipelined).
        let stop = Flag()
        let posted = Locked([Int](repeating: 0, count: 3))
        let failures = Locked<[String]>([])
        let posting = startThread {
            var round = 0
            var roundsAfterStop = 0
            while roundsAfterStop < 100 {
                if stop.isSet { roundsAfterStop += 1 }
                for (position, name) in names.enumerated() {
                    let next = posted.withLock { $0[position] }
                    do {
                        if round % 10 == 9 && position == 0 {
                            try poster.post(contentsOf: (next..<next + 5).map { ReshardPing(index: $0) })
                            posted.withLock { $0[position] += 5 }
                        } else {
                            try poster.post(ReshardPing(index: next), as: name)
                            posted.withLock { $0[position] += 1 }
                        }
                    } catch {
                        failures.withLock { $0.append("\(error)") }
                        return
                    }
                }
                round += 1
            }
        }
        // The reshard starts once posting is under way and runs beside it.
        #expect(await waitUntil { posted.withLock { $0[0] } >= 200 })
        try await cluster.reshard(slots: 64, from: 0, to: 1)
        stop.set()
        posting.wait()
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        for name in names { #expect(try cluster.owner(ofSlot: try cluster.slot(of: "tn:{\(name.rawValue)}")) == 1) }
        #expect(poster.transport.statistics.redirections > 0)

        let totals = posted.withLock { $0 }
        for position in names.indices {
            for index in 0..<totals[position] {
                let plain = try #require(await plainIterators[position].next())
                #expect(plain.notification.index == index)
                #expect(plain.delivery.missed == 0)
                let kept = try #require(await durableIterators[position].next())
                #expect(kept.notification.index == index)
                #expect(kept.delivery.missed == 0)
            }
        }
        // The readers followed their names to node 1.
        #expect(observer.transport.statistics.redirections >= names.count)
        // Every handled entry is acknowledged, on the node that has the
        // stream now: all but each name's last, which its loop still holds
        // (handled once the loop asks for the next).
        let handled = totals.reduce(0, +) - names.count
        #expect(await waitUntil { durable.transport.statistics.acknowledged == handled })
        for name in names {
            #expect(try cluster.nodes[1].pendingCount("tn:{\(name.rawValue)}", group: "svc") == 1, "\(name)")
        }
    }

    @Test(
        "a slot caught mid-migration (SETSLOT MIGRATING/IMPORTING, its key MIGRATEd): posts, reads and acknowledgements follow ASK, then MOVED once the slot is moved"
    )
    func askWhileMigrating() async throws {
        let cluster = try await RedisTestCluster()
        let key = "tn:{\(ReshardPing.name.rawValue)}"
        let slot = try cluster.slot(of: key)
        #expect(try cluster.owner(ofSlot: slot) == 0)
        let observer = try clusterHub(cluster, node: 2, endpoint: "observer")
        defer { observer.close() }
        let durable = try clusterHub(cluster, node: 1, endpoint: "durable", identity: "svc")
        defer { durable.close() }
        var plain = try observer.deliveries(.of(ReshardPing.self)).makeAsyncIterator()
        var kept = try durable.deliveries(.of(ReshardPing.self)).makeAsyncIterator()
        let poster = try clusterHub(cluster, node: 0, endpoint: "poster")
        defer { poster.close() }
        var next = 0
        func post(_ count: Int) throws {
            for _ in 0..<count {
                try poster.post(ReshardPing(index: next))
                next += 1
            }
        }
        func receive(upTo end: Int, from start: Int) async throws {
            for index in start..<end {
                let first = try #require(await plain.next())
                #expect(first.notification.index == index && first.delivery.missed == 0)
                let second = try #require(await kept.next())
                #expect(second.notification.index == index && second.delivery.missed == 0)
            }
        }
        try post(50)
        try await receive(upTo: 50, from: 0)
        // The slot starts to move: node 1 imports it, node 0 migrates it.
        let (source, target) = (try cluster.id(of: 0), try cluster.id(of: 1))
        #expect(
            try cluster.nodes[1].command("CLUSTER", "SETSLOT", "\(slot)", "IMPORTING", source) == .simpleString("OK"))
        #expect(
            try cluster.nodes[0].command("CLUSTER", "SETSLOT", "\(slot)", "MIGRATING", target) == .simpleString("OK"))
        try post(50)
        try await receive(upTo: 100, from: 50)
        // The key moves; node 0 answers ASK for it from now on.
        #expect(
            try cluster.nodes[0].command(
                "MIGRATE", "127.0.0.1", "\(cluster.nodes[1].port)", "", "0", "5000", "KEYS", key) == .simpleString("OK")
        )
        let before = poster.transport.statistics.redirections
        try post(50)
        // ASK does not move the slot in the map: each post was asked over.
        #expect(poster.transport.statistics.redirections - before == 50)
        try await receive(upTo: 150, from: 100)
        // The slot is node 1's: one MOVED, then straight there.
        for node in cluster.nodes {
            #expect(try node.command("CLUSTER", "SETSLOT", "\(slot)", "NODE", target) == .simpleString("OK"))
        }
        let asked = poster.transport.statistics.redirections
        try post(50)
        #expect(poster.transport.statistics.redirections - asked == 1)
        try await receive(upTo: 200, from: 150)
        #expect(await waitUntil { durable.transport.statistics.acknowledged == 199 })
        #expect(try cluster.nodes[1].pendingCount(key, group: "svc") == 1)
        #expect(try cluster.nodes[1].command("XLEN", key) == .integer(200))
    }

    @Test(
        "a master killed (SIGKILL) and restarted from its append-only file: posts to its slots fail fast with unreachable while others go on; then readers resume and nothing is lost"
    )
    func masterKilled() async throws {
        // Without full coverage the other masters keep serving their slots.
        let cluster = try await RedisTestCluster(arguments: ["--cluster-require-full-coverage", "no"])
        let onKilled = ReshardPing.name
        var candidate = 0
        var onLiving = try NotificationName(validating: "living.n0")
        while try cluster.owner(ofSlot: try cluster.slot(of: "tn:{\(onLiving.rawValue)}")) != 1 {
            candidate += 1
            onLiving = try NotificationName(validating: "living.n\(candidate)")
        }
        #expect(try cluster.owner(ofSlot: try cluster.slot(of: "tn:{\(onKilled.rawValue)}")) == 0)
        let observer = try clusterHub(cluster, node: 2, endpoint: "observer")
        defer { observer.close() }
        let durable = try clusterHub(cluster, node: 1, endpoint: "durable", identity: "svc")
        defer { durable.close() }
        var killedPlain = try observer.deliveries(.of(ReshardPing.self, named: onKilled)).makeAsyncIterator()
        var killedKept = try durable.deliveries(.of(ReshardPing.self, named: onKilled)).makeAsyncIterator()
        var living = try observer.deliveries(.of(ReshardPing.self, named: onLiving)).makeAsyncIterator()
        // Without replicas no one takes over: posts fail at once, not after
        // waiting for an election.
        let poster = try NotificationHub(
            endpoint: "poster",
            transport: RedisStreamsTransport(
                url: cluster.url(node: 1), configuration: RedisStreamsConfiguration(failoverWait: .zero)))
        defer { poster.close() }
        func receive(_ index: Int, on iterator: inout DeliverySequence<ReshardPing>.AsyncIterator) async throws {
            let delivered = try #require(await iterator.next())
            #expect(delivered.notification.index == index && delivered.delivery.missed == 0)
        }
        for index in 0..<50 {
            try poster.post(ReshardPing(index: index), as: onKilled)
            try poster.post(ReshardPing(index: index), as: onLiving)
        }
        for index in 0..<50 {
            try await receive(index, on: &killedPlain)
            try await receive(index, on: &killedKept)
            try await receive(index, on: &living)
        }

        await cluster.nodes[0].kill()
        let started = ContinuousClock.now
        #expect {
            try poster.post(ReshardPing(index: 50), as: onKilled)
        } throws: { ($0 as? TypedNotificationError)?.code == .unreachable }
        #expect(ContinuousClock.now - started < .seconds(5))
        for index in 50..<100 { try poster.post(ReshardPing(index: index), as: onLiving) }
        for index in 50..<100 { try await receive(index, on: &living) }

        try await cluster.nodes[0].start()
        try await cluster.waitUntilSettled()
        // Posts fail fast within the backoff (at most 2 s); one after it succeeds.
        var attempts = 1
        while !succeeds({ () throws(TypedNotificationError) in
            try poster.post(ReshardPing(index: 50), as: onKilled)
        }),
            attempts < 100
        {
            attempts += 1
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(attempts < 100)
        for index in 51..<100 { try poster.post(ReshardPing(index: index), as: onKilled) }
        // Both readers reconnected to the restarted master and resume where
        // they were: the first 50 are not read again, the next 50 arrive.
        for index in 50..<100 {
            try await receive(index, on: &killedPlain)
            try await receive(index, on: &killedKept)
        }
        #expect(observer.transport.statistics.reconnects > 0)
        #expect(try cluster.nodes[0].command("XLEN", "tn:{\(onKilled.rawValue)}") == .integer(100))
    }
}
