import Foundation

/// How a value becomes payload bytes and back, so it can cross a process
/// boundary.
///
/// A `Codable` type conforms without writing code: the default coder is JSON,
/// through Foundation's `JSONEncoder` and `JSONDecoder` with their default
/// strategies (so a `Date` is encoded as seconds since 2001-01-01 and `Data` as
/// Base64). `String`, `Substring`, `Data`, `[UInt8]`, every fixed-width integer
/// type and `Bool` conform out of the box with compact
/// binary forms that other languages can read:
///
/// | Type | Bytes |
/// | --- | --- |
/// | `String`, `Substring` | UTF-8, no terminator; invalid UTF-8 is rejected |
/// | `Data`, `[UInt8]` | as they are |
/// | `Int8` … `Int64`, `UInt8` … `UInt64` | little-endian, exactly the type's width |
/// | `Int`, `UInt` | little-endian, 8 bytes |
/// | `Bool` | one byte, 0 or 1 |
/// | ``RawNotification`` | its bytes, as they are |
/// | a ``PayloadlessNotification`` | none |
///
/// To use another format, implement both requirements. Decoding reads
/// untrusted bytes: it must throw on anything it cannot make sense of, and
/// never trap.
public protocol DarwinPayload: Sendable {
    /// Appends this value's payload bytes to `buffer`.
    ///
    /// Append only: bytes already in `buffer` belong to the caller.
    func encodePayload(into buffer: inout [UInt8]) throws

    /// How many bytes ``encodePayload(into:)`` will append, if known cheaply;
    /// `nil` if not.
    ///
    /// The bytes are appended to an array the posting thread keeps between
    /// posts (up to 16 KiB); a hint reserves room for this many up front, so
    /// a large payload grows that array once rather than step by step. The
    /// default is `nil`.
    var payloadSizeHint: Int? { get }

    /// Decodes a value from payload bytes.
    ///
    /// `bytes` is valid only during the call; copy what you keep.
    /// - Throws: any error when the bytes do not hold a valid value. The center
    ///   reports it as ``TypedNotificationError/Code/invalidPayload``.
    init(payload bytes: UnsafeRawBufferPointer) throws
}

extension DarwinPayload where Self: Codable {
    /// Encodes the value as JSON with a default `JSONEncoder`.
    public func encodePayload(into buffer: inout [UInt8]) throws {
        buffer.append(contentsOf: try JSONEncoder().encode(self))
    }

    /// Decodes the value from JSON with a default `JSONDecoder`.
    public init(payload bytes: UnsafeRawBufferPointer) throws {
        self = try JSONDecoder().decode(Self.self, from: Data(bytes))
    }
}

extension DarwinPayload {
    /// No hint: the envelope starts with room for a small payload and grows.
    public var payloadSizeHint: Int? { nil }

    /// Encodes the value into a new array.
    package func encodedPayload() throws -> [UInt8] {
        var bytes: [UInt8] = []
        try encodePayload(into: &bytes)
        return bytes
    }

    /// Decodes a value from the bytes of any contiguous collection.
    public init(payload bytes: some ContiguousBytes) throws {
        self = try bytes.withUnsafeBytes { raw in try Self(payload: raw) }
    }
}

/// Why built-in payload decoding refused some bytes.
///
/// Thrown by the conformances this package ships; a center wraps it in a
/// ``TypedNotificationError`` with code ``TypedNotificationError/Code/invalidPayload``.
public enum PayloadDecodingError: Error, Hashable, CustomStringConvertible {
    /// A fixed-width value arrived with the wrong number of bytes.
    case wrongLength(type: String, expected: Int, actual: Int)
    /// Text was not valid UTF-8.
    case invalidUTF8
    /// A `Bool` byte was neither 0 nor 1.
    case invalidBool(UInt8)
    /// An integer does not fit the receiving type on this platform.
    case outOfRange(type: String)

    /// What was wrong, for a person.
    public var description: String {
        switch self {
        case .wrongLength(let type, let expected, let actual):
            "a \(type) payload must be \(expected) bytes, got \(actual)"
        case .invalidUTF8:
            "text payload is not valid UTF-8"
        case .invalidBool(let byte):
            "a Bool payload must be 0 or 1, got \(byte)"
        case .outOfRange(let type):
            "the payload's value does not fit in \(type) on this platform"
        }
    }
}
