@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Decodes envelopes, reusing the names and sender identities it has seen, so
/// that decoding a message allocates nothing beyond the buffer it came in.
///
/// Keep one per receiving thread or loop. The caches are bounded, so hostile
/// input cannot make them grow without limit.
@_spi(TransportAuthoring) public struct EnvelopeDecoder: Sendable {
    /// The largest payload this decoder accepts.
    public let maximumPayloadSize: Int
    // Direct-mapped caches: a slot per key's high bits, a miss replaces the
    // slot. Bounded whatever the input, and a hit costs no hashing. Each
    // starts with 8 slots and grows to 256 at its first eviction: a decoder
    // that sees a name or two (most of a process's 1,000 hubs) keeps 0.6 KB
    // instead of 20.
    private var names = [(key: UInt64, value: NotificationName)?](repeating: nil, count: firstSlots)
    private var senders = [(key: UInt64, value: NotificationSender)?](repeating: nil, count: firstSlots)
    /// The name the last envelope carried, checked before any hashing.
    private var lastName: NotificationName?
    private static let firstSlots = 8
    private static let cacheSlots = 256

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

    /// The size of the largest envelope this decoder takes: the longest
    /// name and endpoint, and a payload of ``maximumPayloadSize``.
    package var largestEnvelope: Int {
        NotificationEnvelope.size(
            nameLength: NotificationName.maximumLength, endpointLength: NotificationSender.maximumEndpointLength,
            payloadLength: max(0, min(maximumPayloadSize, NotificationEnvelope.payloadSizeHardLimit)))
    }

