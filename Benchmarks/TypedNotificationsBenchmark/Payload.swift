import TypedNotifications

/// The notification every fan-out scenario posts: an index, which observers
/// use to file their receive time, and filler up to the payload size.
struct BenchTick: TypedNotification {
    static let name: NotificationName = "bench.tick"

    /// Posted until every in-process observer has seen one; never measured.
    static let probeIndex = UInt64.max - 1
    /// Posted once at the end; an observer that sees it reports and stops.
    static let endIndex = UInt64.max

    var index: UInt64
    var filler: [UInt8]

    init(index: UInt64, filler: [UInt8]) {
        self.index = index
        self.filler = filler
    }

    /// Filler that makes the whole payload `size` bytes (at least the index's 8).
    static func filler(forPayloadSize size: Int) -> [UInt8] {
        [UInt8](repeating: 0x5A, count: max(0, size - 8))
    }

    func encodePayload(into buffer: inout [UInt8]) throws {
        withUnsafeBytes(of: index.littleEndian) { buffer.append(contentsOf: $0) }
        buffer.append(contentsOf: filler)
    }

    var payloadSizeHint: Int? { 8 + filler.count }

    init(payload bytes: UnsafeRawBufferPointer) throws {
        guard bytes.count >= 8 else { throw PayloadDecodingError.outOfRange(type: "BenchTick") }
        index = UInt64(littleEndian: bytes.loadUnaligned(as: UInt64.self))
        filler = Array(bytes[8...])
    }
}
