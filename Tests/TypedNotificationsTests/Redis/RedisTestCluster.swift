import Foundation
import Testing
import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@testable import TypedNotificationsRedis

/// A Redis Cluster of a test's own: three `redis-server --cluster-enabled
/// yes` masters, and with `replicas: 1` a replica of each, every node a
/// ``RedisTestServer`` (free loopback ports, a temporary directory,
/// append-only persistence), joined with `redis-cli --cluster create …
/// --cluster-yes`; stopped when the test lets go of it.
final class RedisTestCluster: Sendable {
    let nodes: [RedisTestServer]
    /// The nodes not killed by ``kill(node:)``.
    private let living: Locked<Set<Int>>

    /// Where `redis-cli` is, if installed.
    static let cli: String? = [
        "/usr/bin/redis-cli", "/usr/local/bin/redis-cli", "/opt/homebrew/bin/redis-cli",
    ]
    .first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Whether the cluster suite runs: `redis-server` and `redis-cli` are
    /// installed, or CI requires it (and fails without them).
    static let suiteRuns =
        (RedisTestServer.executable != nil && cli != nil)
        || ProcessInfo.processInfo.environment["TYPED_NOTIFICATIONS_REQUIRE_REDIS"] == "1"

    /// The reason printed when it is skipped.
    static let skipReason: Comment =
        "redis-server or redis-cli is not installed (apt-get install redis-server redis-tools); TYPED_NOTIFICATIONS_REQUIRE_REDIS=1 makes this a failure"

    /// Starts three masters (and `replicas` replicas of each), makes them
    /// one cluster with the 16,384 slots split in three, and returns once
    /// every node says the cluster is ok and every replica is in sync.
    /// `nodeTimeout` is `cluster-node-timeout` in milliseconds: how long a
    /// master must be silent before it is failed over. `arguments` go to
    /// every node.
    init(replicas: Int = 0, nodeTimeout: Int = 5000, arguments: [String] = []) async throws {
        var nodes: [RedisTestServer] = []
        for _ in 0..<(3 * (1 + replicas)) {
            nodes.append(
                try await RedisTestServer(
                    arguments: [
                        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout",
                        "\(nodeTimeout)",
                    ] + arguments,
                    clusterBus: true))
        }
        self.nodes = nodes
        living = Locked(Set(nodes.indices))
        try await Self.runCLI(
            ["--cluster", "create"] + nodes.map { "127.0.0.1:\($0.port)" } + [
                "--cluster-replicas", "\(replicas)", "--cluster-yes",
            ])
        try await waitUntilSettled()
    }

    /// The nodes not killed.
    var livingNodes: [Int] { living.withLock { $0 }.sorted() }

    /// Returns once every living node says the cluster is ok (`CLUSTER
    /// INFO`), agrees on who owns every slot, and every living replica's
    /// link to its master is up.
    func waitUntilSettled() async throws {
        let settled = await waitUntil {
            let living = livingNodes
            var maps: Set<[Int]> = []
            for index in living {
                guard case .bulkString(let info?) = try? nodes[index].command("CLUSTER", "INFO"),
                    String(decoding: info, as: UTF8.self).contains("cluster_state:ok"),
                    case .bulkString(let replication?) = try? nodes[index].command("INFO", "replication")
                else { return false }
                let text = String(decoding: replication, as: UTF8.self)
                if text.contains("role:slave") && !text.contains("master_link_status:up") { return false }
                guard let owners = try? owners(asSeenBy: index) else { return false }
                maps.insert(owners)
            }
            return maps.count == 1
        }
        guard settled else { throw RedisTestFailure("the cluster did not reach cluster_state:ok") }
    }

    /// Each range's first and last slot and its master's port, as node
    /// `index` sees them, in slot order.
    private func owners(asSeenBy index: Int) throws -> [Int] {
        guard case .array(let ranges?) = try nodes[index].command("CLUSTER", "SLOTS") else {
            throw RedisTestFailure("CLUSTER SLOTS")
        }
        return ranges.compactMap { range -> [Int]? in
            guard case .array(let range?) = range, case .integer(let first) = range[0],
                case .integer(let last) = range[1], case .array(let master?) = range[2],
                case .integer(let port) = master[1]
            else { return nil }
            return [Int(first), Int(last), Int(port)]
        }.sorted { $0[0] < $1[0] }.flatMap { $0 }
    }

