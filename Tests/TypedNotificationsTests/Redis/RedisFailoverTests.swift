import Foundation
import Testing
import TypedNotifications

@testable import TypedNotificationsRedis

/// A hub on the cluster, through node `node`.
private func failoverHub(
    _ cluster: RedisTestCluster, node: Int, endpoint: String, identity: String? = nil,
    configuration: RedisStreamsConfiguration = .init()
) throws -> NotificationHub<RedisStreamsTransport> {
    try NotificationHub(
        endpoint: endpoint,
        transport: RedisStreamsTransport(url: cluster.url(node: node), identity: identity, configuration: configuration)
    )
}

/// What a watcher got: each index, and whether it came marked as a redelivery.
private final class Watcher: Sendable {
    let hub: NotificationHub<RedisStreamsTransport>
    let got = Collector<(index: Int, redelivery: Bool, missed: Int)>()
    let token: ObservationToken

    init(_ hub: NotificationHub<RedisStreamsTransport>, name: NotificationName) throws {
        self.hub = hub
        let got = got
        token = try hub.addObserver(.of(Ping.self, named: name), bufferingPolicy: .unbounded) { ping, delivery in
            got.append((ping.index, delivery.isRedelivery, delivery.missed))
        }
    }

    /// The indices of first deliveries, in the order they came.
    var firstDeliveries: [Int] { got.values.filter { !$0.redelivery }.map(\.index) }
    /// Every index that came, first or again.
    var everything: Set<Int> { Set(got.values.map(\.index)) }

    func close() {
        token.cancel()
        hub.close()
    }

    /// Closes, and returns once the close is done: the durable identity's
    /// reads ended at the server, its last acknowledgements sent.
    func closeAndWait() async {
        close()
        await hub.closed()
    }
}

/// A name whose slot node `master` owns, found by trying `prefix.n0`, `prefix.n1`, ….
private func name(on master: Int, of cluster: RedisTestCluster, prefix: String) throws -> NotificationName {
    for candidate in 0..<10_000 {
        let name = try NotificationName(validating: "\(prefix).n\(candidate)")
        if try cluster.owner(ofSlot: try cluster.slot(of: "tn:{\(name.rawValue)}")) == master { return name }
    }
    throw RedisTestFailure("no name of \(prefix) hashes to node \(master)")
}

@Suite(
    "Redis Cluster failover: three masters, three replicas", .serialized, .timeLimit(.minutes(10)),
    .enabled(if: RedisTestCluster.suiteRuns, RedisTestCluster.skipReason))
