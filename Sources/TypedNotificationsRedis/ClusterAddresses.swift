import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

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
