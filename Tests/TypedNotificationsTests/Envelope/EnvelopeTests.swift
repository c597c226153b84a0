import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

/// Builders for envelopes, valid and deliberately broken.
enum Envelopes {
    static func sender(
        pid: Int32 = 4242,
        uid: UInt32 = 501,
        endpoint: String = "widget",
        instance: UInt64 = 0x0102_0304_0506_0708
    ) throws -> NotificationSender {
        try NotificationSender(processID: pid, userID: uid, endpoint: endpoint, instance: instance)
    }

    static func encode(
        name: NotificationName = "com.example.ping",
        sender: NotificationSender,
        sequence: UInt64 = 1,
        wall: Int64 = 1_700_000_000_000_000_000,
        monotonic: UInt64 = 123_456_789,
        payload: [UInt8] = Array("hello".utf8)
    ) throws -> [UInt8] {
        let encoded = try NotificationEnvelope.encode(
            name: name,
            sender: sender,
            sequence: sequence,
            timestamp: NotificationTimestamp(wallClockNanoseconds: wall, monotonicNanoseconds: monotonic)
        ) { $0.append(contentsOf: payload) }
        return Array(encoded.envelope)
    }

    /// Rewrites the checksum after a deliberate edit, so a test reaches the
    /// check behind it.
    static func resealed(_ bytes: [UInt8]) -> [UInt8] {
        var bytes = bytes
        let crc = bytes.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[..<(bytes.count - 4)])) }
        withUnsafeBytes(of: crc.littleEndian) { raw in
            for (index, byte) in raw.enumerated() { bytes[bytes.count - 4 + index] = byte }
        }
        return bytes
    }

    static func payload(of message: TransportMessage) -> [UInt8]? {
        guard case .encoded(let encoded) = message.payload else { return nil }
        return Array(encoded.payload)
    }
}

/// Asserts that decoding `bytes` throws an error with `code`.
func expectDecodeError(
    _ bytes: [UInt8],
    _ code: TypedNotificationError.Code,
    maximumPayloadSize: Int = NotificationEnvelope.payloadSizeHardLimit,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    do {
        _ = try NotificationEnvelope.decode(bytes, maximumPayloadSize: maximumPayloadSize)
        Issue.record("decoded bytes that should be refused with \(code)", sourceLocation: sourceLocation)
    } catch {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
    }
}

