/// A notification in its wire form: one complete envelope, and where its
/// payload lies inside it.
///
/// Holds the buffer it was encoded into or decoded from, so the payload is
/// never copied out: observers decode it in place.
public struct EncodedNotification: Sendable {
    /// The buffer that holds the envelope.
    package let storage: [UInt8]
    /// Where the whole envelope lies in ``storage``.
    package let envelopeRange: Range<Int>
    /// Where the payload lies in ``storage``.
    package let payloadRange: Range<Int>

    /// The envelope's bytes, ready to send or append to a log.
    public var envelope: ArraySlice<UInt8> { storage[envelopeRange] }

    /// The payload's bytes.
    public var payload: ArraySlice<UInt8> { storage[payloadRange] }

    /// Calls `body` with the payload's bytes, valid only during the call.
    public func withUnsafePayload<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try storage.withUnsafeBytes { all in
            try body(UnsafeRawBufferPointer(rebasing: all[payloadRange]))
        }
    }
}

/// The one wire format of every cross-process transport: versioned,
/// length-checked and CRC-32C checksummed.
///
/// The format is specified byte by byte in <doc:WireFormat>. In short, all
/// integers little-endian:
///
/// | Offset | Size | Field |
/// | --- | --- | --- |
/// | 0 | 4 | magic `TNOT` (54 4E 4F 54) |
/// | 4 | 1 | format version, 1 |
/// | 5 | 1 | name length N, 1…200 |
/// | 6 | 1 | endpoint length E, 1…64 |
/// | 7 | 1 | reserved, 0 |
/// | 8 | 4 | payload length P, at most 16 MiB |
/// | 12 | 4 | sender process id |
/// | 16 | 4 | sender user id |
/// | 20 | 8 | sender instance |
/// | 28 | 4 | record length T = 60 + N + E + P |
/// | 32 | N | name |
/// | 32+N | E | endpoint label |
/// | 32+N+E | P | payload |
/// | T−28 | 8 | sequence number, ≥ 1 |
/// | T−20 | 8 | wall clock, ns since 1970 |
/// | T−12 | 8 | monotonic clock, ns |
/// | T−4 | 4 | CRC-32C of bytes 0 ..< T−4 |
///
/// Decoding is total: for any bytes it returns a message or throws a
/// ``TypedNotificationError``, and it checks every length against its limit
/// before using it.
@_spi(TransportAuthoring) public enum NotificationEnvelope {
    /// The first four bytes of every envelope: ASCII `TNOT`.
    public static let magic: [UInt8] = [0x54, 0x4E, 0x4F, 0x54]
    /// The format version this code writes and reads.
    public static let currentVersion: UInt8 = 1
    /// Bytes before the name.
    public static let headerSize = 32
    /// Bytes after the payload: sequence, two clocks and the checksum.
    public static let trailerSize = 28
    /// The largest payload any envelope may carry: 16 MiB.
    public static let payloadSizeHardLimit = 16 * 1024 * 1024

    /// The size of an envelope with these field lengths.
    public static func size(nameLength: Int, endpointLength: Int, payloadLength: Int) -> Int {
        headerSize + nameLength + endpointLength + payloadLength + trailerSize
    }

    /// Encodes a notification, letting `writePayload` append the payload
    /// straight into the envelope's buffer.
    ///
    /// With the payload's exact size in `payloadSizeHint`, encoding allocates
    /// exactly once: the envelope's buffer.
    ///
    /// - Throws: ``TypedNotificationError`` with code
    ///   ``TypedNotificationError/Code/payloadTooLarge`` when the payload is over
    ///   `maximumPayloadSize` (or 16 MiB), or
    ///   ``TypedNotificationError/Code/payloadEncodingFailed`` when
    ///   `writePayload` throws.
    public static func encode(
        name: NotificationName,
        sender: NotificationSender,
        sequence: UInt64,
        timestamp: NotificationTimestamp,
        maximumPayloadSize: Int = payloadSizeHardLimit,
        payloadSizeHint: Int? = nil,
        writePayload: (inout [UInt8]) throws -> Void
    ) throws(TypedNotificationError) -> EncodedNotification {
        let pending = try PendingEnvelope(
            name: name,
            sender: sender,
            maximumPayloadSize: maximumPayloadSize,
            payloadSizeHint: payloadSizeHint,
            writePayload: writePayload
        )
        return pending.finish(sequence: sequence, timestamp: timestamp)
    }

