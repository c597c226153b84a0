@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// A notification in its wire form: one complete envelope, and where its
/// payload lies inside it.
///
/// Holds the buffer it was encoded into or decoded from, so the payload is
/// never copied out: observers decode it in place.
@_spi(TransportAuthoring) public struct EncodedNotification: Sendable {
    /// The buffer that holds the envelope.
    package let storage: EnvelopeStorage
    /// Where the whole envelope lies in ``storage``.
    package let envelopeRange: Range<Int>
    /// Where the payload lies in ``storage``.
    package let payloadRange: Range<Int>

    /// An envelope in `storage`, with its payload at `payloadRange`.
    package init(storage: EnvelopeStorage, envelopeRange: Range<Int>, payloadRange: Range<Int>) {
        self.storage = storage
        self.envelopeRange = envelopeRange
        self.payloadRange = payloadRange
    }

    /// An envelope in `storage`, with its payload at `payloadRange`.
    package init(storage: [UInt8], envelopeRange: Range<Int>, payloadRange: Range<Int>) {
        self.init(storage: EnvelopeStorage(storage), envelopeRange: envelopeRange, payloadRange: payloadRange)
    }

    /// The envelope's bytes, ready to send or append to a log.
    ///
    /// A copy, unless the envelope was decoded from an array; to send
    /// without copying, use ``withUnsafeEnvelope(_:)``.
    public var envelope: ArraySlice<UInt8> { storage[envelopeRange] }

    /// The payload's bytes.
    ///
    /// A copy, unless the envelope was decoded from an array; to read
    /// without copying, use ``withUnsafePayload(_:)``.
    public var payload: ArraySlice<UInt8> { storage[payloadRange] }

