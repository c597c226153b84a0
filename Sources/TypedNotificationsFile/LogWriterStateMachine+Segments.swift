@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// The writer machine's steps, and those across segments: stepping over, following,
// rolling, creating.
extension LogWriterStateMachine {
    // MARK: - Steps

    /// What to do once a new segment number is found.
    enum AfterNumber {
        case create(index: UInt64?)
        case stepOver(index: UInt64?, junk: UInt64)
        case moveOn(removed: UInt64)
        case roll(index: UInt64)
    }

    /// What to do once a segment is created.
    enum AfterCreate {
        case look
        case retain(keeping: UInt64)
    }

    enum Step {
        case idle
        case measuring
        case checkingRemoved(size: Int)
        case examining(size: Int, links: Int, from: Int)
        case examiningSuccessor(size: Int, links: Int, bytes: [UInt8], from: Int, walkedEnd: Int, stop: LogScanner.Stop)
        case repairing(size: Int, links: Int, end: Int)
        case checkingClosed
        case listingClosed(created: UInt64)
        case appending(start: Int)
        case cuttingBack(Errno)
        case listingNewest
        case opening(UInt64)
        case readingIdentifier
        case readingNewestCreated(after: UInt64, then: AfterNumber)
        case probing(next: UInt64, limit: UInt64, then: AfterNumber)
        case listingForIdentifier(number: UInt64, index: UInt64, then: AfterCreate)
        case readingIdentifierOf(candidates: [UInt64], number: UInt64, index: UInt64, then: AfterCreate)
        case awaitingIdentifier(number: UInt64, index: UInt64?, then: AfterCreate)
        case creating(UInt64, bytes: Int, index: UInt64, log: UInt64, then: AfterCreate)
        case retaining
        case listingToStepOver(next: UInt64, index: UInt64?, junk: UInt64)
        case inspecting(candidates: [UInt64], next: UInt64, index: UInt64?)
        case zeroingInspected(mark: [UInt8], at: Int, next: UInt64, index: UInt64)
        case markingInspected(next: UInt64, index: UInt64)
        case checkingFollowed(UInt64, index: UInt64)
        case checkingFollowedKind(UInt64, index: UInt64)
        case listingFollowed(UInt64, index: UInt64)
        case listingAfterRemoved(UInt64)
        case markingRemoved(next: UInt64, later: Bool)
        case writingRollover(next: UInt64, index: UInt64, at: Int)
        case cuttingBackMark(Errno)
    }

    // MARK: - Moving on

    /// `junk` is under a segment's name but not one of this log's segments (a
    /// file of format 1, bytes planted there, a sparse file larger than any
    /// segment): it is never read or appended to. The log goes on in a new
    /// segment after it, and the newest segment of this log before it, if
    /// not closed yet, gets a rollover mark to the new one, so its readers
    /// and long-lived writers follow there instead of waiting at its end.
    mutating func stepOver(_ junk: UInt64) -> Action {
        findNumber(after: junk, then: .stepOver(index: nextIndex, junk: junk))
    }

    mutating func inspectNext(candidates: [UInt64], next: UInt64, index: UInt64?) -> Action {
        guard let number = candidates.first else { return createSegment(next, index: index) }
        step = .inspecting(candidates: Array(candidates.dropFirst()), next: next, index: index)
        return .inspect(number)
    }

    mutating func inspected(_ bytes: [UInt8], candidates: [UInt64], next: UInt64, index: UInt64?) -> Action {
        var learned: UInt64?
        var closed = false
        let walked = LogScanner.walk(bytes, base: 0, fileSize: bytes.count) { item in
            if case .rollover = item { closed = true }
            learned = LogScanner.index(after: item, following: learned)
        }
        guard walked.stop != .formatOne, let found = learned else {
            return inspectNext(candidates: candidates, next: next, index: index)
        }
        guard !closed else { return createSegment(next, index: found) }
        var mark: [UInt8] = []
        if walked.stop == .waiting {
            // A torn tail, zeroed first (see endOfTail).
            let end = LogFormat.blockEnd(of: max(walked.end, bytes.count - 1))
            LogFormat.appendRollover(next: next, index: found, at: end, to: &mark)
            step = .zeroingInspected(mark: mark, at: end, next: next, index: found)
            return .writeInspected([UInt8](repeating: 0, count: bytes.count - walked.end), at: walked.end)
        }
        LogFormat.appendRollover(next: next, index: found, at: walked.end, to: &mark)
        step = .markingInspected(next: next, index: found)
        return .writeInspected(mark, at: walked.end)
    }