    /// Decodes the one envelope that `bytes` holds, with no bytes left over.
    ///
    /// - Throws: ``TypedNotificationError`` naming what is wrong: a truncated
    ///   record, bad magic, an unknown version, a length out of bounds, a
    ///   payload over `maximumPayloadSize`, a checksum mismatch, an invalid
    ///   name or endpoint, or a malformed field.
    public static func decode(
        _ bytes: [UInt8],
        maximumPayloadSize: Int = payloadSizeHardLimit
    ) throws(TypedNotificationError) -> TransportMessage {
        var decoder = EnvelopeDecoder(maximumPayloadSize: maximumPayloadSize)
        return try decoder.decode(bytes)
    }

    /// The length of the envelope that starts at `offset`, read from and checked
    /// against its header; `nil` when fewer than ``headerSize`` bytes are there.
    ///
    /// For framing a stream or a log: the record is complete once `bytes` holds
    /// this many bytes from `offset`. The checksum is not checked here.
    public static func recordLength(
        in bytes: UnsafeRawBufferPointer,
        maximumPayloadSize: Int = payloadSizeHardLimit
    ) throws(TypedNotificationError) -> Int? {
        guard bytes.count >= headerSize else {
            try checkPrefix(bytes)
            return nil
        }
        return try Header(bytes, maximumPayloadSize: maximumPayloadSize).recordLength
    }

    /// Checks the magic and version in however many of the first five bytes exist.
    fileprivate static func checkPrefix(_ bytes: UnsafeRawBufferPointer) throws(TypedNotificationError) {
        for index in 0..<min(4, bytes.count) where bytes[index] != magic[index] {
            throw envelopeError(.badMagic, "the record does not start with the magic bytes 54 4E 4F 54 (\"TNOT\")")
        }
        if bytes.count > 4, bytes[4] != currentVersion {
            throw envelopeError(
                .unsupportedVersion,
                "envelope format version \(bytes[4]) is not supported; this decoder reads version \(currentVersion)"
            )
        }
    }
}

func envelopeError(_ code: TypedNotificationError.Code, _ message: String) -> TypedNotificationError {
    TypedNotificationError(code: code, message: message)
}

/// The fixed header, read and checked.
private struct Header {
    var nameLength: Int
    var endpointLength: Int
    var payloadLength: Int
    var processID: Int32
    var userID: UInt32
    var instance: UInt64
    var recordLength: Int

    init(_ bytes: UnsafeRawBufferPointer, maximumPayloadSize: Int) throws(TypedNotificationError) {
        try NotificationEnvelope.checkPrefix(bytes)
        guard bytes.count >= NotificationEnvelope.headerSize else {
            throw envelopeError(
                .truncatedEnvelope,
                "the record is \(bytes.count) bytes; its header alone is \(NotificationEnvelope.headerSize)"
            )
        }
        nameLength = Int(bytes[5])
        endpointLength = Int(bytes[6])
        guard (1...NotificationName.maximumLength).contains(nameLength) else {
            throw envelopeError(
                .lengthOutOfBounds, "name length \(nameLength) is outside 1...\(NotificationName.maximumLength)")
        }
        guard (1...NotificationSender.maximumEndpointLength).contains(endpointLength) else {
            throw envelopeError(
                .lengthOutOfBounds,
                "endpoint length \(endpointLength) is outside 1...\(NotificationSender.maximumEndpointLength)"
            )
        }
        guard bytes[7] == 0 else {
            throw envelopeError(.malformedEnvelope, "reserved byte 7 is \(bytes[7]); it must be 0")
        }
        payloadLength = Int(bytes.loadLittleEndian(UInt32.self, at: 8))
        let limit = min(max(0, maximumPayloadSize), NotificationEnvelope.payloadSizeHardLimit)
        guard payloadLength <= limit else {
            throw envelopeError(.payloadTooLarge, "payload length \(payloadLength) is over the limit of \(limit) bytes")
        }
        processID = bytes.loadLittleEndian(Int32.self, at: 12)
        userID = bytes.loadLittleEndian(UInt32.self, at: 16)
        instance = bytes.loadLittleEndian(UInt64.self, at: 20)
        recordLength = Int(bytes.loadLittleEndian(UInt32.self, at: 28))
        let expected = NotificationEnvelope.size(
            nameLength: nameLength,
            endpointLength: endpointLength,
            payloadLength: payloadLength
        )
        guard recordLength == expected else {
            throw envelopeError(
                .lengthOutOfBounds,
                "record length \(recordLength) does not match its field lengths, which add up to \(expected)"
            )
        }
    }
}

