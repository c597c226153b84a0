@_spi(TransportAuthoring) import TypedNotificationsCore
// The reader machine's steps: where it goes next, how it reads and resumes.
extension LogCursorStateMachine {
    // MARK: - Steps

    mutating func top() -> Action {
        if budget <= 0 {
            result.hasMore = true
            return finish()
        }
        if openSegment != segment {
            openSegment = nil
            lastChecksum = []
            lastSequences = [:]
            newestWallClock = nil
            step = .opening
            return .open(segment: segment)
        }
        return measure()
    }

    mutating func measure() -> Action {
        step = .measuring
        return .measure
    }

    mutating func moveTo(_ next: UInt64) {
        segment = next
        offset = 0
        resumePending = false
        resumeFrom = nil
    }

    /// The segment just opened belongs to log `other`: a segment of another
    /// log passed over while looking for the new log's oldest segment, or
    /// else the sign that the log was started again.
    mutating func foreignSegment(of other: UInt64) -> Action {
        guard seekingLog else { return restart(in: other) }
        openSegment = nil
        step = .findingNext
        return .findNext(after: segment)
    }

    /// The log was removed and started again as log `newLog`: the reader
    /// goes on in it from its oldest segment, and its indexes start again.
    /// What the old log held past the position was removed with it; the
    /// reader counts a vanished segment.
    mutating func restart(in newLog: UInt64) -> Action {
        result.vanishedSegments += 1
        log = newLog
        redeliverThrough = nil
        openSegment = nil
        unlinked = false
        offset = 0
        nextIndex = nil
        skippedStretch = false
        lastChecksum = []
        lastSequences = [:]
        newestWallClock = nil
        resumePending = false
        resumeFrom = nil
        seekingLog = true
        segment = 0
        step = .findingNext
        return .findNext(after: 0)
    }

    mutating func finish() -> Action {
        step = .idle
        return .finish
    }

    /// What to read of a segment of `size` bytes.
    mutating func window(size measured: Int) -> Action {
        var size = measured
        // Read a slice of a backlog; a record longer than the slice is read
        // whole (see `walk`).
        var capped = false
        if size - offset > budget, !readWhole {
            size = offset + budget
            capped = true
        } else if readWhole, size - offset > LogFormat.maximumRecordSpan {
            // One record, however large, fits in this; a stretch of garbage
            // longer than it is read a span at a time.
            size = offset + LogFormat.maximumRecordSpan
            capped = true
            readWhole = false
            spanRead = true
        }
        if size < offset || resumePending {
            return readWholeForResume(size: size, capped: capped)
        }
        if lastChecksum.count == 4, offset >= 4 {
            // The new bytes with the 4 before them: the checksum that ended
            // the last record read. If those changed, the segment no longer
            // holds what was read from it (truncated and written again).
            step = .readingChecked(size: size, capped: capped)
            return .read(offset: offset - 4, count: size - offset + 4)
        }
        return readFresh(size: size, capped: capped)
    }

    mutating func readWholeForResume(size: Int, capped: Bool) -> Action {
        if !resumePending {
            result.shrunkSegments += 1
            resumeFrom = (offset, lastChecksum)
        }
        lastChecksum = []
        step = .readingWhole(size: size, capped: capped)
        return .read(offset: 0, count: size)
    }

    mutating func readFresh(size: Int, capped: Bool) -> Action {
        guard offset < size else { return afterReading(stop: .caughtUp, capped: capped, readAny: false) }
        step = .readingFresh(size: size, capped: capped)
        return .read(offset: offset, count: size - offset)
    }

    /// Counts what the log says was lost before a record or mark of `index`.
    mutating func arrive(at index: UInt64) {
        if let expected = nextIndex, index > expected {
            missed += Int(clamping: index - expected)
            if skippedStretch { result.corruptRecordsSkipped += 1 }
        } else if skippedStretch && nextIndex == nil {
            result.corruptRecordsSkipped += 1
        }
        // A stretch followed by no gap held only a torn tail, whose post
        // never returned: nothing lost.
        skippedStretch = false
    }