    /// Opens segment `number` for appending, or, when it is missing, the
    /// newest segment after it; with none, starts one after it (a writer
    /// that rolled the log was killed before it could create the segment, or
    /// someone removed it). A number is never used twice, so a reader still
    /// holding a removed segment never mistakes its successor for it.
    mutating func follow(_ number: UInt64, index: UInt64) -> Action {
        step = .checkingFollowed(number, index: index)
        return .checkExists(number)
    }

    mutating func markRemoved(next: UInt64, later: Bool) -> Action {
        guard let index = nextIndex, validatedEnd >= 0 else { return removedMarked(next: next, later: later) }
        var mark: [UInt8] = []
        LogFormat.appendRollover(next: next, index: index, at: validatedEnd, to: &mark)
        step = .markingRemoved(next: next, later: later)
        return .write(mark, at: validatedEnd)
    }

    mutating func removedMarked(next: UInt64, later: Bool) -> Action {
        guard later else { return createSegment(next, index: nextIndex) }
        current = nil
        return look()
    }

    /// Makes `number` the current segment; where it ends, and its next
    /// index, are read from it (others may have appended to it).
    mutating func open(_ number: UInt64) -> Action {
        step = .opening(number)
        return .open(number)
    }

    /// Closes the current segment with a rollover mark, starts the next
    /// (after `number`, the current segment's by default) and applies the
    /// retention policy.
    mutating func roll(after number: UInt64?) -> Action {
        guard let current, let index = nextIndex else { return look() }
        return findNumber(after: number ?? current, then: .roll(index: index))
    }

    // MARK: - New segments

    /// Finds the first number after `number`, and after every number the log
    /// ever had, that nothing occupies.
    mutating func findNumber(after number: UInt64, then: AfterNumber) -> Action {
        step = .readingNewestCreated(after: number, then: then)
        return .readNewestCreated
    }

    mutating func numberFound(_ next: UInt64, then: AfterNumber) -> Action {
        switch then {
        case .create(let index):
            return createSegment(next, index: index)
        case .stepOver(let index, let junk):
            step = .listingToStepOver(next: next, index: index, junk: junk)
            return .listSegments
        case .moveOn:
            return markRemoved(next: next, later: false)
        case .roll(let index):
            var mark: [UInt8] = []
            LogFormat.appendRollover(next: next, index: index, at: validatedEnd, to: &mark)
            step = .writingRollover(next: next, index: index, at: validatedEnd)
            return .write(mark, at: validatedEnd)
        }
    }

    /// Creates segment `number` whole, with its start mark. With no `index`
    /// (every segment removed, and this writer never read the log) how many
    /// records the log held cannot be known, so the segment starts a new
    /// log, with a new identifier, at index 0: its readers go on in it as in
    /// a log removed and made again, never counting a false gap.
    mutating func createSegment(_ number: UInt64, index: UInt64?, then: AfterCreate = .look) -> Action {
        guard let index else {
            step = .awaitingIdentifier(number: number, index: nil, then: then)
            return .newLogIdentifier
        }
        if let log { return create(number, index: index, log: log, then: then) }
        // The log's identifier: the newest segment's whose start mark is
        // whole, else a new one.
        step = .listingForIdentifier(number: number, index: index, then: then)
        return .listSegments
    }

    mutating func identifierFrom(
        candidates: [UInt64], number: UInt64, index: UInt64, then: AfterCreate
    ) -> Action {
        guard let candidate = candidates.first else {
            step = .awaitingIdentifier(number: number, index: index, then: then)
            return .newLogIdentifier
        }
        step = .readingIdentifierOf(
            candidates: Array(candidates.dropFirst()), number: number, index: index, then: then)
        return .readStart(candidate)
    }

    mutating func create(_ number: UInt64, index: UInt64?, log: UInt64, then: AfterCreate) -> Action {
        let start = LogFormat.segmentStart(index: index ?? 0, log: log)
        step = .creating(number, bytes: start.count, index: index ?? 0, log: log, then: then)
        return .create(number, bytes: start)
    }

    mutating func finish(_ failure: TypedNotificationError?) -> Action {
        step = .idle
        return .finish(appended: appended, failure: failure)
    }
}
