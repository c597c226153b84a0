import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Where each key's commands go: the one server of a standalone Redis, or
/// the node that owns the key's hash slot in a Redis Cluster.
///
/// Starts standalone; ``learn(slotsOf:)`` reads a cluster's slot map
/// (`CLUSTER SLOTS`), and every `MOVED` reply updates it, so a cluster
/// whose slots move (a reshard) is followed without a restart. A node that
/// died sends no `MOVED`: whoever cannot reach a slot's node asks the
/// cluster again (``refresh(now:)``), the seed first, then every
/// node, master or replica, a slot map named, so a replica the cluster
/// promoted is found even when the seed is the node that died.
final class ClusterRouter: Sendable {
    /// The server the URL named: every key's node until a slot map says otherwise.
    let seed: RedisConnectionOptions
    private let clustered = Atomic<Bool>(false)
    private let table = Locked(SlotTable())

    /// The least time between two refreshes of the slot map: readers of
    /// many names on one dead node ask once, not once each.
    static let refreshInterval: UInt64 = 100_000_000

    private struct SlotTable {
        var nodes: [RedisNodeAddress] = []
        // Per slot, an index into `nodes`; `unknown` for the seed.
        var owners = [UInt16](repeating: unknown, count: HashSlot.count)
        static let unknown = UInt16.max
        /// Every node a slot map named, replicas included: where to ask for
        /// the map when the seed does not answer. At most 1,000.
        var known: [RedisNodeAddress] = []
        /// When the map was last asked for, on the monotonic clock; 0: never.
        var refreshedAt: UInt64 = 0

        /// The index of `node` in `nodes`, added if new; `unknown` (the seed)
        /// past 1,000 nodes, a cluster's practical limit, so a confused server
        /// cannot grow the table without bound.
        mutating func index(of node: RedisNodeAddress) -> UInt16 {
            if let index = nodes.firstIndex(of: node) { return UInt16(index) }
            guard nodes.count < 1_000 else { return Self.unknown }
            nodes.append(node)
            return UInt16(nodes.count - 1)
        }
    }

    init(seed: RedisConnectionOptions) {
        self.seed = seed
    }

    /// Whether the server turned out to be a cluster.
    var isCluster: Bool { clustered.load(ordering: .acquiring) }

    /// The options to reach the node of `key`: the seed's credentials and
    /// timeouts, that node's address.
    func options(forKey key: some Collection<UInt8>) -> RedisConnectionOptions {
        guard isCluster else { return seed }
        let slot = HashSlot.of(key)
        let node = table.withLock { table -> RedisNodeAddress? in
            let owner = table.owners[slot]
            return owner == SlotTable.unknown ? nil : table.nodes[Int(owner)]
        }
        return node.map(options(for:)) ?? seed
    }

    /// The options to reach `node`.
    func options(for node: RedisNodeAddress) -> RedisConnectionOptions {
        var options = seed
        options.host = node.host
        options.port = node.port
        options.isUnixSocket = false
        return options
    }

    /// Every node that owns a slot, or the seed alone when none is known.
    var nodes: [RedisConnectionOptions] {
        let owners = table.withLock { table in
            Set(table.owners.filter { $0 != SlotTable.unknown }).sorted().map { table.nodes[Int($0)] }
        }
        return owners.isEmpty ? [seed] : owners.map(options(for:))
    }

    /// Records a `MOVED` redirection: its slot lives on its node now.
    func learn(_ redirection: Redirection) {
        guard redirection.isPermanent else { return }
        table.withLock { table in
            table.owners[redirection.slot] = table.index(of: redirection.node)
        }
        clustered.store(true, ordering: .releasing)
    }

