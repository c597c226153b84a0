@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

/// The sender of the records tests build by hand.
let logTestSender = try? NotificationSender(processID: 1, userID: 1, endpoint: "poster", instance: 1)

/// The envelope of a `Ping` with this index and sequence (index + 1 by
/// default), padded with `padding` extra payload bytes.
func pingEnvelope(_ index: Int, sequence: UInt64? = nil, padding: Int = 0) -> [UInt8] {
    guard let poster = logTestSender else { return [] }
    let encoded = try? NotificationEnvelope.encode(
        name: Ping.name, sender: poster, sequence: sequence ?? UInt64(index + 1),
        timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
    ) { buffer in
        try Ping(index: index).encodePayload(into: &buffer)
        buffer.append(contentsOf: [UInt8](repeating: 0x20, count: padding))
    }
    return encoded.map { Array($0.envelope) } ?? []
}

/// The log identifier of the segments tests build by hand.
let testLogIdentifier: UInt64 = 0x7E57

/// A segment built as a writer builds it: a start mark, framed records,
/// and perhaps a rollover mark.
struct SegmentBuilder {
    private(set) var bytes: [UInt8]
    private(set) var nextIndex: UInt64
    /// Where each record appended ends.
    private(set) var ends: [Int] = []

    /// A segment of log `log` whose first record is `firstIndex`.
    init(firstIndex: UInt64 = 0, log: UInt64 = testLogIdentifier) {
        bytes = LogFormat.segmentStart(index: firstIndex, log: log)
        nextIndex = firstIndex
    }

    /// Appends `Ping` records with these indexes (sequence = index + 1).
    mutating func append(pings range: Range<Int>, padding: Int = 0) {
        for index in range { append(envelope: pingEnvelope(index, padding: padding)) }
    }

    mutating func append(envelope: [UInt8]) {
        var framed: [UInt8] = []
        let end = envelope.withUnsafeBytes {
            LogFormat.appendRecord($0, index: nextIndex, at: bytes.count, to: &framed)
        }
        bytes += framed
        ends.append(end)
        nextIndex += 1
    }

    /// The framed bytes of the next record without appending them.
    func framed(_ envelope: [UInt8]) -> [UInt8] {
        var framed: [UInt8] = []
        envelope.withUnsafeBytes { _ = LogFormat.appendRecord($0, index: nextIndex, at: bytes.count, to: &framed) }
        return framed
    }

    /// Closes the segment with a mark naming segment `next`.
    mutating func close(next: UInt64) {
        var mark: [UInt8] = []
        LogFormat.appendRollover(next: next, index: nextIndex, at: bytes.count, to: &mark)
        bytes += mark
    }

    /// Replaces bytes from `offset` on (corruption, a forgery).
    mutating func overwrite(at offset: Int, with replacement: [UInt8]) {
        bytes.replaceSubrange(offset..<min(bytes.count, offset + replacement.count), with: replacement)
    }

    /// Pads with zeros to the next block boundary, as a writer steps over a torn tail.
    mutating func padToBlock() {
        let end = LogFormat.blockEnd(of: max(0, bytes.count - 1))
        bytes += [UInt8](repeating: 0, count: end - bytes.count)
    }

    /// Adopts the bytes as they are (after a hand-made change) and the next index.
    mutating func set(bytes: [UInt8], nextIndex: UInt64? = nil) {
        self.bytes = bytes
        if let nextIndex { self.nextIndex = nextIndex }
    }
}

/// A fragment header with a valid header checksum and whatever fields a
/// forger chooses.
func forgedHeader(type: UInt8, length: UInt32, dataChecksum: UInt32 = 0, index: UInt64) -> [UInt8] {
    var header = [UInt8](repeating: 0, count: LogFormat.headerSize)
    header[4] = LogFormat.version
    header[5] = type
    withUnsafeBytes(of: length.littleEndian) { header.replaceSubrange(8..<12, with: $0) }
    withUnsafeBytes(of: dataChecksum.littleEndian) { header.replaceSubrange(12..<16, with: $0) }
    withUnsafeBytes(of: index.littleEndian) { header.replaceSubrange(16..<24, with: $0) }
    let checksum = header[4...].withUnsafeBytes { CRC32C.checksum($0) }
    withUnsafeBytes(of: checksum.littleEndian) { header.replaceSubrange(0..<4, with: $0) }
    return header
}
