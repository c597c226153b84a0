/// One subscribed name's read position in its log, and the decisions a read
/// pass makes, as a state machine: events in (what a system call found),
/// actions out (the system call to make next). It performs no I/O, takes no
/// lock and reads no clock, so every transition is tested with byte arrays
/// (`LogCursorStateMachineTests`, `LogSimulationTests`); ``LogReader``
/// performs its actions.
///
/// It stands only on record boundaries and advances only past complete,
/// valid records (see ``LogScanner``). It follows a segment's rollover mark
/// to the next segment; when that one is gone (retention, `rm`) it goes on
/// at the oldest later segment there is, and the record indexes say exactly
/// how many notifications it missed, reported before the next record it
/// delivers. It skips a corrupt stretch and counts it; it waits at a tail
/// that is still being written; it notices a segment truncated and written
/// again (the checksum ending the last record read has changed, or the
/// segment is shorter than the position) and goes on at the first record it
/// has not read (a segment found emptied, as a rewrite begins, is waited for,
/// never read again from its start); and it follows a log removed and started again: every
/// segment's start mark names its log, and a segment of another log than
/// the one the reader was reading (a saved position into a log since
/// replaced, a log removed under a paused reader and made again, whatever
/// numbers the file system gave its files) sends the reader to the oldest
/// segment of the log there is now.
struct LogCursorStateMachine {
    /// Bytes read per pass, over all segments, about 160 small records: a pass then hands over
    /// about what a handler loop delivers in one slice, and the next pass
    /// runs after the handlers on the transport's thread had their turn. A
    /// backlog read whole at once (a burst, a late reader) filled an
    /// observer's buffer before its handler, on the same thread, could run.
    static let bytesPerPass = 16 * 1024

    /// The system call the driver makes next.
    enum Action: Equatable {
        /// Open this segment, closing any other; answer ``Event/opened`` or
        /// ``Event/openFailed(refused:nextSegment:)``.
        case open(segment: UInt64)
        /// Measure the open segment; answer ``Event/measured(size:links:)`` or
        /// ``Event/measureFailed``.
        case measure
        /// Was the log started again (the open segment has no name left, or
        /// the one asked for is not there)? Answer
        /// ``Event/newestLogFound(_:)``: the log the newest segment's start
        /// mark names, where writers append now.
        case checkRestart
        /// Read `count` bytes of the open segment at `offset`; answer
        /// ``Event/read(_:)`` or ``Event/readFailed``.
        case read(offset: Int, count: Int)
        /// Is there a segment after `segment`? Asked only of a segment that
        /// ends without a rollover mark and will get none (removed, or of
        /// format 1). Answer ``Event/nextFound(_:)``.
        case findNext(after: UInt64)
        /// Which log does segment `segment`'s start mark name? Answer
        /// ``Event/identified(_:)`` (`nil`: it has none, not a segment of
        /// any log).
        case identify(segment: UInt64)
        /// The pass is over: take its ``PassResult``.
        case finish
    }

    /// What the system call of the last action found.
    enum Event {
        case opened
        /// `refused`: the file is not one a reader may read (a link, another
        /// user's); `nextSegment`: the oldest segment after the one asked for.
        case openFailed(refused: Bool, nextSegment: UInt64?)
        case measured(size: Int, links: Int)
        case measureFailed
        /// The identifier in the newest segment's start mark; `nil` when
        /// there is no segment or it has no valid start mark.
        case newestLogFound(UInt64?)
        /// Bytes read; fewer than asked when the file is shorter.
        case read([UInt8])
        case readFailed
        case nextFound(UInt64?)
        case identified(UInt64?)
    }

    /// What a pass found.
    struct PassResult {
        var records: [LogRecord] = []
        /// The pass stopped at ``bytesPerPass`` with more to read.
        var hasMore = false
        /// Notifications that will never be read, after the last record in
        /// ``records`` (those before a record are in its ``LogRecord/missedBefore``).
        var missedAfterRecords = 0
        var corruptRecordsSkipped = 0
        var shrunkSegments = 0
        var vanishedSegments = 0
        var refusedFiles = 0
    }