/// Decodes envelopes, reusing the names and sender identities it has seen, so
/// that decoding a message allocates nothing beyond the buffer it came in.
///
/// Keep one per receiving thread or loop. The caches are bounded, so hostile
/// input cannot make them grow without limit.
@_spi(TransportAuthoring) public struct EnvelopeDecoder: Sendable {
    /// The largest payload this decoder accepts.
    public let maximumPayloadSize: Int
    private var names: [UInt64: NotificationName] = [:]
    private var senders: [UInt64: NotificationSender] = [:]
    private static let cacheLimit = 1024

    /// Creates a decoder that refuses payloads over `maximumPayloadSize` bytes
    /// (and always over 16 MiB).
    public init(maximumPayloadSize: Int = NotificationEnvelope.payloadSizeHardLimit) {
        self.maximumPayloadSize = maximumPayloadSize
    }

    /// Decodes the one envelope that `bytes` holds, with no bytes left over.
    public mutating func decode(_ bytes: [UInt8]) throws(TypedNotificationError) -> TransportMessage {
        let (message, end) = try decode(bytes, at: 0)
        guard end == bytes.count else {
            throw envelopeError(.malformedEnvelope, "\(bytes.count - end) bytes follow the end of the record")
        }
        return message
    }

    /// Decodes the envelope that starts at `offset` in `bytes`; returns it and
    /// the offset just past it. Bytes after the record are left alone.
    public mutating func decode(
        _ bytes: [UInt8],
        at offset: Int
    ) throws(TypedNotificationError) -> (message: TransportMessage, end: Int) {
        try decode(bytes, at: offset, checksumVerified: false)
    }

    /// Like ``decode(_:at:)``; with `checksumVerified`, the caller has
    /// already proven the record's checksum (a log fragment whose CRC-32C
    /// came out as the residue) and it is not computed again.
    mutating func decode(
        _ bytes: [UInt8],
        at offset: Int,
        checksumVerified: Bool
    ) throws(TypedNotificationError) -> (message: TransportMessage, end: Int) {
        guard (0...bytes.count).contains(offset) else {
            throw envelopeError(.truncatedEnvelope, "offset \(offset) is outside the \(bytes.count) bytes given")
        }
        // withUnsafeBytes rethrows untyped errors; a Result keeps the type.
        let parsed = bytes.withUnsafeBytes { all -> Result<(TransportMessage, Int), TypedNotificationError> in
            do throws(TypedNotificationError) {
                return .success(
                    try parse(
                        UnsafeRawBufferPointer(rebasing: all[offset...]), storage: bytes, offset: offset,
                        checksumVerified: checksumVerified)
                )
            } catch {
                return .failure(error)
            }
        }
        let (message, length) = try parsed.get()
        return (message, offset + length)
    }

    private mutating func parse(
        _ record: UnsafeRawBufferPointer,
        storage: [UInt8],
        offset: Int,
        checksumVerified: Bool
    ) throws(TypedNotificationError) -> (TransportMessage, Int) {
        let header = try Header(record, maximumPayloadSize: maximumPayloadSize)
        let length = header.recordLength
        guard record.count >= length else {
            throw envelopeError(
                .truncatedEnvelope, "the record says it is \(length) bytes; only \(record.count) are here")
        }
        let stored = record.loadLittleEndian(UInt32.self, at: length - 4)
        let computed =
            checksumVerified ? stored : CRC32C.checksum(UnsafeRawBufferPointer(rebasing: record[..<(length - 4)]))
        guard stored == computed else {
            throw envelopeError(
                .checksumMismatch,
                "checksum mismatch: the record says \(hex(stored)), its bytes give \(hex(computed))"
            )
        }
        let nameStart = NotificationEnvelope.headerSize
        let endpointStart = nameStart + header.nameLength
        let payloadStart = endpointStart + header.endpointLength
        let trailerStart = payloadStart + header.payloadLength
        let name = try cachedName(UnsafeRawBufferPointer(rebasing: record[nameStart..<endpointStart]))
        let sender = try cachedSender(
            header,
            endpoint: UnsafeRawBufferPointer(rebasing: record[endpointStart..<payloadStart])
        )
        let sequence = record.loadLittleEndian(UInt64.self, at: trailerStart)
        guard sequence >= 1 else {
            throw envelopeError(.malformedEnvelope, "sequence number 0; senders number their posts from 1")
        }
        let timestamp = NotificationTimestamp(
            wallClockNanoseconds: record.loadLittleEndian(Int64.self, at: trailerStart + 8),
            monotonicNanoseconds: record.loadLittleEndian(UInt64.self, at: trailerStart + 16)
        )
        let encoded = EncodedNotification(
            storage: storage,
            envelopeRange: offset..<(offset + length),
            payloadRange: (offset + payloadStart)..<(offset + trailerStart)
        )
        return (
            TransportMessage(
                name: name,
                sender: sender,
                sequence: sequence,
                timestamp: timestamp,
                payload: .encoded(encoded)
            ),
            length
        )
    }