    /// What the envelope that `bytes` starts says of itself, when its
    /// payload is over ``maximumPayloadSize``: its name and sender, read from
    /// the header alone, and its sequence number when the whole record is
    /// there and its checksum holds. `nil` when the payload is within the
    /// limit, or the header, name or endpoint is not valid.
    ///
    /// For refusing a record unread (or cut short, as a datagram longer than
    /// its receive slot is) and still saying whose it was: see
    /// `TransportReceiver/refused(_:)`.
    public mutating func oversized(_ bytes: UnsafeRawBufferPointer) -> MissedNotifications? {
        guard let header = try? EnvelopeHeader(bytes, maximumPayloadSize: NotificationEnvelope.payloadSizeHardLimit),
            header.payloadLength > maximumPayloadSize
        else { return nil }
        let nameStart = NotificationEnvelope.headerSize
        let endpointStart = nameStart + header.nameLength
        let payloadStart = endpointStart + header.endpointLength
        guard bytes.count >= payloadStart,
            let name = try? cachedName(UnsafeRawBufferPointer(rebasing: bytes[nameStart..<endpointStart])),
            let sender = try? cachedSender(
                header, endpoint: UnsafeRawBufferPointer(rebasing: bytes[endpointStart..<payloadStart]))
        else { return nil }
        var sequence: UInt64?
        let length = header.recordLength
        if bytes.count >= length,
            bytes.loadLittleEndian(UInt32.self, at: length - 4)
                == CRC32C.checksum(UnsafeRawBufferPointer(rebasing: bytes[..<(length - 4)]))
        {
            let stored = bytes.loadLittleEndian(UInt64.self, at: length - NotificationEnvelope.trailerSize)
            if stored >= 1 { sequence = stored }
        }
        return MissedNotifications(count: 1, name: name, sender: sender, lastSequence: sequence)
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
    package mutating func decode(
        _ bytes: [UInt8],
        at offset: Int,
        checksumVerified: Bool
    ) throws(TypedNotificationError) -> (message: TransportMessage, end: Int) {
        guard (0...bytes.count).contains(offset) else {
            throw envelopeError(.truncatedEnvelope, "offset \(offset) is outside the \(bytes.count) bytes given")
        }
        // withUnsafeBytes rethrows untyped errors, so the typed one is kept
        // aside. The closure returns plain fields; the message, whose payload
        // may hold an existential and is copied through run-time witnesses,
        // is made once, outside.
        var failure: TypedNotificationError?
        let parsed = bytes.withUnsafeBytes { all -> Fields? in
            do throws(TypedNotificationError) {
                return try parse(
                    UnsafeRawBufferPointer(rebasing: all[offset...]), checksumVerified: checksumVerified)
            } catch {
                failure = error
                return nil
            }
        }
        guard let fields = parsed else {
            throw failure ?? envelopeError(.malformedEnvelope, "the record could not be decoded")
        }
        return (message(fields, in: EnvelopeStorage(bytes), at: offset), offset + fields.length)
    }

    /// Decodes the one envelope that `bytes` holds, with no bytes left
    /// over, into a buffer of its own: for a receive buffer that is reused,
    /// as a datagram's is.
    ///
    /// The record is checked whole before anything is copied, and copying
    /// it costs one allocation, a third of what an array's does.
    public mutating func decode(
        copying bytes: UnsafeRawBufferPointer
    ) throws(TypedNotificationError) -> TransportMessage {
        let fields = try parse(bytes, checksumVerified: false)
        guard fields.length == bytes.count else {
            throw envelopeError(.malformedEnvelope, "\(bytes.count - fields.length) bytes follow the end of the record")
        }
        return message(fields, in: EnvelopeStorage(copying: bytes), at: 0)
    }

    /// The message `fields` describe, its envelope at `offset` in `storage`.
    private func message(_ fields: Fields, in storage: EnvelopeStorage, at offset: Int) -> TransportMessage {
        Anatomy.decoded(key: fields.timestamp.monotonicNanoseconds)
        return TransportMessage(
            name: fields.name,
            sender: fields.sender,
            sequence: fields.sequence,
            timestamp: fields.timestamp,
            payload: .encoded(
                EncodedNotification(
                    storage: storage,
                    envelopeRange: offset..<(offset + fields.length),
                    payloadRange: (offset + fields.payload.lowerBound)..<(offset + fields.payload.upperBound)
                ))
        )
    }

    /// What a record holds, checked, with its payload as a range of the record.
    private struct Fields {
        var name: NotificationName
        var sender: NotificationSender
        var sequence: UInt64
        var timestamp: NotificationTimestamp
        var payload: Range<Int>
        var length: Int
    }

    private mutating func parse(
        _ record: UnsafeRawBufferPointer,
        checksumVerified: Bool
    ) throws(TypedNotificationError) -> Fields {
        let header = try EnvelopeHeader(record, maximumPayloadSize: maximumPayloadSize)
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
        return Fields(
            name: name,
            sender: sender,
            sequence: sequence,
            timestamp: timestamp,
            payload: payloadStart..<trailerStart,
            length: length
        )
    }

    private mutating func cachedName(_ bytes: UnsafeRawBufferPointer) throws(TypedNotificationError) -> NotificationName
    {
        // Most envelopes carry the name the one before did.
        if let last = lastName, equal(last.rawValue, bytes) { return last }
        let key = wordHash(bytes)
        var slot = Self.slot(of: key, in: names.count)
        if let known = names[slot], known.key == key, equal(known.value.rawValue, bytes) {
            lastName = known.value
            return known.value
        }
        if let problem = NotificationName.problem(with: bytes, maximumLength: NotificationName.maximumLength) {
            throw envelopeError(.invalidName, "the envelope's notification name \(problem)")
        }
        let name = NotificationName(checked: String(decoding: bytes, as: UTF8.self))
        if names[slot] != nil, names.count < Self.cacheSlots {
            names = Self.grown(names)
            slot = Self.slot(of: key, in: names.count)
        }
        names[slot] = (key, name)
        lastName = name
        return name
    }

    /// The slot of `key` in a cache of `count` slots (a power of two): its high bits.
    private static func slot(of key: UInt64, in count: Int) -> Int {
        Int(truncatingIfNeeded: key >> UInt64(64 - count.trailingZeroBitCount))
    }

    /// `cache` with ``cacheSlots`` slots, holding what it held.
    private static func grown<Value>(_ cache: [(key: UInt64, value: Value)?]) -> [(key: UInt64, value: Value)?] {
        var larger = [(key: UInt64, value: Value)?](repeating: nil, count: cacheSlots)
        for case let entry? in cache { larger[slot(of: entry.key, in: cacheSlots)] = entry }
        return larger
    }

    private mutating func cachedSender(
        _ header: EnvelopeHeader,
        endpoint: UnsafeRawBufferPointer
    ) throws(TypedNotificationError) -> NotificationSender {
        let key = header.instance &* 0x9E37_79B9_7F4A_7C15
        var slot = Self.slot(of: key, in: senders.count)
        if let known = senders[slot]?.value, known.instance == header.instance,
            known.processID == header.processID, known.userID == header.userID, equal(known.endpoint, endpoint)
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
        if senders[slot] != nil, senders.count < Self.cacheSlots {
            senders = Self.grown(senders)
            slot = Self.slot(of: key, in: senders.count)
        }
        senders[slot] = (key, sender)
        return sender
    }
}

/// Whether `text`'s UTF-8 is exactly `bytes`.
private func equal(_ text: String, _ bytes: UnsafeRawBufferPointer) -> Bool {
    let utf8 = text.utf8
    guard utf8.count == bytes.count else { return false }
    return utf8.withContiguousStorageIfAvailable { stored in
        stored.count == 0 || memoryEqual(stored.baseAddress, bytes.baseAddress, stored.count)
    } ?? utf8.elementsEqual(bytes)
}

/// Whether `count` bytes at `a` and `b` are the same.
private func memoryEqual(_ a: UnsafePointer<UInt8>?, _ b: UnsafeRawPointer?, _ count: Int) -> Bool {
    guard let a, let b else { return count == 0 }
    let other = b.assumingMemoryBound(to: UInt8.self)
    var index = 0
    while index + 8 <= count {
        let x = UnsafeRawPointer(a + index).loadUnaligned(as: UInt64.self)
        let y = UnsafeRawPointer(other + index).loadUnaligned(as: UInt64.self)
        guard x == y else { return false }
        index += 8
    }
    while index < count {
        guard a[index] == other[index] else { return false }
        index += 1
    }
    return true
}