    private enum Step {
        case idle
        case opening
        case measuring
        // Reading the start mark of a segment opened past its start.
        case readingMark
        // Asking whether the log was started again; `size`: the open
        // segment's, when it is open and unlinked.
        case checkingRestart(size: Int?)
        // Reading the 4 bytes before the position and what follows.
        case readingChecked(size: Int, capped: Bool)
        case readingFresh(size: Int, capped: Bool)
        // Reading a truncated segment whole, to find where to go on.
        case readingWhole(size: Int, capped: Bool)
        case findingNext
        // At the end of a segment of `size` bytes that ends in something
        // unreadable: is there a later segment (then its rollover mark is
        // what is damaged)?
        case findingSuccessor(size: Int)
        // A later segment was found: is it a segment of a log?
        case identifyingSuccessor(size: Int, next: UInt64)
        // A later segment was found: has this one grown since it was read?
        case remeasuring(size: Int, next: UInt64)
    }

    let name: NotificationName
    private(set) var segment: UInt64
    private(set) var offset: Int
    // The index of the next record; `nil` until the log tells it.
    private(set) var nextIndex: UInt64?
    // The identifier of the log being read; `nil` until a start mark tells it.
    private(set) var log: UInt64?
    // Restarted in `log` and looking for its oldest segment: segments of
    // other logs met on the way (left behind, or planted) are passed over.
    private var seekingLog = false
    // Records ending at or before this may have been delivered by an earlier
    // run of this durable identity: they are marked as redeliveries. Of the
    // log it was saved in only.
    private var redeliverThrough: LogPosition?
    // The segment the driver has open now, its size when last measured, and
    // whether it has a name left.
    private var openSegment: UInt64?
    private var fileSize = 0
    private var unlinked = false
    // The checksum that ends the last record read from the open segment (the
    // 4 bytes before `offset`), and the last sequence number read from each
    // sender in it: to notice a truncation, and to find where to go on.
    private var lastChecksum: [UInt8] = []
    private var lastSequences: [NotificationSender: UInt64] = [:]
    // The open segment shrank under this reader (truncated, or emptied as a
    // rewrite by hand begins) and it has not decided where to go on yet:
    // where it was (`resumeFrom`: the position and the checksum that ended
    // the record before it) once the segment holds the same bytes there
    // again, else at the first record it has not read (`isNew`).
    private var resumePending = false
    private var resumeFrom: (offset: Int, checksum: [UInt8])?
    // The newest wall-clock time of the records read from the open segment:
    // a record of a sender not read from here is new if posted after it.
    private var newestWallClock: Int64?
    private let subscribedAt: Int64?
    // A stretch was skipped and the next record will tell whether it held
    // notifications (a gap in the indexes) or only a torn tail.
    private var skippedStretch = false
    // Notifications lost before the next record read.
    private var missed = 0

    private var step = Step.idle
    private var result = PassResult()
    private var budget = 0
    private var readWhole = false
    // Records this pass may still hand over (`nil`: no limit).
    private var recordsLeft: Int?
    // This pass read the largest span a record can take and found none whole.
    private var spanRead = false
    // This pass looked for a successor of a segment ending in something
    // unreadable (once a pass: a segment written to all the while is
    // looked at again on the next).
    private var successorSought = false
    // A segment may have been created since this reader last looked for a
    // later one (and a new reader has never looked).
    private var successorHint = true

    /// A reader from `start`; records before it that may have been
    /// delivered are marked up to `redeliveringThrough`. `subscribedAt`: the
    /// wall-clock time reading started, for a reader that promises what is
    /// posted from then on (see `firstNewRecord`).
    init(
        name: NotificationName, start: LogPosition, redeliveringThrough: LogPosition?, subscribedAt: Int64? = nil
    ) {
        self.name = name
        self.subscribedAt = subscribedAt
        self.segment = start.segment
        self.offset = start.offset
        self.nextIndex = start.index
        self.log = start.log
        self.redeliverThrough = redeliveringThrough
        // Resuming at a saved place: what lies between it and the first
        // record read (a stretch a previous run skipped) counts as a gap.
        self.skippedStretch = start.index != nil
    }

    /// Where the next record to read starts.
    var position: LogPosition { LogPosition(segment: segment, offset: offset, index: nextIndex, log: log) }

