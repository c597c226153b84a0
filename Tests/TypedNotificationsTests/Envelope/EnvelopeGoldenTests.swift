import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotifications

/// One committed vector: inputs and the exact envelope bytes, written by
/// `Golden/generate.py`, an implementation of the format independent of this one.
struct GoldenVector: Decodable {
    var label: String
    var name: String
    var endpoint: String
    var pid: Int32
    var uid: UInt32
    var instance: String
    var sequence: String
    var wall: String
    var monotonic: String
    var payloadHex: String
    var envelopeHex: String

    static func load() throws -> [GoldenVector] {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("Golden/vectors.json")
        return try JSONDecoder().decode([GoldenVector].self, from: Data(contentsOf: url))
    }
}

func bytes(fromHex hex: String) -> [UInt8] {
    let digits = Array(hex.utf8)
    return stride(from: 0, to: digits.count - 1, by: 2).compactMap { index in
        UInt8(String(decoding: digits[index...index + 1], as: UTF8.self), radix: 16)
    }
}

@Suite("Envelope golden vectors")
struct EnvelopeGoldenTests {
    @Test("Swift encodes each committed vector's inputs to exactly its bytes, and decodes them back")
    func goldenVectors() throws {
        let vectors = try GoldenVector.load()
        #expect(vectors.count == 3)
        for vector in vectors {
            let sender = try NotificationSender(
                processID: vector.pid,
                userID: vector.uid,
                endpoint: vector.endpoint,
                instance: try #require(UInt64(vector.instance))
            )
            let timestamp = NotificationTimestamp(
                wallClockNanoseconds: try #require(Int64(vector.wall)),
                monotonicNanoseconds: try #require(UInt64(vector.monotonic))
            )
            let payload = bytes(fromHex: vector.payloadHex)
            let expected = bytes(fromHex: vector.envelopeHex)
            let encoded = try NotificationEnvelope.encode(
                name: try NotificationName(validating: vector.name),
                sender: sender,
                sequence: try #require(UInt64(vector.sequence)),
                timestamp: timestamp
            ) { $0.append(contentsOf: payload) }
            #expect(Array(encoded.envelope) == expected, "\(vector.label)")

            let decoded = try NotificationEnvelope.decode(expected)
            #expect(decoded.name.rawValue == vector.name)
            #expect(decoded.sender == sender)
            #expect(decoded.sequence == UInt64(vector.sequence))
            #expect(decoded.timestamp == timestamp)
            guard case .encoded(let wire) = decoded.payload else {
                Issue.record("expected an envelope payload")
                continue
            }
            #expect(Array(wire.payload) == payload, "\(vector.label)")
        }
    }
}