    private mutating func cachedName(_ bytes: UnsafeRawBufferPointer) throws(TypedNotificationError) -> NotificationName
    {
        let key = fnv1a(bytes)
        if let known = names[key], known.rawValue.utf8.elementsEqual(bytes) {
            return known
        }
        if let problem = NotificationName.problem(with: bytes, maximumLength: NotificationName.maximumLength) {
            throw envelopeError(.invalidName, "the envelope's notification name \(problem)")
        }
        let name = NotificationName(checked: String(decoding: bytes, as: UTF8.self))
        if names.count >= Self.cacheLimit { names.removeAll(keepingCapacity: true) }
        names[key] = name
        return name
    }

    private mutating func cachedSender(
        _ header: Header,
        endpoint: UnsafeRawBufferPointer
    ) throws(TypedNotificationError) -> NotificationSender {
        if let known = senders[header.instance], known.processID == header.processID,
            known.userID == header.userID, known.endpoint.utf8.elementsEqual(endpoint)
        {
            return known
        }
        if let problem = NotificationName.problem(
            with: endpoint, maximumLength: NotificationSender.maximumEndpointLength)
        {
            throw envelopeError(.invalidEndpoint, "the envelope's endpoint label \(problem)")
        }
        let sender = NotificationSender(
            checkedProcessID: header.processID,
            userID: header.userID,
            endpoint: String(decoding: endpoint, as: UTF8.self),
            instance: header.instance
        )
        if senders.count >= Self.cacheLimit { senders.removeAll(keepingCapacity: true) }
        senders[header.instance] = sender
        return sender
    }
}

/// Builds an envelope in two steps, so a center can encode the payload and
/// checksum it before taking its send lock, and only stamp the sequence number
/// and clocks under the lock: the per-post fields sit in the trailer, and
/// CRC-32C can be carried forward over them.
struct PendingEnvelope {
    private var bytes: [UInt8]
    private var crc: CRC32C
    private let payloadRange: Range<Int>

