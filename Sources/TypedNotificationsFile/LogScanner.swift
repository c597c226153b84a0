@_spi(TransportAuthoring) import TypedNotificationsCore
/// Walks the fragments of part of a segment (see ``LogFormat``): pure, no
/// I/O, in time linear in the bytes it is given.
///
/// It reports whole records (a full fragment, or first, middle and last
/// pieces put together), each segment's start and rollover marks, and
/// stretches that hold nothing valid. A corrupt or forged fragment is
/// skipped to the next fragment header in its block whose own checksum
/// passes (a damaged fragment's too, which is reported), or else to the
/// block's end; a
/// length is believed only after its header's checksum passed and never
/// reaches past its block. It tells an incomplete tail (a writer writing
/// now, or one killed mid-append that the next writer steps over) from a
/// stretch that is over: the file going on past the block says the latter.
enum LogScanner {
    /// Where a record's envelope lies.
    enum Envelope {
        /// In the bytes given, at this range; `verified` when its fragment's
        /// data checksum was the residue of a valid envelope, which proves
        /// the envelope's own checksum (no need to compute it again).
        case inWindow(Range<Int>, verified: Bool)
        /// Put together from pieces in several blocks.
        case assembled([UInt8])
    }

    /// Something found in the segment; offsets are the segment's.
    enum Item {
        case record(start: Int, end: Int, index: UInt64, envelope: Envelope)
        /// The segment's start: its first record is `index`, and it is a
        /// segment of the log `log` (see ``LogFormat/FragmentType/start``).
        case start(index: UInt64, log: UInt64)
        /// The segment is closed; the next is segment `next`, whose first
        /// record is `index`. Nothing after it is read.
        case rollover(next: UInt64, index: UInt64, end: Int)
        /// A fragment whose header is valid and whose data, all there, fails
        /// its checksum: record `index` is damaged (or the header forged).
        /// The bytes after its header are searched for valid fragments.
        case damaged(index: UInt64)
        /// Bytes that hold no valid record: corrupt, forged, torn, a hole.
        case skipped(start: Int, end: Int)
        /// A middle or last piece of record `index` whose first piece is not
        /// in the bytes given (reading started after it): skipped, but it
        /// tells a writer the index.
        case piece(index: UInt64, isLast: Bool)
    }

    /// Why a walk stopped.
    enum Stop: Equatable {
        /// Everything given was walked (or a rollover mark was reached).
        case caughtUp
        /// A fragment goes on past the bytes given, and the file has it.
        case needsMore
        /// The file ends inside what follows: a write in progress, or a torn
        /// tail that the next writer will step over.
        case waiting
        /// The segment is of format 1.
        case formatOne
    }

    /// The index of the record that comes after `item`, given the one
    /// expected before it (`nil`: not known): what a writer appends next, or
    /// where a reader's count stands. A damaged fragment counts as one
    /// record, the one expected, and its index is never used again (its
    /// post may have returned); its own index is believed only when none is
    /// expected, since a damaged header may claim any (a forged one would
    /// make every later index tell a false gap). A middle piece's record is
    /// not whole yet.
    static func index(after item: Item, following expected: UInt64?) -> UInt64? {
        switch item {
        case .record(_, _, let index, _): index &+ 1
        case .damaged(let index): (expected ?? index) &+ 1
        case .start(let index, _), .rollover(_, let index, _): index
        case .piece(let index, let isLast): isLast ? index &+ 1 : index
        case .skipped: expected
        }
    }

    /// The data bytes of damaged fragments checked in one block before the
    /// rest of the block is skipped.
    static let damageBudget = 2 * LogFormat.blockSize

    /// Walks `bytes`, which are the segment's bytes from offset `base` on, in
    /// a file of `fileSize` bytes, calling `body` for each item. Returns the
    /// segment offset it got to (the end of the last item) and why it stopped.
    static func walk(
        _ bytes: [UInt8], base: Int, fileSize: Int, _ body: (Item) -> Void
    ) -> (end: Int, stop: Stop) {
        bytes.withUnsafeBytes { raw in walk(raw, base: base, fileSize: max(fileSize, base + bytes.count), body) }
    }

