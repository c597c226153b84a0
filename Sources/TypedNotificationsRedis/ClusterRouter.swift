import Synchronization
import TypedNotifications

/// Redis Cluster's hash slots: which of the 16,384 slots a key is in.
enum HashSlot {
    /// How many slots a cluster has.
    static let count = 16_384

    /// The slot of `key`: CRC16 (XMODEM) of its hash tag, the part between
    /// its first `{` and the next `}` when that part is not empty, else of
    /// the whole key; modulo 16,384. `tn:{name}` hashes `name`, so each
    /// name's stream has one slot and names spread over the nodes.
    static func of(_ key: some Collection<UInt8>) -> Int {
        let bytes = Array(key)
        var start = 0
        var end = bytes.count
        if let open = bytes.firstIndex(of: UInt8(ascii: "{")),
            let close = bytes[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1
        {
            start = open + 1
            end = close
        }
        var crc: UInt16 = 0
        for byte in bytes[start..<end] {
            crc = (crc << 8) ^ crc16Table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ byte)]
        }
        return Int(crc) & (count - 1)
    }

    /// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), a byte at a time.
    private static let crc16Table: [UInt16] = (0..<256).map { index in
        var crc = UInt16(index) << 8
        for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1 }
        return crc
    }
}

/// A cluster node's address, as `MOVED`, `ASK` and `CLUSTER SLOTS` give it.
struct RedisNodeAddress: Hashable, Sendable, CustomStringConvertible {
    var host: String
    var port: Int

    var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Reads `host:port` (the host may be empty, meaning `fallbackHost`: the
    /// node that sent the redirection).
    init?(_ text: Substring, fallbackHost: String) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (1...65535).contains(port)
        else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        self.host = host.isEmpty || host == "?" ? fallbackHost : host
        self.port = port
    }

    init(host: String, port: Int) {
        self.host = host
        self.port = port
    }
}

/// A redirection in an error reply: `MOVED <slot> <host:port>` (the slot
/// lives there now) or `ASK <slot> <host:port>` (this one command goes
/// there, after `ASKING`, while the slot migrates).
struct Redirection: Hashable, Sendable {
    var slot: Int
    var node: RedisNodeAddress
    var isPermanent: Bool

    init?(_ text: String, fallbackHost: String) {
        let words = text.split(separator: " ")
        guard words.count == 3, words[0] == "MOVED" || words[0] == "ASK", let slot = Int(words[1]),
            (0..<HashSlot.count).contains(slot), let node = RedisNodeAddress(words[2], fallbackHost: fallbackHost)
        else { return nil }
        self.slot = slot
        self.node = node
        isPermanent = words[0] == "MOVED"
    }
}

/// Where each key's commands go: the one server of a standalone Redis, or
/// the node that owns the key's hash slot in a Redis Cluster.
///
/// Starts standalone; ``learn(slotsOf:)`` reads a cluster's slot map
/// (`CLUSTER SLOTS`), and every `MOVED` reply updates it, so a cluster
/// whose slots move (a reshard, a failover) is followed without a restart.
final class ClusterRouter: Sendable {
    /// The server the URL named: every key's node until a slot map says otherwise.
    let seed: RedisConnectionOptions
    private let clustered = Atomic<Bool>(false)
    private let table = Locked(SlotTable())

    private struct SlotTable {
        var nodes: [RedisNodeAddress] = []
        // Per slot, an index into `nodes`; `unknown` for the seed.
        var owners = [UInt16](repeating: unknown, count: HashSlot.count)
        static let unknown = UInt16.max

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
        for case .array(let range?) in ranges where range.count >= 3 {
            guard case .integer(let first) = range[0], case .integer(let last) = range[1], first <= last,
                first >= 0, last < HashSlot.count, case .array(let master?) = range[2], master.count >= 2,
                case .bulkString(let host?) = master[0], case .integer(let port) = master[1],
                (1...65535).contains(port)
            else { continue }
            let text = String(decoding: host, as: UTF8.self)
            owned.append(
                (
                    Int(first)...Int(last),
                    RedisNodeAddress(host: text.isEmpty || text == "?" ? asked : text, port: Int(port))
                ))
        }
        guard !owned.isEmpty else { return false }
        table.withLock { table in
            table.owners = [UInt16](repeating: SlotTable.unknown, count: HashSlot.count)
            for (range, node) in owned {
                let index = table.index(of: node)
                for slot in range { table.owners[slot] = index }
            }
        }
        clustered.store(true, ordering: .releasing)
        return true
    }
}