    /// Asks the server behind `connection` for the cluster's slot map
    /// (`CLUSTER SLOTS`) and keeps it; returns whether it is a cluster. A
    /// server with cluster support disabled, or a user not allowed to ask,
    /// leaves the router as it was (redirections still teach it).
    @discardableResult
    func learn(slotsOf connection: RedisConnection) throws(TypedNotificationError) -> Bool {
        guard case .array(let ranges?) = try connection.call("CLUSTER", "SLOTS") else { return false }
        let asked = connection.options.host
        var owned: [(ClosedRange<Int>, RedisNodeAddress)] = []
        var named: [RedisNodeAddress] = []
        /// The address in a node entry of `CLUSTER SLOTS`: `[host, port, …]`.
        func address(_ entry: RESPValue) -> RedisNodeAddress? {
            guard case .array(let node?) = entry, node.count >= 2, case .bulkString(let host?) = node[0],
                case .integer(let port) = node[1], (1...65535).contains(port)
            else { return nil }
            let text = String(decoding: host, as: UTF8.self)
            return RedisNodeAddress(host: text.isEmpty || text == "?" ? asked : text, port: Int(port))
        }
        for case .array(let range?) in ranges where range.count >= 3 {
            guard case .integer(let first) = range[0], case .integer(let last) = range[1], first <= last,
                first >= 0, last < HashSlot.count, let master = address(range[2])
            else { continue }
            owned.append((Int(first)...Int(last), master))
            named.append(master)
            named += range.dropFirst(3).compactMap(address)
        }
        guard !owned.isEmpty else { return false }
        table.withLock { table in
            table.owners = [UInt16](repeating: SlotTable.unknown, count: HashSlot.count)
            for (range, node) in owned {
                let index = table.index(of: node)
                for slot in range {
                    table.owners[slot] = index
                }
            }
            for node in named where !table.known.contains(node) && table.known.count < 1_000 {
                table.known.append(node)
            }
        }
        clustered.store(true, ordering: .releasing)
        return true
    }

    /// Asks the cluster for its slot map again, after a slot's node could
    /// not be reached: the seed first, then every node a slot map named,
    /// until one answers. A node that died sends no `MOVED`, so this is how
    /// a replica the cluster promoted is found. Does nothing outside a
    /// cluster, or within ``refreshInterval`` of the last time it asked;
    /// returns whether a node answered with a map. Each node is given the
    /// connect and command timeouts, at most 1 s each; no lock is held
    /// meanwhile.
    @discardableResult
    func refresh(now: UInt64) -> Bool {
        guard isCluster else { return false }
        let candidates = table.withLock { table -> [RedisNodeAddress]? in
            guard table.refreshedAt == 0 || now &- table.refreshedAt >= Self.refreshInterval else { return nil }
            table.refreshedAt = now
            return table.known
        }
        guard let candidates else { return false }
        var tried: [RedisConnectionOptions] = [seed]
        tried += candidates.map(options(for:)).filter { $0 != seed }
        for var node in tried {
            // A live node answers in microseconds; one that takes
            // connections but does not answer (a stopped process) costs 1 s.
            node.connectTimeout = min(node.connectTimeout, .seconds(1))
            node.commandTimeout = min(node.commandTimeout, .seconds(1))
            guard let connection = try? RedisConnection.connect(node, clientName: "tn-router") else { continue }
            // The connection closes when it goes out of scope.
            if (try? learn(slotsOf: connection)) == true { return true }
        }
        return false
    }

    /// How many nodes the router knows of, replicas included.
    var knownNodeCount: Int { table.withLock { $0.known.count } }

}

/// A command, encoded as it is written, and the key that decides which
/// node runs it.
///
/// Encoded once, when it is made: a post's `XADD` is one buffer from the
/// envelope to the socket, whatever node it goes to and however often a
/// redirection sends it again.
struct RoutedCommand: Sendable {
    /// The key's bytes: a slice of ``encoded`` for a post, of its own array
    /// otherwise.
    var key: ArraySlice<UInt8>
    /// The command in RESP.
    var encoded: [UInt8]
    /// A keyless command, in RESP, that must run on the same connection
    /// right after this one, wherever a redirection sends it (`WAIT`,
    /// which waits for the writes of its own connection): sent again with
    /// it, and its reply kept only from where the command ran.
    var trailer: [UInt8]?

    init(key: [UInt8], _ arguments: [[UInt8]], trailer: [UInt8]? = nil) {
        self.key = key[...]
        var encoded: [UInt8] = []
        RESPWriter.command(arguments, into: &encoded)
        self.encoded = encoded
        self.trailer = trailer
    }

    init(key: String, _ arguments: String...) {
        self.init(key: Array(key.utf8), arguments.map { Array($0.utf8) })
    }

