/// Payload bytes as they are, for code that handles notifications by a name
/// chosen at run time, such as the `tnotify` command-line tool.
///
/// Post one with ``TypedNotificationCenter/post(_:as:)`` and observe with
/// ``Observed/of(_:named:)``; the name given there routes it. Typed observers of that name decode the
/// bytes as their type, and raw observers of a typed notification get its
/// payload bytes: the same conversion as between processes. It decodes from
/// any bytes, so a raw observer never misses a post as undecodable.
public struct RawNotification: DarwinPayload, Hashable, BuiltinPayload {
    /// The payload bytes.
    public var bytes: [UInt8]

    /// Wraps payload bytes; none by default, which is how a bare name is
    /// posted, as a Darwin notification is: `post(RawNotification(), as: name)`.
    public init(bytes: [UInt8] = []) {
        self.bytes = bytes
    }

    func appendPayload(to buffer: inout [UInt8]) { buffer.append(contentsOf: bytes) }

    var exactPayloadSize: Int { bytes.count }

    static func readPayload(_ bytes: UnsafeRawBufferPointer) throws -> RawNotification {
        RawNotification(bytes: Array(bytes))
    }
}