    private static func walk(
        _ raw: UnsafeRawBufferPointer, base: Int, fileSize: Int, _ body: (Item) -> Void
    ) -> (end: Int, stop: Stop) {
        let available = base + raw.count
        let headerSize = LogFormat.headerSize
        var position = base
        // Data bytes of damaged fragments checked in the current block.
        var damagedBlock = -1
        var damagedBytes = 0
        while position < available {
            let blockEnd = LogFormat.blockEnd(of: position)
            if blockEnd != damagedBlock {
                damagedBlock = blockEnd
                damagedBytes = 0
            }
            let left = blockEnd - position
            // Writers pad with zeros the end of a block too small for the
            // fragment they write next.
            if left < headerSize
                || (left < headerSize + LogFormat.rolloverDataSize
                    && isZero(raw, (position - base)..<(min(blockEnd, available) - base)))
            {
                guard blockEnd <= available else { return (position, fileSize >= blockEnd ? .needsMore : .waiting) }
                position = blockEnd
                continue
            }
            if position == 0, raw.count >= 4, Array(raw[0..<4]) == LogFormat.formatOneMagic {
                return (position, .formatOne)
            }
            guard position + headerSize <= available else {
                return (position, position + headerSize <= fileSize ? .needsMore : .waiting)
            }
            switch fragment(raw, at: position, base: base, available: available, fileSize: fileSize) {
            case .valid(let header):
                let dataStart = position + headerSize
                let end = dataStart + header.length
                switch header.type {
                case .full:
                    body(
                        .record(
                            start: position, end: end, index: header.index,
                            envelope: .inWindow(
                                (dataStart - base)..<(end - base),
                                verified: header.dataChecksum == LogFormat.envelopeResidue)))
                    position = end
                case .start:
                    let log = UInt64(
                        littleEndian: raw.loadUnaligned(fromByteOffset: dataStart - base, as: UInt64.self))
                    body(.start(index: header.index, log: log))
                    position = end
                case .rollover:
                    let next = UInt64(
                        littleEndian: raw.loadUnaligned(fromByteOffset: dataStart - base, as: UInt64.self))
                    body(.rollover(next: next, index: header.index, end: end))
                    return (end, .caughtUp)
                case .first:
                    switch assemble(raw, first: header, at: position, base: base, fileSize: fileSize) {
                    case .record(let envelope, let recordEnd):
                        body(
                            .record(
                                start: position, end: recordEnd, index: header.index, envelope: .assembled(envelope)))
                        position = recordEnd
                    case .broken(let at):
                        body(.skipped(start: position, end: at))
                        position = at
                    case .stop(let stop):
                        return (position, stop)
                    }
                case .middle, .last:
                    // A piece without its first: the rest of a record whose
                    // start lies before these bytes, or was cut short.
                    body(.piece(index: header.index, isLast: header.type == .last))
                    position = end
                }
            case .incomplete(.waiting):
                // Runs past the file's end: a write in progress, or a forged
                // length. A writer appends only after whole records, so a
                // valid fragment within the claimed length says forged.
                switch resynchronize(raw, after: position, base: base, available: available, fileSize: fileSize) {
                case .found(let next) where next < available:
                    body(.skipped(start: position, end: next))
                    position = next
                case .found, .stop:
                    return (position, .waiting)
                }
            case .incomplete(let stop):
                return (position, stop)
            case .damaged(let header):
                body(.damaged(index: header.index))
                damagedBytes += header.length
                if damagedBytes > damageBudget {
                    // More damaged data in one block than real damage leaves
                    // (headers forged to make every search checksum the
                    // rest of the block): the rest of it is skipped, so a
                    // block never costs more than a few times its size.
                    guard blockEnd <= available else {
                        return (position, fileSize >= blockEnd ? .needsMore : .waiting)
                    }
                    body(.skipped(start: position, end: blockEnd))
                    position = blockEnd
                    continue
                }
                fallthrough
            case .invalid:
                switch resynchronize(raw, after: position, base: base, available: available, fileSize: fileSize) {
                case .found(let next):
                    body(.skipped(start: position, end: next))
                    position = next
                case .stop(let stop):
                    return (position, stop)
                }
            }
        }
        return (position, .caughtUp)
    }