    /// Takes the records in `fresh`, the bytes from `offset` on.
    mutating func walk(_ fresh: [UInt8], capped: Bool, decoder: inout EnvelopeDecoder) -> Action {
        let start = offset
        let segment = segment
        if start == 0 && Self.isPlanted(fresh, fileSize: fileSize) {
            // Bytes that are no log of ours under a segment's name: never
            // read; reading goes on after it.
            result.refusedFiles += 1
            step = .findingNext
            return .findNext(after: segment)
        }
        var rollover: UInt64?
        // Moved out and back, so that appending copies neither.
        var records: [LogRecord] = []
        var sequences: [NotificationSender: UInt64] = [:]
        swap(&records, &result.records)
        swap(&sequences, &lastSequences)
        // Where the pass stops when it has handed over as many as it may.
        var full: Int?
        // The start mark of another log than the one being read.
        var foreign: UInt64?
        let walked = LogScanner.walk(fresh, base: start, fileSize: fileSize) { item in
            guard full == nil, foreign == nil else { return }
            switch item {
            case .record(_, let end, let index, let envelope):
                // A gap in the indexes counts only after a stretch skipped:
                // records next to each other were written in order, so a
                // jump between them is a forged index, not a loss.
                if skippedStretch { arrive(at: index) }
                nextIndex = index &+ 1
                // An envelope of another name than its log's is not this
                // log's record, whoever wrote it there: corrupt, as over Redis.
                guard var message = Self.decode(envelope, in: fresh, with: &decoder), message.name == name else {
                    if Self.isOversized(envelope, in: fresh, for: &decoder) {
                        // Over the center's payload limit: refused, and said so.
                        result.oversizedRecords += 1
                        refused += 1
                    } else {
                        // Checksummed, yet not an envelope this reader can take: lost, and said so.
                        result.corruptRecordsSkipped += 1
                    }
                    missed += 1
                    result.skippedThrough = LogPosition(segment: segment, offset: end, index: index &+ 1, log: log)
                    return
                }
                let position = LogPosition(segment: segment, offset: end, index: index &+ 1, log: log)
                if let redeliverThrough, position <= redeliverThrough { message.isRedelivery = true }
                sequences[message.sender] = message.sequence
                newestWallClock = max(newestWallClock ?? .min, message.timestamp.wallClockNanoseconds)
                records.append(LogRecord(message: message, end: position, missedBefore: missed, refusedBefore: refused))
                result.skippedThrough = nil
                missed = 0
                refused = 0
                if let left = recordsLeft {
                    recordsLeft = left - 1
                    if left == 1 { full = end }
                }
            case .start(let index, let found):
                if let log, found != log {
                    foreign = found
                    return
                }
                log = found
                seekingLog = false
                arrive(at: index)
                nextIndex = index
            case .rollover(let next, let index, _):
                // Written right after this segment's last record: its index
                // is the next one. After a stretch skipped (the last record
                // damaged), the records before it are lost; else a jump is
                // a forged index, and nothing is lost here.
                if skippedStretch { arrive(at: index) }
                skippedStretch = false
                nextIndex = index
                rollover = next
            case .damaged(let index):
                // Lost, and counted when the next record or mark tells how
                // many were (writers never use a damaged record's index
                // again). Its own index is believed only when the reader
                // knows none: a damaged header may claim any index, and one
                // claiming the next would hide the record it destroyed.
                if nextIndex == nil { nextIndex = index }
                skippedStretch = true
            case .skipped, .piece:
                skippedStretch = true
            }
        }
        swap(&records, &result.records)
        swap(&sequences, &lastSequences)
        if let foreign { return foreignSegment(of: foreign) }
        if let full {
            // As many as the observers have room for: the rest waits in the log.
            let consumed = full - start
            offset = full
            budget -= consumed
            if consumed >= 4 { lastChecksum = Array(fresh[(consumed - 4)..<consumed]) }
            result.hasMore = true
            return finish()
        }
        let consumed = walked.end - start
        offset = walked.end
        budget -= consumed
        if consumed >= 4 {
            lastChecksum = Array(fresh[(consumed - 4)..<consumed])
        }
        if let rollover {
            moveTo(rollover)
            return top()
        }
        return afterReading(stop: walked.stop, capped: capped, readAny: consumed > 0)
    }

    mutating func afterReading(stop: LogScanner.Stop, capped: Bool, readAny: Bool) -> Action {
        switch stop {
        case .formatOne:
            // Written by an older version: never read; the log goes on after it.
            result.refusedFiles += 1
            step = .findingNext
            return .findNext(after: segment)
        case .needsMore where capped:
            if readAny {
                result.hasMore = true
                return finish()
            }
            if spanRead {
                // No record is that long: forged pieces. Skipped, a block at a time.
                spanRead = false
                skippedStretch = true
                lastChecksum = []
                offset = LogFormat.blockEnd(of: offset)
                return top()
            }
            // Not one whole record in the slice: read this one whole.
            readWhole = true
            return top()
        case .caughtUp where capped:
            result.hasMore = true
            return finish()
        case .needsMore, .caughtUp, .waiting:
            readWhole = false
            if !unlinked && (offset < fileSize || successorHint) && !capped && !successorSought {
                successorSought = true
                successorHint = false
                // Something unreadable at the end (a write in progress, a
                // tear, or a damaged rollover mark), or a segment created
                // since: a later segment says this one is over (abandoned
                // by writers that started a new log beside it, say).
                step = .findingSuccessor(size: fileSize)
                return .findNext(after: segment)
            }
            // A removed segment gets no rollover mark from a writer that
            // never noticed: look for a later one.
            guard unlinked else { return finish() }
            step = .findingNext
            return .findNext(after: segment)
        }
    }

