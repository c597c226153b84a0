/// The bytes an ``EncodedNotification`` lives in: a buffer of its own, made
/// for one envelope, or a received array that may hold several.
///
/// An envelope's own buffer is one `malloc`, where a `[UInt8]` costs three
/// times that (each array allocation looks up its storage class's generic
/// metadata). Encoding and receiving a datagram make one of these; a log
/// read holds many envelopes in one array, and they keep sharing it.
///
/// `@unchecked Sendable`: the bytes never change once a value is shared. An
/// ``EnvelopeBuffer`` is written only while one owner holds it (the encoder
/// that made it, or `PendingEnvelope.finish`, which copies it first when it
/// is not uniquely referenced), and then only read; an array is a value.
package struct EnvelopeStorage: @unchecked Sendable {
    private enum Bytes {
        case array([UInt8])
        case buffer(EnvelopeBuffer)
    }

    private var bytes: Bytes

    /// Storage holding `array`.
    package init(_ array: [UInt8]) { bytes = .array(array) }

    /// Storage holding the envelope written into `buffer`.
    init(_ buffer: EnvelopeBuffer) { bytes = .buffer(buffer) }

    /// A buffer holding a copy of `source`.
    package init(copying source: UnsafeRawBufferPointer) {
        let buffer = EnvelopeBuffer.make(capacity: source.count)
        buffer.append(source)
        bytes = .buffer(buffer)
    }

    /// How many bytes are held.
    package var count: Int {
        switch bytes {
        case .array(let array): array.count
        case .buffer(let buffer): buffer.count
        }
    }

    /// Calls `body` with the bytes, valid only during the call.
    package func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        switch bytes {
        case .array(let array): try array.withUnsafeBytes(body)
        case .buffer(let buffer): try buffer.withUnsafeBytes(body)
        }
    }

    /// The bytes in `range`, indexed by their offsets in the storage: a
    /// slice of the array, or of a copy of the buffer's bytes up to the
    /// range's end (so its indices are those an array would give).
    package subscript(range: Range<Int>) -> ArraySlice<UInt8> {
        switch bytes {
        case .array(let array):
            return array[range]
        case .buffer(let buffer):
            return buffer.withUnsafeBytes { Array(UnsafeRawBufferPointer(rebasing: $0[..<range.upperBound])) }[range]
        }
    }
}

/// How much of an ``EnvelopeBuffer`` is written, and how much room it has
/// (kept, since asking the allocator costs a call).
struct EnvelopeExtent {
    var count: Int
    var room: Int
}

/// One envelope's bytes, allocated once at its final size: the extent and
/// the bytes after it, in one allocation.
final class EnvelopeBuffer: ManagedBuffer<EnvelopeExtent, UInt8> {
    /// An empty buffer with room for `capacity` bytes.
    static func make(capacity: Int) -> EnvelopeBuffer {
        let room = max(capacity, 1)
        return unsafeDowncast(
            create(minimumCapacity: room) { _ in EnvelopeExtent(count: 0, room: room) }, to: EnvelopeBuffer.self)
    }

    /// The bytes written so far.
    var count: Int {
        withUnsafeMutablePointerToHeader { $0.pointee.count }
    }

    /// Calls `body` with the bytes written so far.
    func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try withUnsafeMutablePointers { extent, bytes in
            try body(UnsafeRawBufferPointer(start: bytes, count: extent.pointee.count))
        }
    }

    /// Calls `body` with all of the buffer's room and the count written so
    /// far, which `body` may move on; the caller owns the buffer alone.
    func write<Result>(_ body: (UnsafeMutableRawBufferPointer, inout Int) throws -> Result) rethrows -> Result {
        try withUnsafeMutablePointers { extent, bytes in
            try body(UnsafeMutableRawBufferPointer(start: bytes, count: extent.pointee.room), &extent.pointee.count)
        }
    }

    /// Appends `source`, which fits in the room left.
    func append(_ source: UnsafeRawBufferPointer) {
        write { room, count in
            guard !source.isEmpty else { return }
            UnsafeMutableRawBufferPointer(rebasing: room[count..<(count + source.count)]).copyMemory(from: source)
            count += source.count
        }
    }

    /// A copy of the first `count` bytes, with room for `capacity`.
    func copy(first count: Int, capacity: Int) -> EnvelopeBuffer {
        let copy = EnvelopeBuffer.make(capacity: max(capacity, count))
        withUnsafeBytes { copy.append(UnsafeRawBufferPointer(rebasing: $0[..<min(count, $0.count)])) }
        return copy
    }
}