    /// `XADD key [MAXLEN ~ maximumLength] * e envelope` in one buffer, the
    /// key being `prefix:{name}`.
    static func post(
        prefix: String, name: String, maximumLength: Int?, envelope: some Collection<UInt8>, trailer: [UInt8]?
    ) -> RoutedCommand {
        var encoded: [UInt8] = []
        let keyLength = prefix.utf8.count + 3 + name.utf8.count
        encoded.reserveCapacity(envelope.count + keyLength + 80)
        RESPWriter.header(UInt8(ascii: "*"), maximumLength == nil ? 5 : 8, into: &encoded)
        RESPWriter.argument("XADD".utf8, into: &encoded)
        RESPWriter.header(UInt8(ascii: "$"), keyLength, into: &encoded)
        let keyStart = encoded.count
        encoded.append(contentsOf: prefix.utf8)
        encoded.append(contentsOf: ":{".utf8)
        encoded.append(contentsOf: name.utf8)
        encoded.append(UInt8(ascii: "}"))
        let keyEnd = encoded.count
        encoded.append(contentsOf: "\r\n".utf8)
        if let maximumLength {
            RESPWriter.argument("MAXLEN".utf8, into: &encoded)
            RESPWriter.argument("~".utf8, into: &encoded)
            RESPWriter.argument(String(maximumLength).utf8, into: &encoded)
        }
        RESPWriter.argument("*".utf8, into: &encoded)
        RESPWriter.argument("e".utf8, into: &encoded)
        RESPWriter.argument(envelope, into: &encoded)
        return RoutedCommand(key: encoded[keyStart..<keyEnd], encoded: encoded, trailer: trailer)
    }

    private init(key: ArraySlice<UInt8>, encoded: [UInt8], trailer: [UInt8]?) {
        self.key = key
        self.encoded = encoded
        self.trailer = trailer
    }
}

/// What became of commands run by ``ClusterRouter/run(_:connection:release:)``.
struct RoutedReplies {
    /// The replies of the commands, in order, from the first; shorter than
    /// the commands when a connection failed.
    var replies: [RESPValue] = []
    /// The reply of each of those commands' trailer, if it has one (see
    /// ``RoutedCommand/trailer``), from the node that ran the command.
    var trailers: [RESPValue?] = []
    /// Why the command at index `replies.count` has no reply: its node was
    /// unreachable, or its connection broke.
    var failure: TypedNotificationError?
    /// Whether the failure came after the commands were written, so those
    /// without a reply may or may not have run.
    var mayHaveRun = false
    /// Redirections followed on the way.
    var redirections = 0
    /// Whether the commands waited for a slot's node to come back (a
    /// failover), whatever became of them.
    var waitedForFailover = false
}

extension ClusterRouter {
    /// How many redirections one command follows before its last one is its reply.
    static let maximumRedirections = 5

    /// Microseconds between attempts to reach a slot's node while commands
    /// wait for a failover: 50 ms, doubling to 500 ms.
    static let shortestFailoverPause = 50_000
    static let longestFailoverPause = 500_000

    /// `ASKING`, which goes before a command an `ASK` redirection sent on.
    private static let asking = RESPWriter.command("ASKING")

    /// Error replies that say a command did not run because the cluster
    /// cannot serve its slot now (down, electing, loading, or migrating
    /// under it): one that waits for a failover sends it again.
    static func isRefusedForNow(_ text: String) -> Bool {
        ["CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING"].contains { text.hasPrefix($0) }
    }

