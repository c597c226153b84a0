import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotificationsCore

/// The envelope's own buffer and the per-thread array a payload is encoded
/// into: an envelope never changes once made, whoever else encodes.
@Suite("Envelope storage: an envelope's bytes never change once it is made")
struct EnvelopeStorageTests {
    private static let timestamp = NotificationTimestamp(wallClockNanoseconds: 7, monotonicNanoseconds: 9)

    private static func pending(_ payload: [UInt8]) throws -> PendingEnvelope {
        try PendingEnvelope(
            name: "com.example.storage", sender: Envelopes.sender(), maximumPayloadSize: 1 << 20,
            payloadSizeHint: nil
        ) { $0.append(contentsOf: payload) }
    }

    private static func decoded(_ encoded: EncodedNotification) throws -> TransportMessage {
        try encoded.withUnsafeEnvelope { bytes throws(TypedNotificationError) in
            var decoder = EnvelopeDecoder()
            return try decoder.decode(copying: bytes)
        }
    }

    @Test("two copies of one pending envelope, finished with different numbers, each keep their own")
    func copiesFinishApart() throws {
        let original = try Self.pending(Array("shared".utf8))
        let copy = original
        let first = original.finish(sequence: 1, timestamp: Self.timestamp)
        let firstBytes = Array(first.envelope)
        let second = copy.finish(sequence: 2, timestamp: Self.timestamp)
        // The first envelope's bytes are as they were when it was made.
        #expect(Array(first.envelope) == firstBytes)
        #expect(try Self.decoded(first).sequence == 1)
        #expect(try Self.decoded(second).sequence == 2)
        #expect(Array(first.payload) == Array("shared".utf8))
        #expect(Array(second.payload) == Array("shared".utf8))
        // Slices keep the offsets an array-backed envelope's slices have.
        #expect(first.payload.startIndex == first.payloadRange.lowerBound)
        #expect(first.envelope.indices == first.envelopeRange)
        let decoded = try Self.decoded(first)
        guard case .encoded(let received) = decoded.payload else {
            Issue.record("a decoded message carries its envelope")
            return
        }
        #expect(received.payload.startIndex == received.payloadRange.lowerBound)
        #expect(received.payload[received.payloadRange.lowerBound] == UInt8(ascii: "s"))
    }

    @Test("an envelope numbered again after a failed send keeps the first one intact")
    func unfinishingCopies() throws {
        let first = try Self.pending(Array(repeating: 0xA5, count: 300)).finish(sequence: 4, timestamp: Self.timestamp)
        let before = Array(first.envelope)
        let again = PendingEnvelope(unfinishing: first).finish(sequence: 5, timestamp: Self.timestamp)
        #expect(Array(first.envelope) == before)
        #expect(try Self.decoded(again).sequence == 5)
        #expect(Array(again.payload) == Array(repeating: 0xA5, count: 300))
    }

    /// A payload that posts while it is being encoded: it encodes another
    /// envelope on the same thread, in the middle of its own.
    private struct Nesting: DarwinPayload {
        var depth: Int
        func encodePayload(into buffer: inout [UInt8]) throws {
            buffer.append(contentsOf: Array("outer-\(depth)-".utf8))
            if depth > 0 {
                let inner = try NotificationEnvelope.encode(
                    name: "com.example.inner", sender: Envelopes.sender(), sequence: UInt64(depth),
                    timestamp: EnvelopeStorageTests.timestamp
                ) { try Nesting(depth: depth - 1).encodePayload(into: &$0) }
                buffer.append(contentsOf: inner.payload)
            }
            buffer.append(contentsOf: Array("-end".utf8))
        }
        init(depth: Int) { self.depth = depth }
        init(payload bytes: UnsafeRawBufferPointer) throws { depth = 0 }
    }

    @Test("a payload encoder that encodes another envelope while it runs gets its own bytes back")
    func nestedEncoding() throws {
        let encoded = try NotificationEnvelope.encode(
            name: "com.example.outer", sender: Envelopes.sender(), sequence: 1, timestamp: Self.timestamp
        ) { try Nesting(depth: 3).encodePayload(into: &$0) }
        let expected = "outer-3-outer-2-outer-1-outer-0--end-end-end-end"
        #expect(String(decoding: encoded.payload, as: UTF8.self) == expected)
        #expect(try Self.decoded(encoded).name == "com.example.outer")
    }

    @Test("a payload larger than the thread keeps, then a small one: both whole")
    func largeThenSmall() throws {
        let large = Array((0..<(ThreadScratch.keptCapacity * 2)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let first = try Self.pending(large).finish(sequence: 1, timestamp: Self.timestamp)
        let second = try Self.pending([1, 2, 3]).finish(sequence: 2, timestamp: Self.timestamp)
        #expect(Array(first.payload) == large)
        #expect(Array(second.payload) == [1, 2, 3])
        #expect(Envelopes.payload(of: try Self.decoded(first)) == large)
    }

    @Test("a payload encoder that throws leaves nothing behind for the next encoding")
    func throwingEncoder() throws {
        struct Refused: Error {}
        #expect(throws: TypedNotificationError.self) {
            try PendingEnvelope(
                name: "com.example.storage", sender: Envelopes.sender(), maximumPayloadSize: 1 << 20,
                payloadSizeHint: nil
            ) {
                $0.append(contentsOf: [9, 9, 9])
                throw Refused()
            }
        }
        let next = try Self.pending([4]).finish(sequence: 1, timestamp: Self.timestamp)
        #expect(Array(next.payload) == [4])
    }

    @Test("decoding a copy checks the whole record first: trailing bytes, a flipped bit and a cut are refused")
    func decodeCopying() throws {
        let wire = try Envelopes.encode(sender: Envelopes.sender(), payload: Array("copied".utf8))
        var decoder = EnvelopeDecoder()
        let message = try wire.withUnsafeBytes { bytes throws(TypedNotificationError) in
            try decoder.decode(copying: bytes)
        }
        #expect(Envelopes.payload(of: message) == Array("copied".utf8))
        let cases: [([UInt8], TypedNotificationError.Code)] = [
            (wire + [0], .malformedEnvelope),
            (Array(wire.dropLast()), .truncatedEnvelope),
            (
                {
                    var flipped = wire
                    flipped[40] ^= 1
                    return flipped
                }(), .checksumMismatch
            ),
        ]
        for (bytes, code) in cases {
            let thrown = bytes.withUnsafeBytes { raw -> TypedNotificationError? in
                do throws(TypedNotificationError) {
                    _ = try decoder.decode(copying: raw)
                    return nil
                } catch {
                    return error
                }
            }
            #expect(thrown?.code == code)
        }
    }

    @Test("envelopes encoded on many threads at once each hold exactly their own payload")
    func concurrentEncoding() async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for index in 0..<2_000 {
                        let payload = Array("task \(task) post \(index)".utf8)
                        let encoded = try NotificationEnvelope.encode(
                            name: "com.example.threads", sender: Envelopes.sender(), sequence: UInt64(index + 1),
                            timestamp: Self.timestamp
                        ) { $0.append(contentsOf: payload) }
                        let message = try Self.decoded(encoded)
                        guard Envelopes.payload(of: message) == payload else {
                            Issue.record("task \(task) post \(index) came back as another payload")
                            return
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
    }
}