    private enum Fragment {
        case valid(LogFormat.Header)
        case incomplete(Stop)
        case damaged(LogFormat.Header)
        case invalid
    }

    /// The fragment whose header is at `position`, which has a header's bytes
    /// available; its data is checked when it is there.
    private static func fragment(
        _ raw: UnsafeRawBufferPointer, at position: Int, base: Int, available: Int, fileSize: Int
    ) -> Fragment {
        guard let header = LogFormat.header(in: raw, at: position - base, base: base) else { return .invalid }
        let end = position + LogFormat.headerSize + header.length
        guard end <= available else { return .incomplete(end <= fileSize ? .needsMore : .waiting) }
        let data = UnsafeRawBufferPointer(rebasing: raw[(position + LogFormat.headerSize - base)..<(end - base)])
        return CRC32C.checksum(data) == header.dataChecksum ? .valid(header) : .damaged(header)
    }

    private enum Assembly {
        case record([UInt8], end: Int)
        /// A piece is missing or wrong at this offset: the pieces before it
        /// are a stretch to skip.
        case broken(at: Int)
        case stop(Stop)
    }

    /// Puts together a record whose first piece is at `position`.
    private static func assemble(
        _ raw: UnsafeRawBufferPointer, first: LogFormat.Header, at position: Int, base: Int, fileSize: Int
    ) -> Assembly {
        let available = base + raw.count
        let headerSize = LogFormat.headerSize
        var envelope: [UInt8] = []
        var piece = position
        var header = first
        while true {
            envelope.append(
                contentsOf: UnsafeRawBufferPointer(
                    rebasing: raw[(piece + headerSize - base)..<(piece + headerSize + header.length - base)]))
            let end = piece + headerSize + header.length
            if header.type == .last { return .record(envelope, end: end) }
            // The next piece starts the next block.
            piece = end
            guard piece + headerSize <= available else {
                return .stop(piece + headerSize <= fileSize ? .needsMore : .waiting)
            }
            switch fragment(raw, at: piece, base: base, available: available, fileSize: fileSize) {
            case .valid(let next) where (next.type == .middle || next.type == .last) && next.index == first.index:
                header = next
            case .incomplete(let stop):
                return .stop(stop)
            case .valid, .damaged, .invalid:
                return .broken(at: piece)
            }
        }
    }

    private enum Resynchronization {
        case found(Int)
        case stop(Stop)
    }

    /// The next offset after `position`, in the same block, where a valid
    /// fragment starts; else the block's end once the file goes on past it.
    private static func resynchronize(
        _ raw: UnsafeRawBufferPointer, after position: Int, base: Int, available: Int, fileSize: Int
    ) -> Resynchronization {
        let blockEnd = LogFormat.blockEnd(of: position)
        let limit = min(blockEnd, available) - LogFormat.headerSize
        var candidate = position + 1
        while candidate <= limit {
            defer { candidate += 1 }
            // Cheap checks first: the version and type bytes.
            let index = candidate - base
            guard raw[index + 4] == LogFormat.version, raw[index + 5] >= 1, raw[index + 5] <= 6,
                let header = LogFormat.header(in: raw, at: index, base: base)
            else { continue }
            let end = candidate + LogFormat.headerSize + header.length
            guard end <= available else {
                // Cannot be checked in these bytes; the file may hold it.
                if end <= fileSize { return .found(candidate) }
                continue
            }
            // A header whose own checksum passes is a fragment's, whether
            // or not its data does: a damaged one is reported (its record
            // is lost, and counted), never searched past unseen.
            return .found(candidate)
        }
        if blockEnd <= available { return .found(blockEnd) }
        return .stop(fileSize > blockEnd ? .needsMore : .waiting)
    }

    private static func isZero(_ raw: UnsafeRawBufferPointer, _ range: Range<Int>) -> Bool {
        raw[range].allSatisfy { $0 == 0 }
    }
}