    /// Runs each command on the node of its key, pipelining consecutive
    /// commands for one node in one write, and follows `MOVED` (learning
    /// the slot's new node) and `ASK` (that command alone, after `ASKING`)
    /// replies until each command has its answer.
    ///
    /// Commands for one key keep their order: a slot moves its keys away
    /// once, so those redirected are the last ones sent for that key, and
    /// are sent again in order. Stops at the first connection that cannot
    /// be made or breaks; in a cluster, the slot map is asked for again
    /// then (``refresh(now:)``), so the next call finds a promoted replica.
    ///
    /// With a `failoverDeadline` (monotonic nanoseconds), a connection that
    /// cannot be made in a cluster is tried again, the slot map asked for
    /// each time, until the deadline: the commands wait for an election to
    /// give the slot a master. Only before anything was written: commands
    /// on a connection that broke after they were written may have run,
    /// and are never sent twice.
    func run(
        _ commands: [RoutedCommand],
        connection: (RedisConnectionOptions) throws(TypedNotificationError) -> RedisConnection,
        release: (RedisConnection) -> Void,
        failoverDeadline: UInt64? = nil
    ) -> RoutedReplies {
        var result = RoutedReplies()
        var answers = [RESPValue?](repeating: nil, count: commands.count)
        var trailers = [RESPValue?](repeating: nil, count: commands.count)
        // Indices still to run, each with the node an `ASK` sent it to.
        var pending: [(index: Int, asked: RedisNodeAddress?)] = commands.indices.map { ($0, nil) }
        // Microseconds between attempts while waiting for a failover.
        var failoverPause = Self.shortestFailoverPause / 2
        /// Whether to wait once more for a slot's master after a pause: only
        /// in a cluster, while there is time.
        func waitForFailover() -> Bool {
            let now = SystemClock.monotonicNanoseconds()
            guard isCluster, let failoverDeadline, now < failoverDeadline else { return false }
            result.waitedForFailover = true
            failoverPause = min(failoverPause * 2, Self.longestFailoverPause)
            let left = (failoverDeadline - now) / 1_000
            SystemProcess.pause(microseconds: UInt32(min(UInt64(failoverPause), left) + 1))
            return true
        }
        var round = 0
        round: while true {
            var redirected: [(index: Int, asked: RedisNodeAddress?)] = []
            // Commands a node refused without running them while the
            // cluster is down or electing: to go again after a pause.
            var refusals: [Int: RESPValue] = [:]
            var start = 0
            while start < pending.count {
                let asked = pending[start].asked
                let target = asked.map(options(for:)) ?? options(forKey: commands[pending[start].index].key)
                var end = start + 1
                while end < pending.count, pending[end].asked == asked,
                    asked != nil || options(forKey: commands[pending[end].index].key) == target
                {
                    end += 1
                }
                let group = pending[start..<end]
                var count = 0
                for entry in group {
                    count += (asked != nil ? 2 : 1) + (commands[entry.index].trailer != nil ? 1 : 0)
                }
                let replies: [RESPValue]
                do throws(TypedNotificationError) {
                    let open: RedisConnection
                    do throws(TypedNotificationError) {
                        open = try connection(target)
                    } catch {
                        // Nothing of this group was written: it may wait
                        // for the slot's new master and go again.
                        refresh(now: SystemClock.monotonicNanoseconds())
                        if error.code == .unreachable, waitForFailover() { continue }
                        throw error
                    }
                    do throws(TypedNotificationError) {
                        replies = try open.pipeline(count: count) { outgoing in
                            for entry in group {
                                if asked != nil { outgoing.append(contentsOf: Self.asking) }
                                outgoing.append(contentsOf: commands[entry.index].encoded)
                                if let trailer = commands[entry.index].trailer { outgoing.append(contentsOf: trailer) }
                            }
                        }
                    } catch {
                        result.mayHaveRun = true
                        refresh(now: SystemClock.monotonicNanoseconds())
                        throw error
                    }
                    release(open)
                } catch {
                    result.failure = error
                    break round
                }
                // Each command's own reply and its trailer's, past `ASKING`'s.
                var cursor = 0
                for entry in group {
                    if asked != nil { cursor += 1 }
                    guard cursor < replies.count else { break }
                    let reply = replies[cursor]
                    cursor += 1
                    var trailer: RESPValue?
                    if commands[entry.index].trailer != nil, cursor < replies.count {
                        trailer = replies[cursor]
                        cursor += 1
                    }
                    if case .error(let text) = reply, round < Self.maximumRedirections,
                        let redirection = Redirection(text, fallbackHost: target.host)
                    {
                        learn(redirection)
                        redirected.append((entry.index, redirection.isPermanent ? nil : redirection.node))
                        result.redirections += 1
                    } else if case .error(let text) = reply, failoverDeadline != nil, isCluster,
                        Self.isRefusedForNow(text)
                    {
                        redirected.append((entry.index, nil))
                        refusals[entry.index] = reply
                    } else {
                        answers[entry.index] = reply
                        trailers[entry.index] = trailer
                    }
                }
                start = end
            }
            guard !redirected.isEmpty else { break }
            if !refusals.isEmpty {
                refresh(now: SystemClock.monotonicNanoseconds())
                guard waitForFailover() else {
                    // Out of time: the refusals are the replies.
                    for (index, refusal) in refusals { answers[index] = refusal }
                    break
                }
            } else {
                round += 1
            }
            pending = redirected
        }
        for (answer, trailer) in zip(answers, trailers) {
            guard let answer else { break }
            result.replies.append(answer)
            result.trailers.append(trailer)
        }
        if result.failure == nil && result.replies.count < commands.count {
            result.failure = TypedNotificationError(
                code: .transportFailure, message: "a Redis command was left without a reply")
        }
        return result
    }
}
