@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// What a writer makes of bytes, without state: the damage it finds at a
// log's end, the fragments it frames, the error of a failed write.
extension LogWriterStateMachine {
    // MARK: - Damage
    /// Whether `bytes` (segment offset `base` on) hold, at `position`, a
    /// header's worth of bytes that is a damaged header: no valid header,
    /// and not one a repair began to zero either. A writer killed (or out of
    /// space) while zeroing a torn tail leaves its header's first bytes zero
    /// and the rest as they were, so the stored checksum's bytes that are
    /// left still match the rest of the header; one flipped byte never makes
    /// that, unless it turned the first byte to zero, which is then taken
    /// for a tear (see `WireFormat`).
    static func isDamagedHeader(_ bytes: [UInt8], at position: Int, base: Int) -> Bool {
        guard position >= 0, position + LogFormat.headerSize <= bytes.count else { return false }
        let header = Array(bytes[position..<(position + LogFormat.headerSize)])
        let zeros = header.firstIndex { $0 != 0 } ?? header.count
        // All zero, or zero through the version byte: zeroed, not damaged.
        guard zeros < 5 else { return false }
        let valid = bytes.withUnsafeBytes { LogFormat.header(in: $0, at: position, base: base) != nil }
        guard !valid else { return false }
        guard zeros > 0 else { return true }
        let computed = header.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[4...])) }
        let expected = withUnsafeBytes(of: computed.littleEndian) { Array($0) }
        return header[zeros..<4] != expected[zeros..<4]
    }

    /// The offset after the fragments from `start` of `bytes` (segment
    /// offset `base` + `start`) on, one after another, whose headers are
    /// valid and whose data, all there, fail their checksums; `nil` when the
    /// first is not one.
    static func damagedTail(_ bytes: [UInt8], from start: Int, base: Int) -> Int? {
        var found = false
        var position = start
        bytes.withUnsafeBytes { raw in
            while position >= 0, position + LogFormat.headerSize <= raw.count {
                guard let header = LogFormat.header(in: raw, at: position, base: base) else { return }
                let dataStart = position + LogFormat.headerSize
                guard dataStart + header.length <= raw.count else { return }
                let data = UnsafeRawBufferPointer(rebasing: raw[dataStart..<(dataStart + header.length)])
                guard CRC32C.checksum(data) != header.dataChecksum else { return }
                found = true
                position = dataStart + header.length
                // Zeros a writer padded the block's end with.
                let left = LogFormat.blockEnd(of: base + position) - (base + position)
                if left < LogFormat.headerSize + 1 { position += left }
            }
        }
        return found ? base + min(position, bytes.count) : nil
    }

    // MARK: - Framing

    /// Frames as many of `envelopes` as fit in a segment of `segmentSize`
    /// bytes at `start` into `batch` (cleared first), with record indexes
    /// from `index`: a record larger than a segment goes alone into a
    /// segment of its own. Returns how many, and where they end.
    static func frame<Envelopes: RandomAccessCollection<EncodedNotification>>(
        _ envelopes: Envelopes, at start: Int, index: UInt64, segmentSize: Int, into batch: inout [UInt8]
    ) -> (count: Int, end: Int) {
        batch.removeAll(keepingCapacity: true)
        var end = start
        var count = 0
        for envelope in envelopes {
            let mark = batch.count
            let after = envelope.storage.withUnsafeBytes { raw in
                LogFormat.appendRecord(
                    UnsafeRawBufferPointer(rebasing: raw[envelope.envelopeRange]),
                    index: index &+ UInt64(count), at: end, to: &batch)
            }
            if after > segmentSize && (count > 0 || start > LogFormat.startSize) {
                batch.removeSubrange(mark...)
                break
            }
            end = after
            count += 1
        }
        return (count, end)
    }

    /// The error of a write that failed; a full disk is said so.
    static func writeFailure(_ error: Errno, name: NotificationName) -> TypedNotificationError {
        switch error {
        case .noSpace, .fileTooLarge, .quotaExceeded:
            return TypedNotificationError(
                code: .storageFull,
                message:
                    "could not append to the log of \(name): \(error); nothing partial was kept and earlier notifications are intact",
                cause: error
            )
        default:
            return SharedDirectory.failure(error, "could not append to the log of \(name)")
        }
    }
}