    init(
        name: NotificationName,
        sender: NotificationSender,
        maximumPayloadSize: Int,
        payloadSizeHint: Int?,
        writePayload: (inout [UInt8]) throws -> Void
    ) throws(TypedNotificationError) {
        let nameBytes = name.rawValue.utf8
        let endpointBytes = sender.endpoint.utf8
        guard (1...NotificationSender.maximumEndpointLength).contains(endpointBytes.count) else {
            throw TypedNotificationError(
                code: .invalidEndpoint,
                message: "endpoint label \(TypedNotificationError.quote(sender.endpoint)) is not 1 to 64 bytes")
        }
        let prefix = NotificationEnvelope.headerSize + nameBytes.count + endpointBytes.count
        var bytes: [UInt8] = []
        // Room for the whole envelope when the payload's size is known (clamped,
        // so a wrong hint cannot reserve more than the largest envelope).
        let expectedPayload = min(max(payloadSizeHint ?? 256, 0), NotificationEnvelope.payloadSizeHardLimit)
        bytes.reserveCapacity(prefix + expectedPayload + NotificationEnvelope.trailerSize)
        bytes.append(contentsOf: NotificationEnvelope.magic)
        bytes.append(NotificationEnvelope.currentVersion)
        bytes.append(UInt8(nameBytes.count))
        bytes.append(UInt8(endpointBytes.count))
        bytes.append(0)
        bytes.appendLittleEndian(UInt32(0))  // payload length, patched below
        bytes.appendLittleEndian(sender.processID)
        bytes.appendLittleEndian(sender.userID)
        bytes.appendLittleEndian(sender.instance)
        bytes.appendLittleEndian(UInt32(0))  // record length, patched below
        bytes.append(contentsOf: nameBytes)
        bytes.append(contentsOf: endpointBytes)
        do {
            try writePayload(&bytes)
        } catch {
            throw TypedNotificationError(
                code: .payloadEncodingFailed,
                message: "could not encode the payload of \(name)",
                cause: error
            )
        }
        let payloadLength = bytes.count - prefix
        let limit = min(max(0, maximumPayloadSize), NotificationEnvelope.payloadSizeHardLimit)
        guard payloadLength >= 0, payloadLength <= limit else {
            throw TypedNotificationError(
                code: .payloadTooLarge,
                message: "\(name) payload is \(payloadLength) bytes; the limit is \(limit)"
            )
        }
        let total = prefix + payloadLength + NotificationEnvelope.trailerSize
        bytes.storeLittleEndian(UInt32(payloadLength), at: 8)
        bytes.storeLittleEndian(UInt32(total), at: 28)
        bytes.reserveCapacity(total)
        var crc = CRC32C()
        bytes.withUnsafeBytes { crc.update($0) }
        self.bytes = bytes
        self.crc = crc
        self.payloadRange = prefix..<(prefix + payloadLength)
    }

    /// The envelope `finish` made, without its trailer, to be numbered
    /// again: a post that queued behind a failed one gives its number back.
    init(unfinishing encoded: EncodedNotification) {
        let start = encoded.envelopeRange.lowerBound
        let end = max(start, encoded.envelopeRange.upperBound - NotificationEnvelope.trailerSize)
        bytes = Array(encoded.storage[start..<end])
        var crc = CRC32C()
        bytes.withUnsafeBytes { crc.update($0) }
        self.crc = crc
        payloadRange = (encoded.payloadRange.lowerBound - start)..<(encoded.payloadRange.upperBound - start)
    }

    /// Appends the trailer and the checksum. Cheap: 28 bytes.
    consuming func finish(sequence: UInt64, timestamp: NotificationTimestamp) -> EncodedNotification {
        let trailerStart = bytes.count
        bytes.appendLittleEndian(sequence)
        bytes.appendLittleEndian(timestamp.wallClockNanoseconds)
        bytes.appendLittleEndian(timestamp.monotonicNanoseconds)
        bytes.withUnsafeBytes { crc.update(UnsafeRawBufferPointer(rebasing: $0[trailerStart...])) }
        bytes.appendLittleEndian(crc.value)
        return EncodedNotification(storage: bytes, envelopeRange: 0..<bytes.count, payloadRange: payloadRange)
    }
}

private func hex(_ value: UInt32) -> String {
    let digits = String(value, radix: 16, uppercase: true)
    return "0x" + String(repeating: "0", count: 8 - digits.count) + digits
}

/// FNV-1a, 64-bit: a cache key for short byte strings, computed without allocating.
private func fnv1a(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
    var hash: UInt64 = 0xCBF2_9CE4_8422_2325
    for byte in bytes {
        hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3
    }
    return hash
}

extension UnsafeRawBufferPointer {
    /// A little-endian integer at `offset`; the caller has checked the bounds.
    func loadLittleEndian<T: FixedWidthInteger>(_: T.Type, at offset: Int) -> T {
        T(littleEndian: loadUnaligned(fromByteOffset: offset, as: T.self))
    }
}

extension [UInt8] {
    /// Appends `value` in little-endian byte order.
    mutating func appendLittleEndian<T: FixedWidthInteger>(_ value: T) {
        var little = value.littleEndian
        Swift.withUnsafeBytes(of: &little) { append(contentsOf: $0) }
    }

    fileprivate mutating func storeLittleEndian<T: FixedWidthInteger>(_ value: T, at offset: Int) {
        withUnsafeMutableBytes { $0.storeBytes(of: value.littleEndian, toByteOffset: offset, as: T.self) }
    }
}
