@_spi(TransportAuthoring) import TypedNotificationsCore
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
        /// Of ``missedAfterRecords``, those refused as over the center's payload limit.
        var refusedAfterRecords = 0
        var corruptRecordsSkipped = 0
        /// Records refused as over the center's payload limit.
        var oversizedRecords = 0
        /// The end of the last record skipped (refused or corrupt) after the
        /// last one in ``records``: a durable cursor may move past it once
        /// the records before it are handled, so a restart does not report
        /// it again.
        var skippedThrough: LogPosition?
        var shrunkSegments = 0
        var vanishedSegments = 0
        var refusedFiles = 0
    }

    enum Step {
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
    var segment: UInt64
    var offset: Int
    // The index of the next record; `nil` until the log tells it.
    var nextIndex: UInt64?
    // The identifier of the log being read; `nil` until a start mark tells it.
    var log: UInt64?
    // Restarted in `log` and looking for its oldest segment: segments of
    // other logs met on the way (left behind, or planted) are passed over.
    var seekingLog = false
    // Records ending at or before this may have been delivered by an earlier
    // run of this durable identity: they are marked as redeliveries. Of the
    // log it was saved in only.
    var redeliverThrough: LogPosition?
    // The segment the driver has open now, its size when last measured, and
    // whether it has a name left.
    var openSegment: UInt64?
    var fileSize = 0
    var unlinked = false
    // The checksum that ends the last record read from the open segment (the
    // 4 bytes before `offset`), and the last sequence number read from each
    // sender in it: to notice a truncation, and to find where to go on.
    var lastChecksum: [UInt8] = []
    var lastSequences: [NotificationSender: UInt64] = [:]
    // The open segment shrank under this reader (truncated, or emptied as a
    // rewrite by hand begins) and it has not decided where to go on yet:
    // where it was (`resumeFrom`: the position and the checksum that ended
    // the record before it) once the segment holds the same bytes there
    // again, else at the first record it has not read (`isNew`).
    var resumePending = false
    var resumeFrom: (offset: Int, checksum: [UInt8])?
    // The newest wall-clock time of the records read from the open segment:
    // a record of a sender not read from here is new if posted after it.
    var newestWallClock: Int64?
    let subscribedAt: Int64?
    // A stretch was skipped and the next record will tell whether it held
    // notifications (a gap in the indexes) or only a torn tail.
    var skippedStretch = false
    // Notifications lost before the next record read, and of those, the
    // ones refused as over the center's payload limit.
    var missed = 0
    var refused = 0

    var step = Step.idle
    var result = PassResult()
    var budget = 0
    var readWhole = false
    // Records this pass may still hand over (`nil`: no limit).
    var recordsLeft: Int?
    // This pass read the largest span a record can take and found none whole.
    var spanRead = false
    // This pass looked for a successor of a segment ending in something
    // unreadable (once a pass: a segment written to all the while is
    // looked at again on the next).
    var successorSought = false
    // A segment may have been created since this reader last looked for a
    // later one (and a new reader has never looked).
    var successorHint = true

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
    /// policy never drops what the log keeps.
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
        result.refusedAfterRecords = refused
        missed = 0
        refused = 0
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
            guard let next, next > segment else {
                // Looking for the oldest segment of the log it started again
                // in, and none is left past this number: that log may be
                // gone as well (removed and started again once more before
                // this reader opened any of it), leaving only another log's
                // segments, each passed over. The newest segment names the
                // log writers append to now.
                guard seekingLog else { return finish() }
                step = .checkingRestart(size: nil)
                return .checkRestart
            }
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
}
