import Foundation
import Testing
import TypedNotifications

@testable import TypedNotificationsRedis

/// A Redis Cluster of a test's own: three `redis-server --cluster-enabled
/// yes` masters, each a ``RedisTestServer`` (free loopback ports, a
/// temporary directory, append-only persistence), joined with `redis-cli
/// --cluster create … --cluster-yes`; stopped when the test lets go of it.
final class RedisTestCluster: Sendable {
    let nodes: [RedisTestServer]

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

    /// Starts three masters, makes them one cluster with the 16,384 slots
    /// split in three (node 0 owns 0-5460), and returns once every node
    /// says the cluster is ok. `arguments` go to every node.
    init(arguments: [String] = []) async throws {
        var nodes: [RedisTestServer] = []
        for _ in 0..<3 {
            nodes.append(
                try await RedisTestServer(
                    arguments: [
                        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout",
                        "5000",
                    ] + arguments,
                    clusterBus: true))
        }
        self.nodes = nodes
        try await Self.runCLI(
            ["--cluster", "create"] + nodes.map { "127.0.0.1:\($0.port)" } + [
                "--cluster-replicas", "0", "--cluster-yes",
            ])
        try await waitUntilSettled()
    }

    /// Returns once every node says the cluster is ok (`CLUSTER INFO`).
    func waitUntilSettled() async throws {
        let settled = await waitUntil {
            nodes.allSatisfy { node in
                guard case .bulkString(let info?) = try? node.command("CLUSTER", "INFO") else { return false }
                return String(decoding: info, as: UTF8.self).contains("cluster_state:ok")
            }
        }
        guard settled else { throw RedisTestFailure("the cluster did not reach cluster_state:ok") }
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
        guard case .integer(let slot) = try nodes[0].command("CLUSTER", "KEYSLOT", key) else {
            throw RedisTestFailure("CLUSTER KEYSLOT \(key)")
        }
        return Int(slot)
    }

    /// Which node owns `slot`, as node 0's `CLUSTER SLOTS` says.
    func owner(ofSlot slot: Int) throws -> Int? {
        guard case .array(let ranges?) = try nodes[0].command("CLUSTER", "SLOTS") else {
            throw RedisTestFailure("CLUSTER SLOTS")
        }
        for case .array(let range?) in ranges {
            guard case .integer(let first) = range[0], case .integer(let last) = range[1],
                first...last ~= Int64(slot), case .array(let master?) = range[2], case .integer(let port) = master[1]
            else { continue }
            return nodes.firstIndex { $0.port == Int(port) }
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