@Suite("Envelope wire format")
struct EnvelopeTests {
    @Test("10,000 random envelopes round-trip exactly")
    func roundTrip() throws {
        var random = SplitMix64(state: 0xE17E_10FE)
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-".utf8)
        func label(_ maxLength: Int) -> String {
            let length = Int.random(in: 1...maxLength, using: &random)
            var bytes = (0..<length).map { _ in alphabet.randomElement(using: &random) ?? 97 }
            bytes[0] = UInt8(ascii: "n")  // never a leading dot
            for index in 1..<bytes.count
            where bytes[index] == UInt8(ascii: ".") && bytes[index - 1] == UInt8(ascii: ".") {
                bytes[index] = UInt8(ascii: "x")
            }
            return String(decoding: bytes, as: UTF8.self)
        }
        var decoder = EnvelopeDecoder()
        for case_ in 0..<10_000 {
            let name = try NotificationName(validating: label(200))
            let sender = try NotificationSender(
                processID: Int32.random(in: .min ... .max, using: &random),
                userID: UInt32.random(in: 0 ... .max, using: &random),
                endpoint: label(64),
                instance: UInt64.random(in: 0 ... .max, using: &random)
            )
            let sequence = UInt64.random(in: 1 ... .max, using: &random)
            let timestamp = NotificationTimestamp(
                wallClockNanoseconds: Int64.random(in: .min ... .max, using: &random),
                monotonicNanoseconds: UInt64.random(in: 0 ... .max, using: &random)
            )
            let payloadLength =
                case_ % 100 == 0 ? Int.random(in: 0...70_000, using: &random) : Int.random(in: 0...300, using: &random)
            let payload = (0..<payloadLength).map { _ in UInt8.random(in: 0...255, using: &random) }

            let encoded = try NotificationEnvelope.encode(
                name: name,
                sender: sender,
                sequence: sequence,
                timestamp: timestamp
            ) { $0.append(contentsOf: payload) }
            let wire = Array(encoded.envelope)
            #expect(
                wire.count
                    == NotificationEnvelope.size(
                        nameLength: name.rawValue.utf8.count,
                        endpointLength: sender.endpoint.utf8.count,
                        payloadLength: payload.count
                    )
            )
            let message = try decoder.decode(wire)
            #expect(message.name == name)
            #expect(message.sender == sender)
            #expect(message.sequence == sequence)
            #expect(message.timestamp == timestamp)
            #expect(Envelopes.payload(of: message) == payload)
            let length = try wire.withUnsafeBytes { try NotificationEnvelope.recordLength(in: $0) }
            #expect(length == wire.count)
        }
    }

    @Test("records back to back in one buffer decode one after another")
    func consecutiveRecords() throws {
        let sender = try Envelopes.sender()
        var log: [UInt8] = []
        for sequence in 1...5 {
            log += try Envelopes.encode(
                sender: sender, sequence: UInt64(sequence), payload: Array(repeating: UInt8(sequence), count: sequence))
        }
        var decoder = EnvelopeDecoder()
        var offset = 0
        var sequences: [UInt64] = []
        while offset < log.count {
            let (message, end) = try decoder.decode(log, at: offset)
            sequences.append(message.sequence)
            #expect(
                Envelopes.payload(of: message)
                    == Array(repeating: UInt8(message.sequence), count: Int(message.sequence)))
            offset = end
        }
        #expect(sequences == [1, 2, 3, 4, 5])
    }

    @Test("every prefix of an envelope is refused as truncated")
    func truncated() throws {
        let wire = try Envelopes.encode(sender: Envelopes.sender())
        for length in 0..<wire.count {
            expectDecodeError(Array(wire[..<length]), .truncatedEnvelope)
        }
        let prefix = Array(wire[..<10])
        #expect(try prefix.withUnsafeBytes { try NotificationEnvelope.recordLength(in: $0) } == nil)
    }

    @Test("wrong magic, versions 0 and 2, and a set reserved byte are refused")
    func magicAndVersion() throws {
        let wire = try Envelopes.encode(sender: Envelopes.sender())
        for index in 0..<4 {
            var bad = wire
            bad[index] ^= 0x20
            expectDecodeError(bad, .badMagic)
            expectDecodeError(Array(bad[..<(index + 1)]), .badMagic)
        }
        for version: UInt8 in [0, 2, 255] {
            var bad = wire
            bad[4] = version
            expectDecodeError(bad, .unsupportedVersion)
            expectDecodeError(Array(bad[..<5]), .unsupportedVersion)
        }
        var reserved = wire
        reserved[7] = 1
        expectDecodeError(reserved, .malformedEnvelope)
    }

    @Test("lengths outside their limits, or that disagree, are refused before use")
    func lengths() throws {
        let wire = try Envelopes.encode(sender: Envelopes.sender())
        for (index, value) in [(5, 0), (5, 201), (6, 0), (6, 65)] {
            var bad = wire
            bad[index] = UInt8(value)
            expectDecodeError(bad, .lengthOutOfBounds)
        }
        var total = wire
        total[28] &+= 1
        expectDecodeError(total, .lengthOutOfBounds)
        // A payload length of 4 GiB is refused against the limit, not allocated.
        var huge = wire
        for index in 8..<12 { huge[index] = 0xFF }
        expectDecodeError(huge, .payloadTooLarge)
    }

    @Test("a payload over the receiver's limit is refused")
    func payloadLimit() throws {
        let wire = try Envelopes.encode(sender: Envelopes.sender(), payload: Array(repeating: 7, count: 1000))
        expectDecodeError(wire, .payloadTooLarge, maximumPayloadSize: 999)
        _ = try NotificationEnvelope.decode(wire, maximumPayloadSize: 1000)
        #expect {
            try NotificationEnvelope.encode(
                name: "x",
                sender: Envelopes.sender(),
                sequence: 1,
                timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0),
                maximumPayloadSize: 10
            ) { $0.append(contentsOf: [UInt8](repeating: 0, count: 11)) }
        } throws: { error in
            (error as? TypedNotificationError)?.code == .payloadTooLarge
        }
    }

    @Test("a changed byte anywhere is caught: every single-bit flip is refused")
    func everyBitFlip() throws {
        let wire = try Envelopes.encode(sender: Envelopes.sender(), payload: Array("{\"ok\":true}".utf8))
        for index in 0..<wire.count {
            for bit in 0..<8 {
                var flipped = wire
                flipped[index] ^= 1 << bit
                #expect(throws: TypedNotificationError.self) {
                    try NotificationEnvelope.decode(flipped)
                }
            }
        }
    }

    @Test("a checksum mismatch names both values")
    func checksum() throws {
        var wire = try Envelopes.encode(sender: Envelopes.sender())
        wire[wire.count - 10] ^= 0xFF
        expectDecodeError(wire, .checksumMismatch)
    }

    @Test("names and endpoints that would escape a directory are refused, even with a valid checksum")
    func invalidNames() throws {
        let wire = try Envelopes.encode(name: "aaaaaaaa", sender: Envelopes.sender(endpoint: "bbbbbb"))
        let nameStart = NotificationEnvelope.headerSize
        for hostile in ["../etc", "a/b/cd", ".hidde", "a\u{0}bcdefg", "..aaaaaa"] {
            var bad = wire
            let bytes =
                Array(hostile.utf8.prefix(8))
                + Array(repeating: UInt8(ascii: "a"), count: max(0, 8 - hostile.utf8.count))
            for (offset, byte) in bytes.enumerated() { bad[nameStart + offset] = byte }
            expectDecodeError(Envelopes.resealed(bad), .invalidName)
        }
        var badEndpoint = wire
        badEndpoint[nameStart + 8] = UInt8(ascii: "/")
        expectDecodeError(Envelopes.resealed(badEndpoint), .invalidEndpoint)
    }

    @Test("sequence number 0 and bytes after the record are refused")
    func malformed() throws {
        let wire = try Envelopes.encode(sender: Envelopes.sender(), sequence: 9)
        var zero = wire
        let trailer = wire.count - NotificationEnvelope.trailerSize
        for index in trailer..<(trailer + 8) { zero[index] = 0 }
        expectDecodeError(Envelopes.resealed(zero), .malformedEnvelope)
        expectDecodeError(wire + [0], .malformedEnvelope)
        var decoder = EnvelopeDecoder()
        #expect(throws: TypedNotificationError.self) { try decoder.decode(wire, at: wire.count + 1) }
    }

    @Test("a hub refuses an over-limit post before anything is sent")
    func hubLimit() throws {
        let transport = LossyEncodedTransport()
        let hub = try NotificationHub(
            endpoint: "limit", transport: transport, configuration: .init(maximumPayloadSize: 8))
        #expect {
            try hub.post(Note(text: "longer than eight bytes"))
        } throws: { error in
            (error as? TypedNotificationError)?.code == .payloadTooLarge
        }
        #expect(transport.sent.withLock { $0.isEmpty })
    }
}

@Suite("The envelope decoder's caches")
struct EnvelopeDecoderCacheTests {
    @Test(
        "one decoder, 1,000 names and 1,000 senders, each decoded twice: every field is its own, after its caches grew"
    )
    func cachesGrowAndStayCorrect() throws {
        var decoder = EnvelopeDecoder()
        for round in 0..<2 {
            for index in 0..<1_000 {
                let name = try NotificationName(validating: "test.cache.name\(index)")
                let sender = try Envelopes.sender(
                    pid: Int32(index + 1), uid: 501, endpoint: "endpoint\(index)", instance: UInt64(index) &* 7_919)
                let bytes = try Envelopes.encode(name: name, sender: sender, sequence: UInt64(round + 1))
                let message = try decoder.decode(bytes)
                #expect(message.name == name)
                #expect(message.sender == sender)
                #expect(message.sequence == UInt64(round + 1))
            }
        }
    }
}