    /// Starts a pass that hands over at most `maximumRecords` records (the
    /// room its observers' buffers have; `nil`: no limit), so a buffering
    /// policy never drops what a durable reader must deliver.
    ///
    /// `segmentsChanged`: a segment may have been created in the log's
    /// directory since the last pass: once at the clean end of its segment,
    /// the reader looks for a later one, which writers start only once they
    /// no longer append to this one.
    mutating func startPass(maximumRecords: Int? = nil, segmentsChanged: Bool = false) -> Action {
        if segmentsChanged { successorHint = true }
        result = PassResult()
        budget = Self.bytesPerPass
        readWhole = false
        spanRead = false
        successorSought = false
        recordsLeft = maximumRecords.map { max(1, $0) }
        return top()
    }

    /// The driver lost its open segment (it closed it, or never opened one).
    mutating func segmentClosed() {
        openSegment = nil
    }

    /// Ends the pass and returns what it found; call on ``Action/finish``.
    mutating func takeResult() -> PassResult {
        // Known exactly already (a mark's index, a record that would not
        // decode): reported now, not held for a record that may be long in coming.
        result.missedAfterRecords = missed
        missed = 0
        defer { result = PassResult() }
        return result
    }

    /// Takes what the last action's system call found; returns the next action.
    mutating func receive(_ event: Event, decoder: inout EnvelopeDecoder) -> Action {
        switch (step, event) {
        case (.opening, .opened):
            openSegment = segment
            // Opened past its start, whose mark the walk will not see: the
            // mark says whether this is still the log being read.
            guard offset > 0 else { return measure() }
            step = .readingMark
            return .read(offset: 0, count: LogFormat.startSize)
        case (.readingMark, .read(let bytes)):
            if let found = LogFormat.logIdentifier(inStart: bytes) {
                if let log, found != log { return foreignSegment(of: found) }
                log = found
                seekingLog = false
            }
            // A start mark damaged in place: its records are still read.
            return measure()
        case (.readingMark, .readFailed):
            return finish()
        case (.opening, .openFailed(let refused, let next)):
            if refused { result.refusedFiles += 1 }
            // Deleted by retention, refused, or not created yet: go to the
            // next segment there is; its start mark tells what was missed.
            if let next, next > segment {
                moveTo(next)
                return top()
            }
            // None after it: not created yet, or the log was started again
            // with fewer segments than this one's number.
            step = .checkingRestart(size: nil)
            return .checkRestart

        case (.measuring, .measured(let size, let links)):
            guard size <= LogFormat.maximumSegmentBytes, size > 0 || offset > 0 else {
                // Not a segment a writer made (planted, grown by hand, or
                // empty: every segment is created whole with its start
                // mark): never read; the log goes on after it.
                result.refusedFiles += 1
                step = .findingNext
                return .findNext(after: segment)
            }
            fileSize = size
            unlinked = links == 0
            // A segment deleted by retention is still read to its end through
            // the open descriptor; one with no name left may also belong to a
            // log removed and started again.
            if unlinked {
                step = .checkingRestart(size: size)
                return .checkRestart
            }
            return window(size: size)
        case (.measuring, .measureFailed):
            return finish()

        case (.checkingRestart(let size), .newestLogFound(let found)):
            if let found, let log, found != log { return restart(in: found) }
            // The same log (only this segment was removed: retention, `rm`;
            // its rollover mark or the directory says where the log goes
            // on), or no other log yet.
            guard let size else { return finish() }
            return window(size: size)

        case (.readingChecked(let size, let capped), .read(let bytes)):
            guard bytes.count >= 4, bytes.starts(with: lastChecksum) else {
                return readWholeForResume(size: size, capped: capped)
            }
            return walk(Array(bytes.dropFirst(4)), capped: capped, decoder: &decoder)
        case (.readingChecked, .readFailed):
            return finish()
        case (.readingWhole(let size, let capped), .read(let bytes)):
            return resume(in: bytes, size: size, capped: capped)
        case (.readingWhole(let size, let capped), .readFailed):
            offset = min(offset, size)
            return readFresh(size: size, capped: capped)
        case (.readingFresh(_, let capped), .read(let bytes)):
            return walk(bytes, capped: capped, decoder: &decoder)
        case (.readingFresh, .readFailed):
            return finish()

        case (.findingNext, .nextFound(let next)):
            guard let next, next > segment else { return finish() }
            moveTo(next)
            return top()

        case (.findingSuccessor(let size), .nextFound(let next)):
            guard let next, next > segment else { return finish() }
            step = .identifyingSuccessor(size: size, next: next)
            return .identify(segment: next)
        case (.identifyingSuccessor(let size, let next), .identified(let log)):
            // A file planted under a later number (or one caught while it
            // was being made) says nothing about this segment: writers go
            // on here, or mark it, stepping over the file.
            guard log != nil else { return finish() }
            step = .remeasuring(size: size, next: next)
            return .measure
        case (.remeasuring(let size, let next), .measured(let now, let links)):
            guard now == size, links > 0 else {
                // Written to meanwhile (its rollover mark, it may be), or
                // removed: read on as usual.
                step = .measuring
                return receive(.measured(size: now, links: links), decoder: &decoder)
            }
            // A writer writes a segment's rollover mark before it creates
            // the next one, and this segment has not changed since the next
            // one was seen: its mark is damaged. The log goes on there; the
            // next segment's start mark tells what, if anything, was lost.
            skippedStretch = true
            moveTo(next)
            return top()
        case (.remeasuring, .measureFailed):
            return finish()

        default:
            // An event the last action did not ask for (a driver bug): ending
            // the pass keeps the position, so nothing is skipped or repeated.
            return finish()
        }
    }