    /// Calls `body` with the envelope's bytes, valid only during the call.
    public func withUnsafeEnvelope<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try storage.withUnsafeBytes { all in
            try body(UnsafeRawBufferPointer(rebasing: all[envelopeRange]))
        }
    }

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
    /// The magic as one word, in the byte order of this machine's loads.
    static let magicWord = UInt32(littleEndian: 0x544F_4E54)
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
    /// Encoding allocates once, the envelope's buffer: `writePayload`
    /// appends to an array the calling thread keeps between encodings (up to
    /// 16 KiB), and `payloadSizeHint` reserves that array's room up front for
    /// a larger payload.
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
        return try EnvelopeHeader(bytes, maximumPayloadSize: maximumPayloadSize).recordLength
    }

    /// Checks the magic and version in however many of the first five bytes exist.
    static func checkPrefix(_ bytes: UnsafeRawBufferPointer) throws(TypedNotificationError) {
        if bytes.count >= 5, bytes.loadUnaligned(as: UInt32.self) == magicWord, bytes[4] == currentVersion {
            return
        }
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
struct EnvelopeHeader {
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

/// Builds an envelope in two steps, so a center can encode the payload and
/// checksum it before taking its send lock, and only stamp the sequence number
/// and clocks under the lock: the per-post fields sit in the trailer, and
/// CRC-32C can be carried forward over them.
///
/// `@unchecked Sendable`: its buffer is copy-on-write, as an array's storage
/// is. It is written only in `init`, before any copy exists, and in
/// ``finish(sequence:timestamp:)`` once `isKnownUniquelyReferenced` proved
/// no other value holds it (a copy otherwise); a count that drops to one
/// cannot rise again without this value being copied.
struct PendingEnvelope: @unchecked Sendable {
    /// Holds everything but the trailer, with room for it.
    private var buffer: EnvelopeBuffer
    private let crc: CRC32C
    private let payloadRange: Range<Int>
    /// The bytes before the trailer.
    private let unfinishedLength: Int

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
        // The payload goes to the thread's scratch array first, since an
        // encoder appends to a `[UInt8]`, and is copied into the envelope's
        // own buffer once its size is known. A hint reserves the room, clamped
        // so a wrong one cannot reserve more than the largest payload.
        var payload = ThreadScratch.take()
        if let payloadSizeHint, payloadSizeHint > payload.capacity {
            payload.reserveCapacity(min(payloadSizeHint, NotificationEnvelope.payloadSizeHardLimit))
        }
        do {
            try writePayload(&payload)
        } catch {
            ThreadScratch.giveBack(payload)
            throw TypedNotificationError(
                code: .payloadEncodingFailed,
                message: "could not encode the payload of \(name)",
                cause: error
            )
        }
        let payloadLength = payload.count
        let limit = min(max(0, maximumPayloadSize), NotificationEnvelope.payloadSizeHardLimit)
        guard payloadLength <= limit else {
            ThreadScratch.giveBack(payload)
            throw TypedNotificationError(
                code: .payloadTooLarge,
                message: "\(name) payload is \(payloadLength) bytes; the limit is \(limit)"
            )
        }
        let unfinished = prefix + payloadLength
        let total = unfinished + NotificationEnvelope.trailerSize
        let buffer = EnvelopeBuffer.make(capacity: total)
        var crc = CRC32C()
        buffer.write { raw, count in
            raw.storeBytes(of: NotificationEnvelope.magicWord, toByteOffset: 0, as: UInt32.self)
            raw[4] = NotificationEnvelope.currentVersion
            raw[5] = UInt8(nameBytes.count)
            raw[6] = UInt8(endpointBytes.count)
            raw[7] = 0
            raw.storeBytes(of: UInt32(payloadLength).littleEndian, toByteOffset: 8, as: UInt32.self)
            raw.storeBytes(of: sender.processID.littleEndian, toByteOffset: 12, as: Int32.self)
            raw.storeBytes(of: sender.userID.littleEndian, toByteOffset: 16, as: UInt32.self)
            raw.storeBytes(of: sender.instance.littleEndian, toByteOffset: 20, as: UInt64.self)
            raw.storeBytes(of: UInt32(total).littleEndian, toByteOffset: 28, as: UInt32.self)
            var offset = NotificationEnvelope.headerSize
            offset = raw.copyUTF8(of: name.rawValue, to: offset)
            offset = raw.copyUTF8(of: sender.endpoint, to: offset)
            payload.withUnsafeBytes { source in
                guard !source.isEmpty else { return }
                UnsafeMutableRawBufferPointer(rebasing: raw[offset..<(offset + source.count)]).copyMemory(from: source)
            }
            count = unfinished
            crc.update(UnsafeRawBufferPointer(rebasing: raw[..<unfinished]))
        }
        ThreadScratch.giveBack(consume payload)
        self.buffer = buffer
        self.crc = crc
        self.payloadRange = prefix..<unfinished
        self.unfinishedLength = unfinished
    }

    /// The envelope `finish` made, without its trailer, to be numbered
    /// again: a post that queued behind a failed one gives its number back.
    init(unfinishing encoded: EncodedNotification) {
        let start = encoded.envelopeRange.lowerBound
        let end = max(start, encoded.envelopeRange.upperBound - NotificationEnvelope.trailerSize)
        let buffer = EnvelopeBuffer.make(capacity: end - start + NotificationEnvelope.trailerSize)
        encoded.storage.withUnsafeBytes { buffer.append(UnsafeRawBufferPointer(rebasing: $0[start..<end])) }
        var crc = CRC32C()
        buffer.withUnsafeBytes { crc.update($0) }
        self.buffer = buffer
        self.crc = crc
        unfinishedLength = end - start
        payloadRange = (encoded.payloadRange.lowerBound - start)..<(encoded.payloadRange.upperBound - start)
    }

    /// Writes the trailer and the checksum. Cheap: 28 bytes, in room
    /// already there.
    consuming func finish(sequence: UInt64, timestamp: NotificationTimestamp) -> EncodedNotification {
        // A copy of this envelope finished before shares the buffer, whose
        // bytes must not change under it: this one gets its own.
        if !isKnownUniquelyReferenced(&buffer) {
            buffer = buffer.copy(
                first: unfinishedLength, capacity: unfinishedLength + NotificationEnvelope.trailerSize)
        }
        let start = unfinishedLength
        var crc = self.crc
        buffer.write { raw, count in
            let trailer = UnsafeMutableRawBufferPointer(
                rebasing: raw[start..<(start + NotificationEnvelope.trailerSize)])
            trailer.storeBytes(of: sequence.littleEndian, toByteOffset: 0, as: UInt64.self)
            trailer.storeBytes(of: timestamp.wallClockNanoseconds.littleEndian, toByteOffset: 8, as: Int64.self)
            trailer.storeBytes(of: timestamp.monotonicNanoseconds.littleEndian, toByteOffset: 16, as: UInt64.self)
            crc.update(UnsafeRawBufferPointer(rebasing: trailer[..<24]))
            trailer.storeBytes(of: crc.value.littleEndian, toByteOffset: 24, as: UInt32.self)
            count = start + NotificationEnvelope.trailerSize
        }
        let total = start + NotificationEnvelope.trailerSize
        return EncodedNotification(
            storage: EnvelopeStorage(buffer), envelopeRange: 0..<total, payloadRange: payloadRange)
    }
}

func hex(_ value: UInt32) -> String {
    let digits = String(value, radix: 16, uppercase: true)
    return "0x" + String(repeating: "0", count: 8 - digits.count) + digits
}

/// A cache key for short byte strings, computed without allocating: a
/// multiply-xorshift over eight bytes at a time, so a 20-byte name costs
/// three multiplies rather than FNV-1a's twenty dependent ones. The high bits
/// are the well-mixed ones, and the ones a cache slot is taken from.
func wordHash(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
    let multiplier: UInt64 = 0x9E37_79B9_7F4A_7C15
    var hash: UInt64 = 0xCBF2_9CE4_8422_2325 ^ UInt64(bytes.count)
    var index = 0
    while index + 8 <= bytes.count {
        hash = (hash ^ bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)) &* multiplier
        hash ^= hash >> 32
        index += 8
    }
    var tail: UInt64 = 0
    var shift: UInt64 = 0
    while index < bytes.count {
        tail |= UInt64(bytes[index]) << shift
        shift += 8
        index += 1
    }
    hash = (hash ^ tail) &* multiplier
    return hash ^ (hash >> 29)
}

extension UnsafeRawBufferPointer {
    /// A little-endian integer at `offset`; the caller has checked the bounds.
    package func loadLittleEndian<T: FixedWidthInteger>(_: T.Type, at offset: Int) -> T {
        T(littleEndian: loadUnaligned(fromByteOffset: offset, as: T.self))
    }
}

extension UnsafeMutableRawBufferPointer {
    /// Copies `text`'s UTF-8 to `offset`, which has room for it; returns the
    /// offset just past it.
    fileprivate func copyUTF8(of text: String, to offset: Int) -> Int {
        let utf8 = text.utf8
        let copied = utf8.withContiguousStorageIfAvailable { stored in
            UnsafeMutableRawBufferPointer(rebasing: self[offset...]).copyMemory(from: UnsafeRawBufferPointer(stored))
            return stored.count
        }
        if let copied { return offset + copied }
        var next = offset
        for byte in utf8 {
            self[next] = byte
            next += 1
        }
        return next
    }
}

extension [UInt8] {
    /// Appends `value` in little-endian byte order.
    package mutating func appendLittleEndian<T: FixedWidthInteger>(_ value: T) {
        var little = value.littleEndian
        Swift.withUnsafeBytes(of: &little) { append(contentsOf: $0) }
    }
}
