import Foundation

extension String: DarwinPayload {
    /// Appends the string's UTF-8 bytes.
    public func encodePayload(into buffer: inout [UInt8]) throws {
        buffer.append(contentsOf: utf8)
    }

    /// The UTF-8 length.
    public var payloadSizeHint: Int? { utf8.count }

    /// Decodes UTF-8, refusing invalid sequences rather than repairing them.
    public init(payload bytes: UnsafeRawBufferPointer) throws {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw PayloadDecodingError.invalidUTF8
        }
        self = text
    }
}

extension Substring: DarwinPayload {
    /// Appends the substring's UTF-8 bytes.
    public func encodePayload(into buffer: inout [UInt8]) throws {
        buffer.append(contentsOf: utf8)
    }

    /// The UTF-8 length.
    public var payloadSizeHint: Int? { utf8.count }

    /// Decodes UTF-8, refusing invalid sequences.
    public init(payload bytes: UnsafeRawBufferPointer) throws {
        self = Substring(try String(payload: bytes))
    }
}

extension Data: DarwinPayload {
    /// Appends the bytes as they are.
    public func encodePayload(into buffer: inout [UInt8]) throws {
        buffer.append(contentsOf: self)
    }

    /// The byte count.
    public var payloadSizeHint: Int? { count }

    /// Copies the bytes as they are.
    public init(payload bytes: UnsafeRawBufferPointer) throws {
        self = Data(bytes)
    }
}

extension Array: DarwinPayload where Element == UInt8 {
    /// Appends the bytes as they are.
    public func encodePayload(into buffer: inout [UInt8]) throws {
        buffer.append(contentsOf: self)
    }

    /// The byte count.
    public var payloadSizeHint: Int? { count }

    /// Copies the bytes as they are.
    public init(payload bytes: UnsafeRawBufferPointer) throws {
        self = Array(bytes)
    }
}

extension Bool: DarwinPayload {
    /// Appends one byte: 1 for `true`, 0 for `false`.
    public func encodePayload(into buffer: inout [UInt8]) throws {
        buffer.append(self ? 1 : 0)
    }

    /// One byte.
    public var payloadSizeHint: Int? { 1 }

    /// Accepts exactly one byte, 0 or 1.
    public init(payload bytes: UnsafeRawBufferPointer) throws {
        guard bytes.count == 1 else {
            throw PayloadDecodingError.wrongLength(type: "Bool", expected: 1, actual: bytes.count)
        }
        switch bytes[0] {
        case 0: self = false
        case 1: self = true
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

extension Int8: LittleEndianPayload {}
extension Int16: LittleEndianPayload {}
extension Int32: LittleEndianPayload {}
extension Int64: LittleEndianPayload {}
extension UInt8: LittleEndianPayload {}
extension UInt16: LittleEndianPayload {}
extension UInt32: LittleEndianPayload {}
extension UInt64: LittleEndianPayload {}

// Int and UInt travel as 8 bytes on every platform so 32- and 64-bit processes agree.
extension Int: LittleEndianPayload {
    static var payloadWidth: Int { 8 }
}

extension UInt: LittleEndianPayload {
    static var payloadWidth: Int { 8 }
}