    // MARK: - Steps

    private mutating func top() -> Action {
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

    private mutating func measure() -> Action {
        step = .measuring
        return .measure
    }

    private mutating func moveTo(_ next: UInt64) {
        segment = next
        offset = 0
        resumePending = false
        resumeFrom = nil
    }

    /// The segment just opened belongs to log `other`: a segment of another
    /// log passed over while looking for the new log's oldest segment, or
    /// else the sign that the log was started again.
    private mutating func foreignSegment(of other: UInt64) -> Action {
        guard seekingLog else { return restart(in: other) }
        openSegment = nil
        step = .findingNext
        return .findNext(after: segment)
    }

    /// The log was removed and started again as log `newLog`: the reader
    /// goes on in it from its oldest segment, and its indexes start again.
    /// What the old log held past the position was removed with it; the
    /// reader counts a vanished segment.
    private mutating func restart(in newLog: UInt64) -> Action {
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

    private mutating func finish() -> Action {
        step = .idle
        return .finish
    }

    /// What to read of a segment of `size` bytes.
    private mutating func window(size measured: Int) -> Action {
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

    private mutating func readWholeForResume(size: Int, capped: Bool) -> Action {
        if !resumePending {
            result.shrunkSegments += 1
            resumeFrom = (offset, lastChecksum)
        }
        lastChecksum = []
        step = .readingWhole(size: size, capped: capped)
        return .read(offset: 0, count: size)
    }

    private mutating func readFresh(size: Int, capped: Bool) -> Action {
        guard offset < size else { return afterReading(stop: .caughtUp, capped: capped, readAny: false) }
        step = .readingFresh(size: size, capped: capped)
        return .read(offset: offset, count: size - offset)
    }

    /// Counts what the log says was lost before a record or mark of `index`.
    private mutating func arrive(at index: UInt64) {
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
    private mutating func walk(_ fresh: [UInt8], capped: Bool, decoder: inout EnvelopeDecoder) -> Action {
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
                guard var message = Self.decode(envelope, in: fresh, with: &decoder) else {
                    // Checksummed, yet not an envelope this reader can take
                    // (forged, or over its payload limit): lost, and said so.
                    result.corruptRecordsSkipped += 1
                    missed += 1
                    return
                }
                let position = LogPosition(segment: segment, offset: end, index: index &+ 1, log: log)
                if let redeliverThrough, position <= redeliverThrough { message.isRedelivery = true }
                sequences[message.sender] = message.sequence
                newestWallClock = max(newestWallClock ?? .min, message.timestamp.wallClockNanoseconds)
                records.append(LogRecord(message: message, end: position, missedBefore: missed))
                missed = 0
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

    private mutating func afterReading(stop: LogScanner.Stop, capped: Bool, readAny: Bool) -> Action {
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
    private mutating func resume(in bytes: [UInt8], size: Int, capped: Bool) -> Action {
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
    private func firstNewRecord(in bytes: [UInt8]) -> (start: Int?, end: Int) {
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
