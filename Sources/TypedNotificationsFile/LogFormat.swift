@_spi(TransportAuthoring) import TypedNotificationsCore
/// The on-disk format of a log segment, version 2 (see `WireFormat.md`).
///
/// A segment is a sequence of 32 KiB blocks. Each block holds fragments, and
/// a fragment never crosses a block boundary: fewer than a header's bytes
/// left at a block's end are zero padding. A fragment is a 24-byte header
/// and its data:
///
///     0  u32 header checksum: CRC-32C of header bytes 4 ..< 24
///     4  u8  format version, 2
///     5  u8  type (``LogFormat/FragmentType``)
///     6  u16 reserved, 0
///     8  u32 data length, at most what is left of the block
///     12 u32 data checksum: CRC-32C of the data
///     16 u64 record index: the log's count of records before this one
///
/// A length is believed only once the header checksum passes, and it can
/// never reach past its block, so a corrupt or forged header costs at most
/// the rest of one block and never hides what follows. The record index
/// numbers every notification in the log, across segments, so a reader that
/// skips a corrupt stretch or finds segments deleted knows exactly how many
/// notifications it missed.
///
/// Every segment starts with a ``FragmentType/start`` fragment carrying the
/// index of its first record and the log's identifier (a random number
/// chosen when the log is created, carried on by every segment of it, so a
/// log removed and created again is never taken for the old one, whatever
/// numbers the file system gives its files); a closed segment ends with a
/// ``FragmentType/rollover`` fragment naming the next segment, so writers
/// and readers follow the log from segment to segment without listing the
/// directory.
package enum LogFormat {
    /// The format version in each fragment header.
    static let version: UInt8 = 2
    /// The size of a block.
    static let blockSize = 32 * 1024
    /// The size of a fragment header.
    static let headerSize = 24
    /// The data of a rollover fragment: the next segment's number.
    static let rolloverDataSize = 8
    /// The data of a start fragment: the log's identifier.
    static let startDataSize = 8
    /// The size of a start fragment, header and data.
    static let startSize = headerSize + startDataSize
    /// The CRC-32C of any valid envelope, its own checksum included: the
    /// CRC-32C residue. A whole envelope's fragment carries it as its data
    /// checksum without computing it, and a reader whose data checksum
    /// comes out as it has checked the envelope's own checksum too.
    static let envelopeResidue: UInt32 = 0x4867_4BC7
    /// The largest a segment can be: the largest segment size a
    /// configuration takes (64 MiB) and one record of the largest payload
    /// past it, with room to spare. A file larger than this under a
    /// segment's name was not written by a writer of this log (a planted
    /// sparse file, say); it is never read or appended to.
    static let maximumSegmentBytes = 128 * 1024 * 1024
    /// The most a reader reads at once to take one whole record: the
    /// largest envelope, framed, with a block to spare.
    static let maximumRecordSpan = 17 * 1024 * 1024 + 2 * blockSize
    /// The first bytes of a segment of format 1 (a bare envelope's magic).
    static let formatOneMagic: [UInt8] = [0x54, 0x4E, 0x4F, 0x54]

    /// What a fragment holds.
    enum FragmentType: UInt8 {
        /// A whole envelope.
        case full = 1
        /// The first piece of an envelope longer than what is left of the block.
        case first = 2
        /// A further piece, filling a whole block.
        case middle = 3
        /// The last piece.
        case last = 4
        /// The first fragment of a segment: its data is the log's
        /// identifier (a nonzero u64), its index the index of the segment's
        /// first record.
        case start = 5
        /// The last fragment of a closed segment: its data is the next
        /// segment's number, its index that segment's first record's.
        case rollover = 6
    }

    /// A fragment header whose checksum passed.
    struct Header: Equatable {
        var type: FragmentType
        var length: Int
        var dataChecksum: UInt32
        var index: UInt64
    }

    /// The start of the block that holds `offset`.
    static func blockStart(of offset: Int) -> Int { offset - offset % blockSize }

    /// The end of the block that holds `offset`.
    static func blockEnd(of offset: Int) -> Int { blockStart(of: offset) + blockSize }

    /// The header at `position` of `bytes`, or `nil` when it is not a valid
    /// one (its checksum, version, type or reserved bytes are wrong, or its
    /// length reaches past its block). `bytes[0]` is at `base` in the
    /// segment; `position` is an index into `bytes` with at least
    /// ``headerSize`` bytes after it.
    static func header(in bytes: UnsafeRawBufferPointer, at position: Int, base: Int) -> Header? {
        guard bytes.load(fromByteOffset: position + 4, as: UInt8.self) == version,
            let type = FragmentType(rawValue: bytes.load(fromByteOffset: position + 5, as: UInt8.self)),
            bytes.loadUnaligned(fromByteOffset: position + 6, as: UInt16.self) == 0
        else { return nil }
        let stored = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: position, as: UInt32.self))
        let computed = CRC32C.checksum(
            UnsafeRawBufferPointer(rebasing: bytes[(position + 4)..<(position + headerSize)]))
        guard stored == computed else { return nil }
        let length = Int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: position + 8, as: UInt32.self)))
        let absolute = base + position
        guard absolute + headerSize + length <= blockEnd(of: absolute) else { return nil }
        switch type {
        case .start: guard length == startDataSize, absolute == 0 else { return nil }
        case .rollover: guard length == rolloverDataSize else { return nil }
        case .middle, .last: guard absolute % blockSize == 0, length > 0 else { return nil }
        case .first: guard absolute + headerSize + length == blockEnd(of: absolute), length > 0 else { return nil }
        case .full: guard length > 0 else { return nil }
        }
        return Header(
            type: type,
            length: length,
            dataChecksum: UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: position + 12, as: UInt32.self)),
            index: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: position + 16, as: UInt64.self))
        )
    }

    /// Appends one fragment, header and data, to `buffer`; its data
    /// checksum is computed unless given (see ``envelopeResidue``).
    static func appendFragment(
        _ type: FragmentType, index: UInt64, data: UnsafeRawBufferPointer, dataChecksum: UInt32? = nil,
        to buffer: inout [UInt8]
    ) {
        let start = buffer.count
        buffer.append(contentsOf: repeatElement(0, count: headerSize))
        buffer.append(contentsOf: data)
        buffer.withUnsafeMutableBytes { raw in
            raw[start + 4] = version
            raw[start + 5] = type.rawValue
            raw.storeBytes(of: UInt32(data.count).littleEndian, toByteOffset: start + 8, as: UInt32.self)
            let data = dataChecksum ?? CRC32C.checksum(data)
            raw.storeBytes(of: data.littleEndian, toByteOffset: start + 12, as: UInt32.self)
            raw.storeBytes(of: index.littleEndian, toByteOffset: start + 16, as: UInt64.self)
            let checksum = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[(start + 4)..<(start + headerSize)]))
            raw.storeBytes(of: checksum.littleEndian, toByteOffset: start + 0, as: UInt32.self)
        }
    }

    /// Appends the bytes that put `envelope`, record `index`, at segment
    /// offset `offset` (where `buffer`'s new bytes will be written): zero
    /// padding to the next block when too little of this one is left, then
    /// one full fragment, or first, middle and last pieces across blocks.
    /// Returns the segment offset after it. `envelope` is a valid envelope
    /// (its checksum correct): a full fragment's data checksum is then the
    /// residue, not computed again.
    @discardableResult
    package static func appendRecord(
        _ envelope: UnsafeRawBufferPointer, index: UInt64, at offset: Int, to buffer: inout [UInt8]
    ) -> Int {
        var position = padIfNeeded(at: offset, to: &buffer, needing: headerSize + 1)
        var left = envelope.count
        var consumed = 0
        var isFirst = true
        while left > 0 {
            let room = blockEnd(of: position) - position - headerSize
            let piece = min(room, left)
            let type: FragmentType =
                isFirst ? (piece == left ? .full : .first) : (piece == left ? .last : .middle)
            appendFragment(
                type, index: index, data: UnsafeRawBufferPointer(rebasing: envelope[consumed..<(consumed + piece)]),
                dataChecksum: type == .full ? envelopeResidue : nil, to: &buffer)
            position += headerSize + piece
            consumed += piece
            left -= piece
            isFirst = false
        }
        return position
    }

    /// Appends a rollover fragment naming segment `next`, whose first record
    /// is `index`, at segment offset `offset`. Returns the offset after it.
    @discardableResult
    static func appendRollover(next: UInt64, index: UInt64, at offset: Int, to buffer: inout [UInt8]) -> Int {
        let position = padIfNeeded(at: offset, to: &buffer, needing: headerSize + rolloverDataSize)
        withUnsafeBytes(of: next.littleEndian) { appendFragment(.rollover, index: index, data: $0, to: &buffer) }
        return position + headerSize + rolloverDataSize
    }

    /// The bytes of a new segment of log `log` whose first record will be `index`.
    static func segmentStart(index: UInt64, log: UInt64) -> [UInt8] {
        var buffer: [UInt8] = []
        withUnsafeBytes(of: log.littleEndian) { appendFragment(.start, index: index, data: $0, to: &buffer) }
        return buffer
    }

    /// The log identifier in the start fragment that `bytes` (a segment's
    /// first bytes) open with, or `nil` when they do not open with a valid one.
    static func logIdentifier(inStart bytes: [UInt8]) -> UInt64? {
        guard bytes.count >= startSize else { return nil }
        return bytes.withUnsafeBytes { raw -> UInt64? in
            guard let header = header(in: raw, at: 0, base: 0), header.type == .start,
                CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[headerSize..<startSize])) == header.dataChecksum
            else { return nil }
            return UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: headerSize, as: UInt64.self))
        }
    }

    /// A new log's identifier: random and never zero.
    static func newLogIdentifier<Generator: RandomNumberGenerator>(using generator: inout Generator) -> UInt64 {
        UInt64.random(in: 1...UInt64.max, using: &generator)
    }

    /// Zeros to the next block when fewer than `needed` bytes are left in
    /// this one; returns where the next fragment goes.
    private static func padIfNeeded(at offset: Int, to buffer: inout [UInt8], needing needed: Int) -> Int {
        let left = blockEnd(of: offset) - offset
        guard left < needed else { return offset }
        buffer.append(contentsOf: repeatElement(0, count: left))
        return offset + left
    }
}
