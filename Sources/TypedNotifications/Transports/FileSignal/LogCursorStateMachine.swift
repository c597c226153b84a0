/// One subscribed name's read position in its log, and the decisions a read
/// pass makes, as a state machine: events in (what a system call found),
/// actions out (the system call to make next). It performs no I/O, takes no
/// lock and reads no clock, so every transition is tested with byte arrays
/// (`LogCursorStateMachineTests`); ``LogReader`` performs its actions.
///
/// It advances only past complete, valid records. It moves to a newer segment
/// once that exists and this one's final size is read (a writer finishes a
/// segment before it starts the next, so what is left then is torn); it
/// skips a corrupt record and counts it; it notices a segment truncated and
/// written again (the checksum ending the last record read has changed, or
/// the segment is shorter than the position) and goes on at the first record
/// it has not read; and it follows a log removed and started again.
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
        /// The open segment has no name left: was the log started again
        /// under it? Answer ``Event/restartChecked(restarted:oldestSegment:)``.
        case checkRestart
        /// Read `count` bytes of the open segment at `offset`; answer
        /// ``Event/read(_:)`` or ``Event/readFailed``.
        case read(offset: Int, count: Int)
        /// Is there a segment after `segment`? Answer ``Event/nextFound(_:)``.
        case findNext(after: UInt64)
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
        case restartChecked(restarted: Bool, oldestSegment: UInt64?)
        /// Bytes read; fewer than asked when the file is shorter.
        case read([UInt8])
        case readFailed
        case nextFound(UInt64?)
    }

    /// What a pass found.
    struct PassResult {
        var records: [LogRecord] = []
        /// The pass stopped at ``bytesPerPass`` with more to read.
        var hasMore = false
        var corruptRecordsSkipped = 0
        var shrunkSegments = 0
        var vanishedSegments = 0
        var refusedFiles = 0
    }

    private enum Step {
        case idle
        case opening
        case measuring
        case checkingRestart(size: Int)
        // Reading the 4 bytes before the position and what follows.
        case readingChecked(size: Int, capped: Bool)
        case readingFresh(size: Int, capped: Bool)
        // Reading a truncated segment whole, to find where to go on.
        case readingWhole(size: Int, capped: Bool)
        case findingNext(size: Int, stoppedShort: Bool)
        case measuringFinal(size: Int, stoppedShort: Bool, next: UInt64)
    }

    let name: NotificationName
    private(set) var segment: UInt64
    private(set) var offset: Int
    // Records ending at or before this may have been delivered by an earlier
    // run of this durable identity: they are marked as redeliveries.
    private let redeliverThrough: LogPosition?
    // The segment the driver has open now.
    private var openSegment: UInt64?
    // The checksum that ends the last record read from the open segment (the
    // 4 bytes before `offset`), and the last sequence number read from each
    // sender in it: to notice a truncation, and to find where to go on.
    private var lastChecksum: [UInt8] = []
    private var lastSequences: [NotificationSender: UInt64] = [:]

    private var step = Step.idle
    private var result = PassResult()
    private var budget = 0
    private var readWhole = false
    private var lookForNewSegment = true

    init(name: NotificationName, start: LogPosition, redeliveringThrough: LogPosition?) {
        self.name = name
        self.segment = start.segment
        self.offset = start.offset
        self.redeliverThrough = redeliveringThrough
    }

    /// Where the next record to read starts.
    var position: LogPosition { LogPosition(segment: segment, offset: offset) }

    /// Starts a pass. It looks for a newer segment when `lookForNewSegment`,
    /// when it read nothing new, or when the segment ends in a torn record: a
    /// writer creates the next segment only after finishing this one, and
    /// the creation is an event of its own, so a pass that read records and
    /// was not told of a creation has nothing to look for.
    mutating func startPass(lookForNewSegment: Bool) -> Action {
        result = PassResult()
        budget = Self.bytesPerPass
        readWhole = false
        self.lookForNewSegment = lookForNewSegment
        return top()
    }

    /// The driver lost its open segment (it closed it, or never opened one).
    mutating func segmentClosed() {
        openSegment = nil
    }

    /// Ends the pass and returns what it found; call on ``Action/finish``.
    mutating func takeResult() -> PassResult {
        defer { result = PassResult() }
        return result
    }

    /// Takes what the last action's system call found; returns the next action.
    mutating func receive(_ event: Event, decoder: inout EnvelopeDecoder) -> Action {
        switch (step, event) {
        case (.opening, .opened):
            openSegment = segment
            return measure()
        case (.opening, .openFailed(let refused, let next)):
            if refused { result.refusedFiles += 1 }
            // Deleted by retention, refused, or not created yet: go to the
            // next segment there is.
            guard let next, next > segment else { return finish() }
            segment = next
            offset = 0
            return top()

        case (.measuring, .measured(let size, let links)):
            return measured(size: size, links: links)
        case (.measuring, .measureFailed):
            return finish()
        case (.measuringFinal(let before, let stoppedShort, let next), .measured(let size, let links)):
            guard size <= before else {
                // Appended to since it was measured: read that first.
                if budget <= 0 {
                    result.hasMore = true
                    return finish()
                }
                return measured(size: size, links: links)
            }
            return moveOn(to: next, tornTail: stoppedShort)
        case (.measuringFinal(_, let stoppedShort, let next), .measureFailed):
            return moveOn(to: next, tornTail: stoppedShort)

        case (.checkingRestart(let size), .restartChecked(let restarted, let oldest)):
            guard restarted else { return window(size: size) }
            // This reader holds a file no longer in the log: go on in the log
            // as it is now, from its oldest segment.
            result.vanishedSegments += 1
            openSegment = nil
            segment = oldest ?? segment
            offset = 0
            return top()

        case (.readingChecked(let size, let capped), .read(let bytes)):
            guard bytes.count >= 4, bytes.starts(with: lastChecksum) else {
                return readWholeForResume(size: size, capped: capped)
            }
            return walk(Array(bytes.dropFirst(4)), size: size, capped: capped, decoder: &decoder)
        case (.readingChecked, .readFailed):
            return finish()
        case (.readingWhole(let size, let capped), .read(let bytes)):
            offset = resumeOffset(in: bytes)
            return readFresh(size: size, capped: capped)
        case (.readingWhole(let size, let capped), .readFailed):
            offset = min(offset, size)
            return readFresh(size: size, capped: capped)
        case (.readingFresh(let size, let capped), .read(let bytes)):
            return walk(bytes, size: size, capped: capped, decoder: &decoder)
        case (.readingFresh(let size, let capped), .readFailed):
            return afterReading(size: size, capped: capped, readAny: false, stoppedShort: false)

        case (.findingNext(let size, let stoppedShort), .nextFound(let next)):
            guard let next, next > segment else { return finish() }
            // Appends made since the segment was measured are read before
            // moving on.
            step = .measuringFinal(size: size, stoppedShort: stoppedShort, next: next)
            return .measure

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
            step = .opening
            return .open(segment: segment)
        }
        return measure()
    }

    private mutating func measure() -> Action {
        step = .measuring
        return .measure
    }

    private mutating func measured(size: Int, links: Int) -> Action {
        // A segment deleted by retention is still read to its end through
        // the open descriptor; one with no name left may also belong to a
        // log removed and started again.
        if links == 0 {
            step = .checkingRestart(size: size)
            return .checkRestart
        }
        return window(size: size)
    }

    /// This segment's size is final: whatever is left of it is torn.
    private mutating func moveOn(to next: UInt64, tornTail: Bool) -> Action {
        if tornTail { result.corruptRecordsSkipped += 1 }
        segment = next
        offset = 0
        return top()
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
        }
        if size < offset {
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
        result.shrunkSegments += 1
        lastChecksum = []
        step = .readingWhole(size: size, capped: capped)
        return .read(offset: 0, count: size)
    }

    private mutating func readFresh(size: Int, capped: Bool) -> Action {
        guard offset < size else {
            return afterReading(size: size, capped: capped, readAny: false, stoppedShort: false)
        }
        step = .readingFresh(size: size, capped: capped)
        return .read(offset: offset, count: size - offset)
    }

    /// Takes the records in `fresh`, the bytes from `offset` on.
    private mutating func walk(_ fresh: [UInt8], size measured: Int, capped: Bool, decoder: inout EnvelopeDecoder)
        -> Action
    {
        var size = measured
        var stoppedShort = false
        var readAny = false
        if !fresh.isEmpty {
            size = offset + fresh.count
            let start = offset
            let segment = segment
            var corrupt = 0
            // Moved out and back, so that appending copies neither.
            var records: [LogRecord] = []
            var sequences: [NotificationSender: UInt64] = [:]
            swap(&records, &result.records)
            swap(&sequences, &lastSequences)
            let walked = FileLog.walk(
                fresh,
                record: { position, length in
                    guard let (message, _) = try? decoder.decode(fresh, at: position) else {
                        corrupt += 1
                        return
                    }
                    let end = LogPosition(segment: segment, offset: start + position + length)
                    var record = LogRecord(message: message, end: end)
                    if let redeliverThrough, end <= redeliverThrough { record.message.isRedelivery = true }
                    sequences[message.sender] = message.sequence
                    records.append(record)
                },
                corrupt: { corrupt += 1 }
            )
            swap(&records, &result.records)
            swap(&sequences, &lastSequences)
            result.corruptRecordsSkipped += corrupt
            stoppedShort = walked.stoppedShort
            offset += walked.consumed
            budget -= walked.consumed
            readAny = walked.consumed > 0
            if walked.consumed >= 4 {
                lastChecksum = Array(fresh[(walked.consumed - 4)..<walked.consumed])
            }
        }
        return afterReading(size: size, capped: capped, readAny: readAny, stoppedShort: stoppedShort)
    }

    private mutating func afterReading(size: Int, capped: Bool, readAny: Bool, stoppedShort: Bool) -> Action {
        if capped {
            if readAny {
                result.hasMore = true
                return finish()
            }
            // Not one whole record in the slice: read this one whole.
            readWhole = true
            return top()
        }
        readWhole = false
        guard lookForNewSegment || !readAny || stoppedShort else { return finish() }
        step = .findingNext(size: size, stoppedShort: stoppedShort)
        return .findNext(after: segment)
    }

    /// Where to go on in a segment that shrank under this reader: at the
    /// first record it has not read. Every sender's records are in its
    /// sequence order, so a record is new when its sequence number is past
    /// the last one read from that sender; what was read stays read, what
    /// was written after the truncation is delivered.
    private func resumeOffset(in bytes: [UInt8]) -> Int {
        var decoder = EnvelopeDecoder()
        var resume: Int?
        var end = 0
        _ = FileLog.walk(bytes) { position, length in
            end = position + length
            guard resume == nil, let (message, _) = try? decoder.decode(bytes, at: position) else { return }
            if let last = lastSequences[message.sender], message.sequence <= last { return }
            resume = position
        }
        return resume ?? end
    }
}
