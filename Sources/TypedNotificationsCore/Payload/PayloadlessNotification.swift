/// A notification that carries nothing but its name, as a Darwin
/// notification does.
///
/// ```swift
/// struct CacheCleared: PayloadlessNotification {
///     static let name: NotificationName = "com.example.cache-cleared"
/// }
///
/// try center.post(CacheCleared())
/// ```
///
/// Its payload is zero bytes, so it is what `tnotify post NAME` sends and what
/// a ``RawNotification`` with no bytes decodes as. It also accepts the JSON
/// `{}` that an empty `Codable` struct posts, so code that used one can move
/// over one process at a time; any other bytes are refused (counted as
/// undecodable). Do not make such a type `Codable` as well: the two default
/// codings would conflict.
public protocol PayloadlessNotification: TypedNotification {
    /// The notification (it has nothing to initialise).
    init()
}

extension PayloadlessNotification {
    /// Appends nothing.
    public func encodePayload(into buffer: inout [UInt8]) throws {}

    /// Zero bytes.
    public var payloadSizeHint: Int? { 0 }

    /// Accepts zero bytes, or the JSON `{}` of an empty `Codable` struct.
    public init(payload bytes: UnsafeRawBufferPointer) throws {
        let trimmed = bytes.filter { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }
        guard trimmed.isEmpty || trimmed == [UInt8(ascii: "{"), UInt8(ascii: "}")] else {
            throw PayloadDecodingError.wrongLength(
                type: String(describing: Self.self), expected: 0, actual: bytes.count)
        }
        self.init()
    }
}