/// A command and the key that decides which node runs it.
struct RoutedCommand: Sendable {
    var key: [UInt8]
    var arguments: [[UInt8]]

    init(key: [UInt8], _ arguments: [[UInt8]]) {
        self.key = key
        self.arguments = arguments
    }

    init(key: String, _ arguments: String...) {
        self.key = Array(key.utf8)
        self.arguments = arguments.map { Array($0.utf8) }
    }
}

/// What became of commands run by ``ClusterRouter/run(_:connection:release:)``.
struct RoutedReplies {
    /// The replies of the commands, in order, from the first; shorter than
    /// the commands when a connection failed.
    var replies: [RESPValue] = []
    /// Why the command at index `replies.count` has no reply: its node was
    /// unreachable, or its connection broke.
    var failure: TypedNotificationError?
    /// Whether the failure came after the commands were written, so those
    /// without a reply may or may not have run.
    var mayHaveRun = false
    /// Redirections followed on the way.
    var redirections = 0
}

extension ClusterRouter {
    /// How many redirections one command follows before its last one is its reply.
    static let maximumRedirections = 5

    /// Runs each command on the node of its key, pipelining consecutive
    /// commands for one node in one write, and follows `MOVED` (learning
    /// the slot's new node) and `ASK` (that command alone, after `ASKING`)
    /// replies until each command has its answer.
    ///
    /// Commands for one key keep their order: a slot moves its keys away
    /// once, so those redirected are the last ones sent for that key, and
    /// are sent again in order. Stops at the first connection that cannot
    /// be made or breaks.
    func run(
        _ commands: [RoutedCommand],
        connection: (RedisConnectionOptions) throws(TypedNotificationError) -> RedisConnection,
        release: (RedisConnection) -> Void
    ) -> RoutedReplies {
        var result = RoutedReplies()
        var answers = [RESPValue?](repeating: nil, count: commands.count)
        // Indices still to run, each with the node an `ASK` sent it to.
        var pending: [(index: Int, asked: RedisNodeAddress?)] = commands.indices.map { ($0, nil) }
        round: for round in 0...Self.maximumRedirections {
            var redirected: [(index: Int, asked: RedisNodeAddress?)] = []
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
                var pipelined: [[[UInt8]]] = []
                pipelined.reserveCapacity(asked == nil ? end - start : 2 * (end - start))
                for entry in pending[start..<end] {
                    if asked != nil { pipelined.append([Array("ASKING".utf8)]) }
                    pipelined.append(commands[entry.index].arguments)
                }
                let replies: [RESPValue]
                do throws(TypedNotificationError) {
                    let open = try connection(target)
                    do throws(TypedNotificationError) {
                        replies = try open.pipeline(pipelined)
                    } catch {
                        result.mayHaveRun = true
                        throw error
                    }
                    release(open)
                } catch {
                    result.failure = error
                    break round
                }
                let own = asked == nil ? replies : stride(from: 1, to: replies.count, by: 2).map { replies[$0] }
                for (entry, reply) in zip(pending[start..<end], own) {
                    if round < Self.maximumRedirections, case .error(let text) = reply,
                        let redirection = Redirection(text, fallbackHost: target.host)
                    {
                        learn(redirection)
                        redirected.append((entry.index, redirection.isPermanent ? nil : redirection.node))
                    } else {
                        answers[entry.index] = reply
                    }
                }
                start = end
            }
            guard !redirected.isEmpty else { break }
            result.redirections += redirected.count
            pending = redirected
        }
        for answer in answers {
            guard let answer else { break }
            result.replies.append(answer)
        }
        if result.failure == nil && result.replies.count < commands.count {
            result.failure = TypedNotificationError(
                code: .transportFailure, message: "a Redis command was left without a reply")
        }
        return result
    }
}
