import Foundation
import Testing
import TypedNotifications

/// A deterministic generator, so a failing case can be replayed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

struct Profile: TypedNotification, Codable, Equatable {
    static let name: NotificationName = "test.profile"
    var id: UUID
    var tags: [String]
    var score: Double?
}

@Suite("Payload coding")
struct PayloadTests {
    @Test("built-in types have their documented byte forms")
    func byteForms() throws {
        #expect(try "hé".encodedPayload() == [0x68, 0xC3, 0xA9])
        #expect(try Data([1, 2]).encodedPayload() == [1, 2])
        #expect(try [UInt8]([9]).encodedPayload() == [9])
        #expect(try true.encodedPayload() == [1])
        #expect(try false.encodedPayload() == [0])
        #expect(try RawNotification().encodedPayload() == [])
        #expect(try CacheCleared().encodedPayload() == [])
        #expect(try UInt16(0x0102).encodedPayload() == [0x02, 0x01])
        #expect(try Int8(-2).encodedPayload() == [0xFE])
        #expect(try Int32(-1).encodedPayload() == [0xFF, 0xFF, 0xFF, 0xFF])
        #expect(try Int(1).encodedPayload() == [1, 0, 0, 0, 0, 0, 0, 0])
        #expect(try UInt(1).encodedPayload().count == 8)
    }

    @Test("built-in types round-trip")
    func roundTrips() throws {
        #expect(try String(payload: "héllo 🎉".encodedPayload()) == "héllo 🎉")
        #expect(try Substring(payload: Substring("sub").encodedPayload()) == "sub")
        #expect(try Data(payload: Data([0, 255]).encodedPayload()) == Data([0, 255]))
        #expect(try Bool(payload: true.encodedPayload()) == true)
        for value in [Int.min, -1, 0, 1, Int.max] {
            #expect(try Int(payload: value.encodedPayload()) == value)
        }
        for value in [Int8.min, -1, 0, Int8.max] {
            #expect(try Int8(payload: value.encodedPayload()) == value)
        }
        for value in [Int16.min, -300, 300, Int16.max] {
            #expect(try Int16(payload: value.encodedPayload()) == value)
        }
        for value in [Int32.min, -70_000, Int32.max] {
            #expect(try Int32(payload: value.encodedPayload()) == value)
        }
        for value in [Int64.min, Int64.max] {
            #expect(try Int64(payload: value.encodedPayload()) == value)
        }
        for value in [UInt8.max, 0] { #expect(try UInt8(payload: value.encodedPayload()) == value) }
        #expect(try UInt16(payload: UInt16.max.encodedPayload()) == .max)
        #expect(try UInt32(payload: UInt32.max.encodedPayload()) == .max)
        #expect(try UInt64(payload: UInt64.max.encodedPayload()) == .max)
        #expect(try UInt(payload: UInt.max.encodedPayload()) == .max)
        _ = try CacheCleared(payload: [UInt8]())
    }

    @Test("built-in size hints are exact, so an envelope allocates once")
    func sizeHints() throws {
        let values: [any DarwinPayload] = [
            "héllo 🎉", Substring("sub"), Data([1, 2, 3]), [UInt8](repeating: 1, count: 300), true, RawNotification(),
            CacheCleared(),
            Int8(1), Int16(1), Int32(1), Int64(1), Int(1), UInt8(1), UInt16(1), UInt32(1), UInt64(1), UInt(1),
        ]
        for value in values {
            #expect(value.payloadSizeHint == (try value.encodedPayload().count), "\(type(of: value))")
        }
        #expect(Profile(id: UUID(), tags: [], score: nil).payloadSizeHint == nil)
    }

    @Test("a Codable notification uses JSON by default")
    func codableDefault() throws {
        let profile = Profile(id: UUID(), tags: ["a", "b"], score: nil)
        let bytes = try profile.encodedPayload()
        let json = try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
        #expect(json?["tags"] as? [String] == ["a", "b"])
        #expect(try Profile(payload: bytes) == profile)
    }

    @Test("bad bytes throw a decoding error")
    func badBytes() {
        #expect(throws: PayloadDecodingError.invalidUTF8) { try String(payload: [0xC3, 0x28]) }
        #expect(throws: PayloadDecodingError.invalidUTF8) { try String(payload: [0xFF]) }
        #expect(throws: PayloadDecodingError.invalidBool(2)) { try Bool(payload: [2]) }
        #expect(throws: PayloadDecodingError.wrongLength(type: "Bool", expected: 1, actual: 0)) {
            try Bool(payload: [UInt8]())
        }
        #expect(throws: PayloadDecodingError.wrongLength(type: "Int", expected: 8, actual: 4)) {
            try Int(payload: [1, 2, 3, 4])
        }
        #expect(throws: PayloadDecodingError.wrongLength(type: "UInt16", expected: 2, actual: 3)) {
            try UInt16(payload: [1, 2, 3])
        }
        #expect(throws: PayloadDecodingError.wrongLength(type: "CacheCleared", expected: 0, actual: 1)) {
            try CacheCleared(payload: [0])
        }
        #expect(throws: (any Error).self) { try Profile(payload: Array("{\"id\":1}".utf8)) }
        #expect(throws: (any Error).self) { try Profile(payload: [UInt8]()) }
    }

    @Test("10,000 random byte strings decode or throw; none traps")
    func hostileBytesNeverTrap() {
        var random = SplitMix64(state: 0x7E57_5EED)
        var decoded = 0
        var refused = 0
        func attempt(_ body: () throws -> Void) {
            do {
                try body()
                decoded += 1
            } catch {
                refused += 1
            }
        }
        for _ in 0..<10_000 {
            let length = Int.random(in: 0...24, using: &random)
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
            attempt { _ = try String(payload: bytes) }
            attempt { _ = try Bool(payload: bytes) }
            attempt { _ = try Int(payload: bytes) }
            attempt { _ = try Int16(payload: bytes) }
            attempt { _ = try UInt32(payload: bytes) }
            attempt { _ = try CacheCleared(payload: bytes) }
            attempt { _ = try Profile(payload: bytes) }
            attempt { _ = try Ping(payload: bytes) }
        }
        // Both outcomes occur, so the loop exercised acceptance and refusal.
        #expect(decoded > 0)
        #expect(refused > 0)
        #expect(decoded + refused == 80_000)
    }
}
