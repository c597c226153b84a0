import Foundation

// Each built-in conformance's three members are written once, on an
// internal protocol, so the public API is the conformance (`String:
// DarwinPayload`) and DarwinPayload's requirements, not three more
// declarations per type. The integers share theirs the same way, below.

/// A built-in payload: how it appends its bytes, how many, and how it reads them.
protocol BuiltinPayload: DarwinPayload {
    /// Appends the payload bytes.
    func appendPayload(to buffer: inout [UInt8])
    /// The exact number of bytes ``appendPayload(to:)`` appends.
    var exactPayloadSize: Int { get }
    /// Reads a value, refusing bytes that are not one.
    static func readPayload(_ bytes: UnsafeRawBufferPointer) throws -> Self
}

extension BuiltinPayload {
    /// Appends the value's bytes.
    public func encodePayload(into buffer: inout [UInt8]) throws {
        appendPayload(to: &buffer)
    }

    /// The exact byte count.
    public var payloadSizeHint: Int? { exactPayloadSize }

    /// Reads a value, refusing bytes that are not one.
    public init(payload bytes: UnsafeRawBufferPointer) throws {
        self = try Self.readPayload(bytes)
    }
}

/// UTF-8, no terminator; invalid UTF-8 is refused, never repaired.
extension String: DarwinPayload, BuiltinPayload {
    func appendPayload(to buffer: inout [UInt8]) { buffer.append(contentsOf: utf8) }
    var exactPayloadSize: Int { utf8.count }
    static func readPayload(_ bytes: UnsafeRawBufferPointer) throws -> String {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw PayloadDecodingError.invalidUTF8
        }
        return text
    }
}

/// UTF-8, as `String`.
extension Substring: DarwinPayload, BuiltinPayload {
    func appendPayload(to buffer: inout [UInt8]) { buffer.append(contentsOf: utf8) }
    var exactPayloadSize: Int { utf8.count }
    static func readPayload(_ bytes: UnsafeRawBufferPointer) throws -> Substring {
        Substring(try String.readPayload(bytes))
    }
}

/// The bytes as they are.
extension Data: DarwinPayload, BuiltinPayload {
    func appendPayload(to buffer: inout [UInt8]) { buffer.append(contentsOf: self) }
    var exactPayloadSize: Int { count }
    static func readPayload(_ bytes: UnsafeRawBufferPointer) throws -> Data { Data(bytes) }
}

/// The bytes as they are.
extension Array: DarwinPayload, BuiltinPayload where Element == UInt8 {
    func appendPayload(to buffer: inout [UInt8]) { buffer.append(contentsOf: self) }
    var exactPayloadSize: Int { count }
    static func readPayload(_ bytes: UnsafeRawBufferPointer) throws -> [UInt8] { Array(bytes) }
}

/// One byte, 0 or 1; anything else is refused.
extension Bool: DarwinPayload, BuiltinPayload {
    func appendPayload(to buffer: inout [UInt8]) { buffer.append(self ? 1 : 0) }
    var exactPayloadSize: Int { 1 }
    static func readPayload(_ bytes: UnsafeRawBufferPointer) throws -> Bool {
        guard bytes.count == 1 else {
            throw PayloadDecodingError.wrongLength(type: "Bool", expected: 1, actual: bytes.count)
        }
        switch bytes[0] {
        case 0: return false
        case 1: return true
        case let other: throw PayloadDecodingError.invalidBool(other)
        }
    }
}

/// The shared little-endian form of the integer conformances.
protocol LittleEndianPayload: FixedWidthInteger, DarwinPayload {
    /// How many bytes the integer travels as.
    static var payloadWidth: Int { get }
}

extension LittleEndianPayload {
    static var payloadWidth: Int { bitWidth / 8 }

    /// The integer's width in bytes.
    public var payloadSizeHint: Int? { Self.payloadWidth }

    /// Appends the integer's bytes, least significant first.
    public func encodePayload(into buffer: inout [UInt8]) throws {
        // Sign-extends negative values, so the low bytes are the two's complement form.
        var value = UInt64(truncatingIfNeeded: self)
        for _ in 0..<Self.payloadWidth {
            buffer.append(UInt8(truncatingIfNeeded: value))
            value >>= 8
        }
    }

    /// Accepts exactly the type's width in bytes, least significant first.
    public init(payload bytes: UnsafeRawBufferPointer) throws {
        let width = Self.payloadWidth
        let typeName = String(describing: Self.self)
        guard bytes.count == width else {
            throw PayloadDecodingError.wrongLength(type: typeName, expected: width, actual: bytes.count)
        }
        var raw: UInt64 = 0
        for index in (0..<width).reversed() {
            raw = raw << 8 | UInt64(bytes[index])
        }
        let decoded: Self?
        if Self.isSigned {
            // Sign-extend from the payload width, then check the value fits.
            let shift = UInt64(64 - width * 8)
            decoded = Self(exactly: Int64(bitPattern: raw << shift) >> shift)
        } else {
            decoded = Self(exactly: raw)
        }
        // Only Int and UInt on a 32-bit platform can receive a value too wide.
        guard let decoded else { throw PayloadDecodingError.outOfRange(type: typeName) }
        self = decoded
    }
}

extension Int8: DarwinPayload, LittleEndianPayload {}
extension Int16: DarwinPayload, LittleEndianPayload {}
extension Int32: DarwinPayload, LittleEndianPayload {}
extension Int64: DarwinPayload, LittleEndianPayload {}
extension UInt8: DarwinPayload, LittleEndianPayload {}
extension UInt16: DarwinPayload, LittleEndianPayload {}
extension UInt32: DarwinPayload, LittleEndianPayload {}
extension UInt64: DarwinPayload, LittleEndianPayload {}

// Int and UInt travel as 8 bytes on every platform so 32- and 64-bit processes agree.
extension Int: DarwinPayload, LittleEndianPayload {
    static var payloadWidth: Int { 8 }
}

extension UInt: DarwinPayload, LittleEndianPayload {
    static var payloadWidth: Int { 8 }
}