struct RedisFailoverTests {
    @Test(
        "a master killed with SIGKILL, its replica promoted by the cluster: running plain and durable watchers, one through the dead node's URL, get every acknowledged post; posts wait for the election"
    )
    func masterKilledReplicaPromoted() async throws {
        let cluster = try await RedisTestCluster(replicas: 1, nodeTimeout: 1000)
        let (master, replica, other) = try cluster.failoverNodes(of: "tn:{failover.killed}")
        let killedName: NotificationName = "failover.killed"
        let otherMaster = try #require(try cluster.owner(ofSlot: try cluster.slot(of: "tn:{failover.other}")))
        let livingName =
            otherMaster == master ? try name(on: other, of: cluster, prefix: "failover.living") : "failover.other"

        // Watchers: plain through the node that dies (its URL is all it was
        // given), plain and durable through another.
        let throughDead = try Watcher(failoverHub(cluster, node: master, endpoint: "dead-url"), name: killedName)
        let plain = try Watcher(failoverHub(cluster, node: other, endpoint: "plain"), name: killedName)
        let durable = try Watcher(
            failoverHub(cluster, node: other, endpoint: "durable", identity: "svc"), name: killedName)
        let living = try Watcher(failoverHub(cluster, node: other, endpoint: "living"), name: livingName)
        let watchers = [throughDead, plain, durable]
        defer { for watcher in watchers + [living] { watcher.close() } }
        let poster = try failoverHub(cluster, node: other, endpoint: "poster")
        defer { poster.close() }

        for index in 0..<50 {
            try poster.post(Ping(index: index), as: killedName)
            try poster.post(Ping(index: index), as: livingName)
        }
        for watcher in watchers + [living] {
            #expect(await waitUntil { watcher.firstDeliveries.count == 50 })
        }

        await cluster.kill(node: master)
        // A watcher started during the election waits for it, as a post does.
        let late = try await offThePool {
            try Watcher(failoverHub(cluster, node: other, endpoint: "late"), name: killedName)
        }
        defer { late.close() }
        // Posts go on at once: those to the dead master's slot (and, while
        // the cluster says it is down, to every slot) wait for the election.
        let outcome = try await offThePool { () -> (acknowledged: [Int], failures: [TypedNotificationError]) in
            var acknowledged = Array(0..<50)
            var failures: [TypedNotificationError] = []
            for index in 50..<150 {
                do throws(TypedNotificationError) {
                    try poster.post(Ping(index: index), as: killedName)
                    acknowledged.append(index)
                } catch {
                    failures.append(error)
                }
                try? poster.post(Ping(index: index), as: livingName)
            }
            return (acknowledged, failures)
        }
        // A post written on the dead node's connection before it was known
        // dead may or may not have been stored, and says so; no other fails.
        #expect(outcome.failures.count <= 1, "\(outcome.failures)")
        for failure in outcome.failures {
            #expect(failure.code == .unreachable && failure.message.contains("may or may not"), "\(failure)")
        }
        #expect(try cluster.owner(ofSlot: try cluster.slot(of: "tn:{failover.killed}")) == replica)
        #expect(poster.transport.statistics.failedPosts == outcome.failures.count)

        // Every acknowledged post reaches every running watcher, once and in
        // order for the plain ones, at least once for the durable identity.
        let acknowledged = outcome.acknowledged
        for watcher in watchers {
            #expect(await waitUntil { watcher.everything.isSuperset(of: acknowledged) }, "\(watcher.hub.sender)")
            #expect(watcher.got.values.allSatisfy { $0.missed == 0 })
            #expect(watcher.hub.failure == nil)
        }
        for watcher in [throughDead, plain] {
            let firsts = watcher.firstDeliveries
            #expect(firsts == firsts.sorted() && Set(firsts).count == firsts.count, "\(firsts)")
            #expect(watcher.got.values.allSatisfy { !$0.redelivery })
            #expect(watcher.hub.transport.readerErrors.isEmpty)
        }
        #expect(durable.firstDeliveries == durable.firstDeliveries.sorted())
        #expect(await waitUntil { late.everything.isSuperset(of: acknowledged.filter { $0 >= 50 }) })
        #expect(late.firstDeliveries == late.firstDeliveries.sorted())
        // Both readers on the dead node lost it, tried again and said so.
        #expect(throughDead.hub.transport.statistics.failedReconnects > 0)
        #expect(plain.hub.transport.statistics.failedReconnects > 0)
        #expect(await waitUntil { living.firstDeliveries.count == 150 })
        #expect(living.firstDeliveries == Array(0..<150))
    }

    @Test(
        "a master that hangs (SIGSTOP) instead of dying: a reader notices its read goes unanswered and resumes on the promoted replica"
    )
    func masterHangs() async throws {
        let cluster = try await RedisTestCluster(replicas: 1, nodeTimeout: 1000)
        let name: NotificationName = "failover.hung"
        let (master, replica, other) = try cluster.failoverNodes(of: "tn:{failover.hung}")
        // A short block, so an unanswered read is noticed in 0.5 s plus the
        // command timeout (5 s).
        let quick = RedisStreamsConfiguration(blockTimeout: .milliseconds(500))
        let watcher = try Watcher(failoverHub(cluster, node: other, endpoint: "w", configuration: quick), name: name)
        defer { watcher.close() }
        let poster = try failoverHub(cluster, node: other, endpoint: "poster")
        defer { poster.close() }
        try poster.post(Ping(index: 0), as: name)
        #expect(await waitUntil { watcher.firstDeliveries == [0] })

        let reconnects = watcher.hub.transport.statistics.reconnects
        cluster.nodes[master].signal(SIGSTOP)
        defer { cluster.nodes[master].signal(SIGCONT) }
        #expect(await waitUntil { (try? cluster.owner(ofSlot: try cluster.slot(of: "tn:{failover.hung}"))) == replica })
        // The poster's idle connection to the hung node looks open: the
        // first post on it goes unanswered and says it may have been stored.
        let failures = try await offThePool { () -> [TypedNotificationError] in
            var failures: [TypedNotificationError] = []
            while failures.count < 3 {
                do throws(TypedNotificationError) {
                    try poster.post(Ping(index: 1), as: name)
                    break
                } catch {
                    failures.append(error)
                }
            }
            return failures
        }
        #expect(failures.count <= 1 && failures.allSatisfy { $0.message.contains("may or may not") }, "\(failures)")
        #expect(await waitUntil { watcher.firstDeliveries.last == 1 })
        #expect(Set(watcher.firstDeliveries) == [0, 1])
        // It noticed the unanswered read and connected again, to the
        // promoted replica. (Its readerErrors entry lived only between the
        // two: too briefly to be looked for here; the test of a reader
        // with no node to reach looks for it.)
        #expect(watcher.hub.transport.statistics.reconnects > reconnects)
        #expect(await waitUntil { watcher.hub.transport.readerErrors.isEmpty })
        #expect(watcher.got.values.allSatisfy { $0.missed == 0 })
    }