    /// Where to go on in a segment that shrank under this reader, from
    /// `bytes`, the segment from its start. Where it was, when the segment
    /// holds the same bytes there again (written back as it was, in however
    /// many writes); else at the first record it has not read; else, when
    /// the segment is still shorter than where it was, nowhere yet: it
    /// waits, unless a later segment shows the log went on without it.
    mutating func resume(in bytes: [UInt8], size: Int, capped: Bool) -> Action {
        let from = resumeFrom ?? (offset, [])
        if from.offset >= 4, from.checksum.count == 4, bytes.count >= from.offset,
            Array(bytes[(from.offset - 4)..<from.offset]) == from.checksum
        {
            offset = from.offset
            lastChecksum = from.checksum
            resumePending = false
            resumeFrom = nil
            return readFresh(size: size, capped: capped)
        }
        let (first, end) = firstNewRecord(in: bytes)
        if first == nil && bytes.count < from.offset {
            // Emptied, or being written again: nothing to go on from yet.
            resumePending = true
            step = .findingSuccessor(size: size)
            return .findNext(after: segment)
        }
        // At the first record not read, else after what is there; what the
        // resume passed over counts as a gap, as after a skip.
        offset = first ?? max(from.offset, end)
        resumePending = false
        resumeFrom = nil
        skippedStretch = true
        return readFresh(size: size, capped: capped)
    }

    /// The start of the first record in `bytes` this reader has not read,
    /// and the end of the last record there. Every sender's records are in
    /// its sequence order, so a record is new when its sequence number is
    /// past the last one read from that sender. A record of a sender this
    /// reader has not read from in this segment (it resumed from a cursor,
    /// say) is new when its index is one it has not reached, or when it was
    /// posted after the newest record read here (or, having read none here,
    /// after this reader started): so a false alarm (a flipped
    /// byte in the checksum before the position) delivers nothing twice, and
    /// a record a new poster appended after a truncation is not passed over.
    func firstNewRecord(in bytes: [UInt8]) -> (start: Int?, end: Int) {
        var decoder = EnvelopeDecoder()
        var first: Int?
        var end = 0
        _ = LogScanner.walk(bytes, base: 0, fileSize: bytes.count) { item in
            guard case .record(let start, let recordEnd, let index, let envelope) = item else { return }
            end = recordEnd
            guard first == nil, let message = Self.decode(envelope, in: bytes, with: &decoder) else { return }
            if let last = lastSequences[message.sender] {
                if message.sequence <= last { return }
            } else if let reached = nextIndex, index < reached {
                guard let newest = newestWallClock ?? subscribedAt, message.timestamp.wallClockNanoseconds > newest
                else { return }
            }
            first = start
        }
        return (first, end)
    }

    /// Whether a segment's first bytes are not of this log: they neither open
    /// with a start mark nor hold a record or a rollover mark (a start mark
    /// damaged in place still leaves its records readable).
    static func isPlanted(_ bytes: [UInt8], fileSize: Int) -> Bool {
        var first = true
        // No item at all in a start mark's worth of bytes or more, or in a
        // whole file shorter than one (a writer creates every segment with
        // its start mark): nothing of ours.
        var unmarked = bytes.count >= LogFormat.startSize || (!bytes.isEmpty && bytes.count >= fileSize)
        var anyRecord = false
        _ = LogScanner.walk(bytes, base: 0, fileSize: fileSize) { item in
            if first {
                first = false
                if case .start = item { unmarked = false } else { unmarked = true }
            }
            switch item {
            case .record, .rollover: anyRecord = true
            case .start, .damaged, .skipped, .piece: break
            }
        }
        return unmarked && !anyRecord
    }

    /// Whether a record's envelope is whole and valid but for a payload
    /// over `decoder`'s limit.
    static func isOversized(_ envelope: LogScanner.Envelope, in bytes: [UInt8], for decoder: inout EnvelopeDecoder)
        -> Bool
    {
        switch envelope {
        case .inWindow(let range, _):
            guard range.upperBound <= bytes.count else { return false }
            return bytes.withUnsafeBytes { decoder.oversized(UnsafeRawBufferPointer(rebasing: $0[range])) } != nil
        case .assembled(let assembled):
            return assembled.withUnsafeBytes { decoder.oversized($0) } != nil
        }
    }

    /// The message in a record's envelope, or `nil` when it is not one whole
    /// valid envelope.
    static func decode(_ envelope: LogScanner.Envelope, in bytes: [UInt8], with decoder: inout EnvelopeDecoder)
        -> TransportMessage?
    {
        switch envelope {
        case .inWindow(let range, let verified):
            guard
                let (message, end) = try? decoder.decode(bytes, at: range.lowerBound, checksumVerified: verified),
                end == range.upperBound
            else { return nil }
            return message
        case .assembled(let assembled):
            return try? decoder.decode(assembled)
        }
    }
}