    /// Kills node `index` with SIGKILL and waits for it to be gone.
    func kill(node index: Int) async {
        await nodes[index].kill()
        living.withLock { _ = $0.remove(index) }
    }

    /// Restarts node `index` from its append-only file, on its ports.
    func restart(node index: Int) async throws {
        try await nodes[index].start()
        living.withLock { _ = $0.insert(index) }
    }

    /// The replica of master `index`, as the master says (`CLUSTER REPLICAS`).
    func replica(of index: Int) throws -> Int? {
        guard case .array(let lines?) = try nodes[index].command("CLUSTER", "REPLICAS", try id(of: index)) else {
            throw RedisTestFailure("CLUSTER REPLICAS")
        }
        for case .bulkString(let line?) in lines {
            let words = String(decoding: line, as: UTF8.self).split(separator: " ")
            guard words.count > 1 else { continue }
            let port = words[1].split(separator: ":").last.flatMap { Int($0.split(separator: "@")[0]) }
            if let replica = nodes.firstIndex(where: { $0.port == port }) { return replica }
        }
        return nil
    }

    /// The nodes a failover of `key`'s slot concerns: the master that owns
    /// it, that master's replica, and a third node, neither of them.
    func failoverNodes(of key: String) throws -> (master: Int, replica: Int, other: Int) {
        guard let master = try owner(ofSlot: try slot(of: key)), let replica = try replica(of: master),
            let other = livingNodes.first(where: { $0 != master && $0 != replica })
        else { throw RedisTestFailure("no master with a replica and a third node for \(key)") }
        return (master, replica, other)
    }

    /// The URL of node `index`.
    func url(node index: Int = 0) -> String { nodes[index].url() }

    /// Node `index`'s cluster ID.
    func id(of index: Int) throws -> String {
        guard case .bulkString(let id?) = try nodes[index].command("CLUSTER", "MYID") else {
            throw RedisTestFailure("CLUSTER MYID")
        }
        return String(decoding: id, as: UTF8.self)
    }

    /// The server's slot of `key` (`CLUSTER KEYSLOT`).
    func slot(of key: String) throws -> Int {
        guard let asked = livingNodes.first,
            case .integer(let slot) = try nodes[asked].command("CLUSTER", "KEYSLOT", key)
        else {
            throw RedisTestFailure("CLUSTER KEYSLOT \(key)")
        }
        return Int(slot)
    }

    /// Which node owns `slot`, as the first living node's `CLUSTER SLOTS` says.
    func owner(ofSlot slot: Int) throws -> Int? {
        guard let asked = livingNodes.first else { return nil }
        let owners = try owners(asSeenBy: asked)
        for position in stride(from: 0, to: owners.count, by: 3)
        where owners[position]...owners[position + 1] ~= slot {
            return nodes.firstIndex { $0.port == owners[position + 2] }
        }
        return nil
    }

    /// Moves `count` slots (the lowest it owns) from node `from` to node `to`
    /// with `redis-cli --cluster reshard`, keys and all; returns once done.
    func reshard(slots count: Int, from: Int, to: Int) async throws {
        try await Self.runCLI([
            "--cluster", "reshard", "127.0.0.1:\(nodes[from].port)", "--cluster-from", try id(of: from),
            "--cluster-to", try id(of: to), "--cluster-slots", "\(count)", "--cluster-yes",
        ])
    }

    private static func runCLI(_ arguments: [String]) async throws {
        guard let cli else { throw RedisTestFailure("redis-cli is not installed") }
        let process = try HelperProcess(arguments, executable: cli)
        let status = await process.waitForExit()
        guard status == 0 else {
            throw RedisTestFailure(
                "redis-cli \(arguments.prefix(2).joined(separator: " ")) exited with \(status): "
                    + "\(process.lines.values.suffix(8)) \(process.errors.values.suffix(8))")
        }
    }
}