    @Test(
        "a reader whose server hangs (SIGSTOP) says so in readerErrors once a read goes unanswered, and resumes when it answers again"
    )
    func readerSaysServerHangs() async throws {
        let server = try await RedisTestServer()
        let name: NotificationName = "failover.stopped"
        let quick = RedisStreamsConfiguration(blockTimeout: .milliseconds(500))
        let watcher = try Watcher(redisHub(server, endpoint: "watcher", configuration: quick), name: name)
        defer { watcher.close() }
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        try poster.post(Ping(index: 0), as: name)
        #expect(await waitUntil { watcher.firstDeliveries == [0] })
        server.signal(SIGSTOP)
        // Unanswered for the block (0.5 s) and the command timeout (5 s).
        #expect(await waitUntil { watcher.hub.transport.readerErrors[name] != nil })
        #expect(watcher.hub.transport.readerErrors[name]?.code == .unreachable)
        #expect(watcher.hub.failure == nil)
        server.signal(SIGCONT)
        #expect(await waitUntil { watcher.hub.transport.readerErrors.isEmpty })
        try poster.post(Ping(index: 1), as: name)
        #expect(await waitUntil { watcher.firstDeliveries == [0, 1] })
    }

    @Test(
        "readerErrorUpdates pushes each change: none at first, the name once its server is gone, none once it reads again; it ends when the transport closes"
    )
    func readerErrorUpdatesArePushed() async throws {
        let server = try await RedisTestServer()
        let name: NotificationName = "failover.pushed"
        let watcher = try Watcher(redisHub(server, endpoint: "watcher"), name: name)
        defer { watcher.close() }
        let seen = Collector<[NotificationName: TypedNotificationError]>()
        let ended = Collector<Bool>()
        let updates = watcher.hub.transport.readerErrorUpdates()
        let listening = Task {
            for await now in updates { seen.append(now) }
            ended.append(true)
        }
        defer { listening.cancel() }
        #expect(await waitUntil { seen.values.count == 1 })
        #expect(seen.values.first?.isEmpty == true)

        await server.kill()
        #expect(await waitUntil { seen.values.last?[name]?.code == .unreachable })
        // Told, not asked: each element came as a change happened.
        #expect(seen.values.dropFirst().allSatisfy { !$0.isEmpty })
        try await server.start()
        #expect(await waitUntil { seen.values.count >= 3 && seen.values.last?.isEmpty == true })

        watcher.close()
        #expect(await waitUntil { ended.values == [true] })
    }

    @Test(
        "a reader that can reach no node keeps trying and says so in readerErrors and failedReconnects; its hub stays open, and it resumes where it stood"
    )
    func readerSaysItCannotReach() async throws {
        let server = try await RedisTestServer()
        let name: NotificationName = "failover.unreachable"
        let watcher = try Watcher(redisHub(server, endpoint: "watcher"), name: name)
        defer { watcher.close() }
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        for index in 0..<10 { try poster.post(Ping(index: index), as: name) }
        #expect(await waitUntil { watcher.firstDeliveries.count == 10 })
        #expect(watcher.hub.transport.readerErrors.isEmpty)

        await server.kill()
        #expect(await waitUntil { watcher.hub.transport.readerErrors[name] != nil })
        #expect(watcher.hub.transport.readerErrors[name]?.code == .unreachable)
        #expect(await waitUntil { watcher.hub.transport.statistics.failedReconnects >= 2 })
        #expect(watcher.hub.failure == nil)
        // A standalone server is not waited for: a post fails at once.
        #expect {
            try poster.post(Ping(index: 10), as: name)
        } throws: { ($0 as? TypedNotificationError)?.code == .unreachable }

        try await server.start()
        #expect(await waitUntil { watcher.hub.transport.readerErrors.isEmpty })
        #expect(
            await waitUntil {
                (try? poster.post(Ping(index: 10), as: name)) != nil
            })
        #expect(await waitUntil { watcher.firstDeliveries.count == 11 })
        #expect(watcher.firstDeliveries == Array(0..<11))
    }

    @Test(
        "a post whose slot's master and replica both died waits failoverWait for a new master, then fails with unreachable, saying it waited"
    )
    func failoverWaitBound() async throws {
        let cluster = try await RedisTestCluster(replicas: 1, nodeTimeout: 1000)
        let (master, replica, other) = try cluster.failoverNodes(of: "tn:{failover.bound}")
        let poster = try failoverHub(
            cluster, node: other, endpoint: "poster", configuration: .init(failoverWait: .milliseconds(300)))
        defer { poster.close() }
        try poster.post(Ping(index: 0), as: "failover.bound")
        // The replica goes first, then the master: no one can take over.
        await cluster.kill(node: replica)
        await cluster.kill(node: master)
        let failures = try await offThePool { () -> [TypedNotificationError] in
            (1...3).compactMap { index -> TypedNotificationError? in
                do throws(TypedNotificationError) {
                    try poster.post(Ping(index: index), as: "failover.bound")
                    return nil
                } catch {
                    return error
                }
            }
        }
        #expect(failures.count == 3)
        for failure in failures { #expect(failure.code == .unreachable, "\(failure)") }
        // One failed, or was refused, after waiting the bound for a new master.
        #expect(failures.contains { $0.message.contains("failoverWait") }, "\(failures)")
    }

    @Test(
        "acknowledgement .replicas(1): with the replica cut off a post fails with notReplicated; after a lossy failover every acknowledged post is on the promoted replica, where .master lost posts it acknowledged"
    )
    func replicasAcknowledgement() async throws {
        let cluster = try await RedisTestCluster(replicas: 1, nodeTimeout: 1000)
        let name: NotificationName = "failover.confirmed"
        let key = "tn:{failover.confirmed}"
        let (master, replica, other) = try cluster.failoverNodes(of: key)
        // Generous while the replica runs (on a busy machine it took over
        // 200 ms to confirm, once in 20 runs); short where it must time out.
        let confirmed = try failoverHub(
            cluster, node: other, endpoint: "confirmed",
            configuration: .init(acknowledgement: .replicas(1, timeout: .seconds(10))))
        defer { confirmed.close() }
        let cutOff = try failoverHub(
            cluster, node: other, endpoint: "cut-off",
            configuration: .init(acknowledgement: .replicas(1, timeout: .milliseconds(200))))
        defer { cutOff.close() }
        let unconfirmed = try failoverHub(cluster, node: other, endpoint: "unconfirmed")
        defer { unconfirmed.close() }
        let plain = try Watcher(failoverHub(cluster, node: other, endpoint: "plain"), name: name)
        var durable = try Watcher(failoverHub(cluster, node: other, endpoint: "durable", identity: "svc"), name: name)
        defer {
            plain.close()
            durable.close()
        }
        // Each returned once the replica confirmed it.
        for index in 0..<20 { try confirmed.post(Ping(index: index), as: name) }
        #expect(confirmed.transport.statistics.unconfirmedPosts == 0)

        // The replica stopped and its link cut: the master replicates nothing more.
        cluster.nodes[replica].signal(SIGSTOP)
        _ = try cluster.nodes[master].command("CLIENT", "KILL", "TYPE", "replica")
        for index in 20..<25 {
            #expect {
                try cutOff.post(Ping(index: index), as: name)
            } throws: { error in
                let error = error as? TypedNotificationError
                return error?.code == .notReplicated && error?.message.contains("0 of the 1 replicas") == true
            }
        }
        #expect(cutOff.transport.statistics.unconfirmedPosts == 5)
        // The default acknowledges what the master alone stored.
        for index in 100..<105 { try unconfirmed.post(Ping(index: index), as: name) }
        #expect(try cluster.nodes[master].command("XLEN", key) == .integer(30))
        let heard = Array(0..<25) + Array(100..<105)
        for watcher in [plain, durable] { #expect(await waitUntil { watcher.firstDeliveries == heard }) }

        // The master dies; the replica takes over with what it had.
        await cluster.kill(node: master)
        cluster.nodes[replica].signal(SIGCONT)
        // It may start an election of its own; else it is told to take over.
        #expect(
            await waitUntil {
                (try? cluster.owner(ofSlot: try cluster.slot(of: key))) == replica
                    || (try? cluster.nodes[replica].command("CLUSTER", "FAILOVER", "TAKEOVER")) == .simpleString("OK")
            })
        try await cluster.waitUntilSettled()
        #expect(try cluster.owner(ofSlot: try cluster.slot(of: key)) == replica)
        // Every post acknowledged under .replicas(1) is there; the five that
        // failed with notReplicated, and the five .master acknowledged, are not.
        #expect(try cluster.nodes[replica].command("XLEN", key) == .integer(20))

        // The watchers that read them follow to the promoted replica, and
        // see the stream went back by 10.
        for index in 200..<210 { try unconfirmed.post(Ping(index: index), as: name) }
        for watcher in [plain, durable] {
            #expect(await waitUntil { watcher.firstDeliveries == heard + Array(200..<210) })
            #expect(watcher.got.values.allSatisfy { $0.missed == 0 })
            #expect(watcher.hub.transport.statistics.rewoundEntries == 10)
        }
        // A later trim is counted exactly: the identity stops, 10 are posted
        // and trimmed unread, and it comes back to be told of exactly 10.
        await durable.closeAndWait()
        for index in 210..<220 { try unconfirmed.post(Ping(index: index), as: name) }
        _ = try cluster.nodes[replica].command("XTRIM", key, "MAXLEN", "0")
        try unconfirmed.post(Ping(index: 220), as: name)
        durable = try Watcher(failoverHub(cluster, node: other, endpoint: "durable", identity: "svc"), name: name)
        #expect(await waitUntil { durable.got.values.count == 1 })
        #expect(durable.got.values.first?.index == 220)
        #expect(durable.got.values.first?.missed == 10)
    }

    @Test(
        "a clean CLUSTER FAILOVER while a durable identity reads: after it stops, misses 10 to a trim and comes back, it is told of exactly 10"
    )
    func cleanFailoverKeepsCountsExact() async throws {
        let cluster = try await RedisTestCluster(replicas: 1, nodeTimeout: 1000)
        let name: NotificationName = "failover.clean"
        let key = "tn:{failover.clean}"
        let (master, replica, other) = try cluster.failoverNodes(of: key)
        let poster = try failoverHub(cluster, node: other, endpoint: "poster")
        defer { poster.close() }
        var durable = try Watcher(failoverHub(cluster, node: other, endpoint: "durable", identity: "svc"), name: name)
        defer { durable.close() }
        let plain = try Watcher(failoverHub(cluster, node: master, endpoint: "plain"), name: name)
        defer { plain.close() }
        for index in 0..<150 { try poster.post(Ping(index: index), as: name) }
        #expect(await waitUntil { durable.firstDeliveries.count == 150 })

        #expect(try cluster.nodes[replica].command("CLUSTER", "FAILOVER") == .simpleString("OK"))
        #expect(await waitUntil { (try? cluster.owner(ofSlot: try cluster.slot(of: key))) == replica })
        try await cluster.waitUntilSettled()
        for index in 150..<300 { try poster.post(Ping(index: index), as: name) }
        for watcher in [durable, plain] {
            #expect(await waitUntil { watcher.firstDeliveries.count == 300 })
            #expect(watcher.firstDeliveries == Array(0..<300))
            #expect(watcher.got.values.allSatisfy { $0.missed == 0 })
            #expect(watcher.hub.transport.statistics.rewoundEntries == 0)
        }

        await durable.closeAndWait()
        for index in 300..<310 { try poster.post(Ping(index: index), as: name) }
        _ = try cluster.nodes[replica].command("XTRIM", key, "MAXLEN", "0")
        try poster.post(Ping(index: 310), as: name)
        durable = try Watcher(failoverHub(cluster, node: other, endpoint: "durable", identity: "svc"), name: name)
        #expect(await waitUntil { durable.got.values.count == 1 })
        #expect(durable.got.values.first?.index == 310)
        #expect(durable.got.values.first?.missed == 10)
    }

    @Test(
        "after a master is killed and its replica promoted, idle readers of its slot, plain and durable, send the promoted node one read per block per connection and no command that fails"
    )
    func idleReadersAfterFailover() async throws {
        let cluster = try await RedisTestCluster(replicas: 1, nodeTimeout: 1000)
        let name: NotificationName = "failover.idle"
        let key = "tn:{failover.idle}"
        let (master, replica, other) = try cluster.failoverNodes(of: key)
        // Blocks of 100 ms, so a window of a second shows the rate.
        let blocks = RedisStreamsConfiguration(blockTimeout: .milliseconds(100))
        let plain = try Watcher(
            failoverHub(cluster, node: other, endpoint: "plain", configuration: blocks), name: name)
        let durable = try Watcher(
            failoverHub(cluster, node: other, endpoint: "durable", identity: "svc", configuration: blocks), name: name)
        let watchers = [plain, durable]
        defer { for watcher in watchers { watcher.close() } }
        let poster = try failoverHub(cluster, node: other, endpoint: "poster")
        defer { poster.close() }
        for index in 0..<10 { try poster.post(Ping(index: index), as: name) }
        for watcher in watchers { #expect(await waitUntil { watcher.firstDeliveries.count == 10 }) }

        await cluster.kill(node: master)
        // Posts wait for the election; one written to the dead node's
        // connection before it was known dead may fail, saying so.
        let acknowledged = try await offThePool { () -> [Int] in
            var acknowledged = Array(0..<10)
            for index in 10..<20 where (try? poster.post(Ping(index: index), as: name)) != nil {
                acknowledged.append(index)
            }
            return acknowledged
        }
        #expect(acknowledged.count >= 19)
        #expect(try cluster.owner(ofSlot: try cluster.slot(of: key)) == replica)
        for watcher in watchers {
            #expect(await waitUntil { watcher.everything.isSuperset(of: acknowledged) }, "\(watcher.hub.sender)")
        }

        // Idle on the promoted node: only blocking reads, none failing, and
        // at most one per block on each reader's connection.
        let node = cluster.nodes[replica]
        func reads() -> Int {
            let calls = (try? RedisFaultTests.commandCounts(node))?.calls
            return (calls?["xread"] ?? 0) + (calls?["xreadgroup"] ?? 0)
        }
        // Settled: reading on the promoted node, and every delivery
        // acknowledged (the identity's last acknowledgements may follow the
        // deliveries, on a connection of their own).
        #expect(await waitUntil { reads() >= 4 && (try? node.pendingCount(key, group: "svc")) == 0 })
        // And idle: a window of reads and nothing else. The durable reader
        // sends the counters of the entries it handed out last with its next
        // read, which under load can follow their acknowledgements; readers
        // that never go idle fail here.
        func onlyReads() -> Bool {
            let calls = (try? RedisFaultTests.commandCounts(node))?.calls ?? ["none": 1]
            return Set(calls.keys).isSubset(of: ["xread", "xreadgroup"])
        }
        var idle = false
        for _ in 0..<10 where !idle {
            _ = try node.command("CONFIG", "RESETSTAT")
            #expect(await waitUntil { reads() >= 4 })
            idle = onlyReads()
        }
        #expect(idle, "no window of reads alone in 10")
        _ = try node.command("CONFIG", "RESETSTAT")
        let start = ContinuousClock.now
        #expect(await waitUntil { reads() >= 20 })
        let counts = try RedisFaultTests.commandCounts(node)
        let blocksElapsed = (ContinuousClock.now - start) / .milliseconds(100)
        #expect(Set(counts.calls.keys).isSubset(of: ["xread", "xreadgroup"]), "\(counts.calls)")
        #expect(counts.errors == 0, "\(counts.said)")
        #expect(
            Double(reads()) <= Double(watchers.count) * (blocksElapsed + 2),
            "\(counts.calls) in \(blocksElapsed) blocks")
        for watcher in watchers {
            #expect(watcher.got.values.allSatisfy { $0.missed == 0 })
            #expect(watcher.hub.failure == nil)
        }
    }
}
