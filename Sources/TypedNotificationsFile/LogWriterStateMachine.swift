@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// The decisions of one writer of a name's log (see ``LogFormat``), as a
/// state machine: events in (what a system call found), actions out (the
/// system call to make next). It performs no I/O, takes no lock and reads no
/// clock; ``LogAppender`` performs its actions under the log's lock, and the
/// simulation (`LogSimulationTests`) drives it through a model of the
/// directory that injects faults between any two of them.
///
/// Each append first looks at what other processes wrote since this writer
/// last looked, from where it knows the log is whole: a rollover mark there
/// is followed to the next segment (opened for appending, whoever created
/// it); a tail torn by a writer killed mid-append is zeroed and stepped over
/// to the next block, never cut off; fragments that are all there and fail
/// their checksums are damage, left as they are, and their indexes are never
/// used again; its own segment deleted under it (retention, `rm`) is left
/// for the newest one; a file under a segment's name that is not one of this
/// log's segments is never written. So a post either lands where readers
/// find it or fails. It never truncates what another writer wrote: only its
/// own write that failed (a full disk, RLIMIT_FSIZE) is cut back, so nothing
/// partial stays and nothing before it is touched.
struct LogWriterStateMachine {
    /// The system call the driver makes next, under the log's lock.
    enum Action {
        /// Status of the current segment: ``Event/measured(size:links:)`` or
        /// ``Event/failed``.
        case measure
        /// Was the whole log removed (its lock file too)? ``Event/answer(_:)``.
        case checkLogRemoved
        /// Read `count` bytes of the current segment at `offset`:
        /// ``Event/read(_:)`` or ``Event/failed``.
        case read(offset: Int, count: Int)
        /// The segment numbers present, oldest first: ``Event/segments(_:)``.
        case listSegments
        /// The newest segment number the log ever had: ``Event/newestCreated(_:)``.
        case readNewestCreated
        /// Does anything have segment `number`'s name? ``Event/answer(_:)``.
        case checkExists(UInt64)
        /// Is segment `number` a regular file? ``Event/answer(_:)``.
        case checkIsSegment(UInt64)
        /// Open segment `number` for appending and make it the current one:
        /// ``Event/done`` or ``Event/error(_:)``.
        case open(UInt64)
        /// Create segment `number` whole with `bytes` and make it the
        /// current one: ``Event/done`` or ``Event/error(_:)``.
        case create(UInt64, bytes: [UInt8])
        /// Write `bytes` at `offset` of the current segment: ``Event/done``
        /// or ``Event/writeFailed(_:)``.
        case write([UInt8], at: Int)
        /// Zero `count` bytes at `offset` of the current segment, a tail torn
        /// by a writer that was killed: ``Event/done`` or ``Event/writeFailed(_:)``.
        case repairTail(at: Int, count: Int)
        /// Cut the current segment back to `length`: ``Event/done``.
        case truncate(to: Int)
        /// The first ``LogFormat/startSize`` bytes of segment `number`:
        /// ``Event/read(_:)`` or ``Event/failed``.
        case readStart(UInt64)
        /// A random identifier for a new log: ``Event/identifier(_:)``.
        case newLogIdentifier
        /// Apply the retention policy, keeping segment `active` and newer: ``Event/done``.
        case applyRetention(keeping: UInt64)
        /// Open segment `number` (not the current one) and read it whole, if
        /// it is no larger than any segment can be: ``Event/read(_:)`` or
        /// ``Event/failed``. It becomes the inspected segment.
        case inspect(UInt64)
        /// Write `bytes` at `offset` of the inspected segment: ``Event/done``
        /// or ``Event/writeFailed(_:)``.
        case writeInspected([UInt8], at: Int)
        /// Frame the envelopes from the `first` given to ``startAppend(count:)``
        /// with ``frame(_:at:index:segmentSize:into:)`` and write them at
        /// `offset` of the current segment: ``Event/appended(count:end:)``,
        /// ``Event/segmentFull`` (none fits) or ``Event/writeFailed(_:)``.
        case append(first: Int, at: Int, index: UInt64)
        /// The append is over: this many were appended, from the first, and
        /// this is why the next was not (`nil`: all were, or the log was removed).
        case finish(appended: Int, failure: TypedNotificationError?)
    }

    /// What the system call of the last action found.
    enum Event {
        case done
        case failed
        case error(TypedNotificationError)
        case writeFailed(Errno)
        case answer(Bool)
        case measured(size: Int, links: Int)
        case read([UInt8])
        case segments([UInt64])
        case newestCreated(UInt64?)
        case identifier(UInt64)
        case appended(count: Int, end: Int)
        case segmentFull
    }

    let name: NotificationName
    let segmentSize: Int

    /// The number of the segment the driver holds open for appending.
    var current: UInt64?
    /// Where the next fragment goes in the current segment, and the
    /// segment's size when that was established; -1: not known yet.
    var validatedEnd = -1
    var knownSize = -1
    /// The index of the next record; `nil` until read from the log.
    var nextIndex: UInt64?
    /// The identifier of the log, carried into every segment this writer
    /// starts; `nil` until read from a segment's start mark.
    var log: UInt64?
    /// Whether the log was found removed (`rm -rf`): its segment and its
    /// lock file are no longer linked. A new writer must start it again.
    var isRemoved = false

    var total = 0
    var appended = 0
    var turns = 0
    var step = Step.idle

    init(name: NotificationName, segmentSize: Int) {
        self.name = name
        self.segmentSize = segmentSize
    }

    // MARK: - Appending

    /// Starts appending `count` envelopes, in order, each whole or not at
    /// all, and, while they fit in the segment, with one write (a group
    /// commit). The driver holds the log's lock until ``Action/finish(appended:failure:)``.
    mutating func startAppend(count: Int) -> Action {
        total = count
        appended = 0
        return nextTurn()
    }

    /// The action that follows `event`, the answer to the last action.
    mutating func receive(_ event: Event) -> Action {
        let previous = step
        step = .idle
        switch (previous, event) {
        case (.measuring, .measured(let size, let links)):
            return measured(size: size, links: links)
        case (.checkingRemoved(let size), .answer(let removed)):
            if removed {
                // The whole log was removed (its lock file too): not followed
                // by its rollover mark, which would start a segment of the
                // old log among the new one's; the transport starts it again.
                isRemoved = true
                return finish(nil)
            }
            return examine(size: size, links: 0)
        case (.examining(let size, let links, let from), .read(let bytes)):
            return examined(bytes, from: from, size: size, links: links)
        case (
            .examiningSuccessor(let size, let links, let bytes, let from, let walkedEnd, let stop), .segments(let list)
        ):
            if let later = list.last, let current, later > current, let index = nextIndex {
                // Something unreadable ends a segment that has a successor:
                // its rollover mark, damaged (a writer writes the mark before
                // it creates the next segment). Closed: the log goes on in
                // the newest segment, never here, behind its readers.
                return follow(later, index: index)
            }
            return endOfTail(bytes, from: from, walkedEnd: walkedEnd, stop: stop, size: size, links: links)
        case (.repairing(let size, let links, let end), .done):
            return tailFound(end: end, size: size, links: links)
        case (.checkingClosed, .newestCreated(let created)):
            guard let created, let current, created > current else { return appendHere() }
            step = .listingClosed(created: created)
            return .listSegments
        case (.listingClosed(let created), .segments(let list)):
            guard list.last == current else { return appendHere() }
            // The log had a later segment, removed since (rm of the newest),
            // and this one's rollover mark is unreadable: it is closed all
            // the same. Appending here would fork the log behind a writer
            // that went on after the removed one, and behind readers waiting
            // there; it is closed again, with a mark to a new segment after
            // every number used.
            return roll(after: created)
        case (.appending, .appended(let count, let end)):
            validatedEnd = end
            knownSize = end
            nextIndex = (nextIndex ?? 0) &+ UInt64(count)
            appended += count
            return nextTurn()
        case (.appending, .segmentFull):
            return roll(after: nil)
        case (.appending(let start), .writeFailed(let error)):
            // Cut back whatever part was written: no partial record stays.
            step = .cuttingBack(error)
            return .truncate(to: start)
        case (.cuttingBack(let error), _):
            return finish(Self.writeFailure(error, name: name))
        case (.listingNewest, .segments(let list)):
            guard let newest = list.last else { return findNumber(after: 0, then: .create(index: nextIndex)) }
            // A segment this user may not write (mode 0666, another owner)
            // is refused with an error that names it.
            return open(newest)
        case (.opening(let number), .done):
            current = number
            validatedEnd = -1
            knownSize = -1
            nextIndex = nil
            step = .readingIdentifier
            return .read(offset: 0, count: LogFormat.startSize)
        case (.readingIdentifier, .read(let bytes)):
            if let found = LogFormat.logIdentifier(inStart: bytes) { log = found }
            return look()
        case (.readingIdentifier, _):
            return look()
        case (.readingNewestCreated(let number, let then), .newestCreated(let created)):
            // A number that is no longer in the log, or a nonsense one
            // planted in the lock file, is not followed more than a few
            // thousand on.
            let newest = created.map { $0 >= number && $0 - number < 4_096 ? $0 : number } ?? number
            step = .probing(next: newest + 1, limit: newest + 64, then: then)
            return .checkExists(newest + 1)
        case (.probing(let next, let limit, let then), .answer(let exists)):
            guard exists else { return numberFound(next, then: then) }
            // A number a planted file (a FIFO, a link) holds is skipped, never opened.
            guard next + 1 < limit else {
                return finish(
                    TypedNotificationError(
                        code: .insecureDirectory,
                        message: "the log of \(name) is crowded with files that are not segments; remove them"))
            }
            step = .probing(next: next + 1, limit: limit, then: then)
            return .checkExists(next + 1)
        case (.listingForIdentifier(let number, let index, let then), .segments(let list)):
            return identifierFrom(candidates: list.reversed(), number: number, index: index, then: then)
        case (.readingIdentifierOf(let candidates, let number, let index, let then), let event):
            if case .read(let bytes) = event, let found = LogFormat.logIdentifier(inStart: bytes) {
                log = found
                return create(number, index: index, log: found, then: then)
            }
            return identifierFrom(candidates: candidates, number: number, index: index, then: then)
        case (.awaitingIdentifier(let number, let index, let then), .identifier(let identifier)):
            if index != nil { log = identifier }
            return create(number, index: index, log: identifier, then: then)
        case (.creating(let number, let bytes, let index, let log, let then), .done):
            current = number
            self.log = log
            validatedEnd = bytes
            knownSize = bytes
            nextIndex = index
            switch then {
            case .look: return look()
            case .retain(let active):
                step = .retaining
                return .applyRetention(keeping: active)
            }
        case (.retaining, _):
            return look()
        case (.listingToStepOver(let next, let index, let junk), .segments(let list)):
            return inspectNext(candidates: list.filter { $0 < junk }.reversed(), next: next, index: index)
        case (.inspecting(let candidates, let next, let index), let event):
            guard case .read(let bytes) = event else {
                return inspectNext(candidates: candidates, next: next, index: index)
            }
            return inspected(bytes, candidates: candidates, next: next, index: index)
        case (.zeroingInspected(let mark, let at, let next, let index), _):
            step = .markingInspected(next: next, index: index)
            return .writeInspected(mark, at: at)
        case (.markingInspected(let next, let index), _):
            return createSegment(next, index: index)
        case (.checkingFollowed(let number, let index), .answer(let exists)):
            if exists {
                step = .checkingFollowedKind(number, index: index)
                return .checkIsSegment(number)
            }
            step = .listingFollowed(number, index: index)
            return .listSegments
        case (.listingFollowed(let number, let index), .segments(let list)):
            if let newest = list.last, newest > number {
                current = nil
                return open(newest)
            }
            return findNumber(after: number, then: .create(index: index))
        case (.checkingFollowedKind(let number, let index), .answer(let isSegment)):
            // Something planted under the number the mark names is never opened.
            guard isSegment else { return findNumber(after: number, then: .create(index: index)) }
            // Its index is read from it: others may have appended to it
            // since the mark was written.
            return open(number)
        case (.listingAfterRemoved(let removed), .segments(let list)):
            if let later = list.first(where: { $0 > removed }) { return markRemoved(next: later, later: true) }
            return findNumber(after: removed, then: .moveOn(removed: removed))
        case (.markingRemoved(let next, let later), _):
            // Best effort: the file is gone from the directory either way.
            return removedMarked(next: next, later: later)
        case (.writingRollover(let next, let index, _), .done):
            return createSegment(next, index: index, then: .retain(keeping: next))
        case (.writingRollover(_, _, let at), .writeFailed(let error)):
            step = .cuttingBackMark(error)
            return .truncate(to: at)
        case (.cuttingBackMark(let error), _):
            return finish(Self.writeFailure(error, name: name))
        case (_, .error(let error)):
            return finish(error)
        case (_, .writeFailed(let error)):
            return finish(Self.writeFailure(error, name: name))
        case (.measuring, _):
            return finish(
                TypedNotificationError(code: .transportFailure, message: "could not inspect the log of \(name)"))
        case (.examining, _):
            return finish(
                TypedNotificationError(code: .transportFailure, message: "could not read the log of \(name)"))
        default:
            return finish(
                TypedNotificationError(
                    code: .transportFailure, message: "the writer of the log of \(name) lost its place"))
        }
    }

    /// The top of the append loop: done, or find the tail and append there.
    mutating func nextTurn() -> Action {
        guard appended < total else { return finish(nil) }
        turns = 0
        return look()
    }

    /// Looks at the current segment again: each look follows one rollover,
    /// removal or repair; more than a few thousand means the log is being
    /// rolled faster than it can be followed.
    mutating func look() -> Action {
        turns += 1
        guard turns <= 4_096 else {
            return finish(
                TypedNotificationError(
                    code: .transportFailure, message: "the log of \(name) changes faster than a writer can follow it"))
        }
        guard current != nil else {
            step = .listingNewest
            return .listSegments
        }
        step = .measuring
        return .measure
    }

    mutating func measured(size: Int, links: Int) -> Action {
        if links > 0, size == knownSize, validatedEnd >= 0, nextIndex != nil {
            // Cheap when nothing changed: one status.
            return appendHere()
        }
        if links == 0 {
            step = .checkingRemoved(size: size)
            return .checkLogRemoved
        }
        return examine(size: size, links: links)
    }

    /// Reads what the segment holds past the validated end (or from its last
    /// block, when the end is not known).
    mutating func examine(size: Int, links: Int) -> Action {
        guard let current else { return look() }
        if size > LogFormat.maximumSegmentBytes {
            // Grown past what any segment can be (a sparse file planted or
            // truncated up by hand): never read or appended to again.
            return stepOver(current)
        }
        let from = validatedEnd >= 0 && validatedEnd <= size ? validatedEnd : LogFormat.blockStart(of: max(0, size - 1))
        return read(from: from, size: size, links: links)
    }

    mutating func read(from: Int, size: Int, links: Int) -> Action {
        step = .examining(size: size, links: links, from: from)
        return .read(offset: from, count: size - from)
    }

    /// Walks what was read, learning the next record index, and decides
    /// where the log goes on.
    mutating func examined(_ bytes: [UInt8], from: Int, size: Int, links: Int) -> Action {
        guard let current else { return look() }
        var rollover: (next: UInt64, index: UInt64)?
        var learned: UInt64?
        let walked = LogScanner.walk(bytes, base: from, fileSize: size) { item in
            if case .rollover(let next, let index, _) = item { rollover = (next, index) }
            learned = LogScanner.index(after: item, following: learned)
        }
        if let learned { nextIndex = learned }
        if let rollover { return follow(rollover.next, index: rollover.index) }
        if walked.stop == .formatOne || size == 0 {
            // Format 1, or an empty file: every segment is created whole with
            // its start mark, so an empty one is none of this log's.
            return stepOver(current)
        }
        if nextIndex == nil && from > 0 {
            // Nothing in the last block told the index: read the segment from
            // its start (linear, once per writer).
            return read(from: 0, size: size, links: links)
        }
        // Neither a start mark nor a record: not a segment of this log.
        guard nextIndex != nil else { return stepOver(current) }
        if walked.end < size {
            step = .examiningSuccessor(
                size: size, links: links, bytes: bytes, from: from, walkedEnd: walked.end, stop: walked.stop)
            return .listSegments
        }
        return endOfTail(bytes, from: from, walkedEnd: walked.end, stop: walked.stop, size: size, links: links)
    }

    /// Where the next fragment goes, past damage or a torn tail.
    mutating func endOfTail(
        _ bytes: [UInt8], from: Int, walkedEnd: Int, stop: LogScanner.Stop, size: Int, links: Int
    ) -> Action {
        if walkedEnd < size, let damaged = Self.damagedTail(bytes, from: walkedEnd - from, base: from) {
            // The log ends in fragments that are all there and fail their
            // checksums: damaged, not torn (a torn write ends short). Their
            // posts may have returned, so their indexes are not used again:
            // the next record's tells readers they were lost (the walk
            // counted them). Left as they are; a torn tail after them is
            // zeroed (see below); the log goes on in the next block.
            let end = LogFormat.blockEnd(of: size - 1)
            guard damaged < size else { return tailFound(end: end, size: size, links: links) }
            step = .repairing(size: size, links: links, end: end)
            return .repairTail(at: damaged, count: size - damaged)
        }
        if stop == .waiting, Self.isDamagedHeader(bytes, at: walkedEnd - from, base: from), let index = nextIndex {
            // A whole header that fails its checksum, with nothing readable
            // after it: damage, not a tear. A writer killed mid-append leaves
            // a prefix of what it wrote, and a prefix that holds a header's
            // 24 bytes holds a header that checks. The record it began may
            // have been posted and returned, so its index is not used again:
            // the next record's tells readers one was lost. Left as it is;
            // the log goes on in the next block.
            nextIndex = index &+ 1
            return tailFound(end: LogFormat.blockEnd(of: size - 1), size: size, links: links)
        }
        if stop == .waiting {
            // A torn tail: the writer that left it was killed (this one
            // holds the lock). It is zeroed, so that the hole after it can
            // never complete it (a torn rollover mark whose missing bytes are
            // zeros would read as whole), and the log goes on in the next
            // block, where readers find it; nothing is cut off.
            step = .repairing(size: size, links: links, end: LogFormat.blockEnd(of: max(walkedEnd, size - 1)))
            return .repairTail(at: walkedEnd, count: size - walkedEnd)
        }
        return tailFound(end: walkedEnd, size: size, links: links)
    }

    mutating func tailFound(end: Int, size: Int, links: Int) -> Action {
        guard let current else { return look() }
        if links == 0 {
            // This segment removed under this writer without a rollover mark
            // (rm; the whole log was ruled out): the log goes on in the
            // segment another writer started after it, or else in a new one,
            // and a mark in the removed one tells readers that still hold it where.
            step = .listingAfterRemoved(current)
            return .listSegments
        }
        validatedEnd = end
        knownSize = size
        step = .checkingClosed
        return .readNewestCreated
    }

    /// Appends at the validated end of the current segment.
    mutating func appendHere() -> Action {
        guard let index = nextIndex else { return finish(nil) }
        step = .appending(start: validatedEnd)
        return .append(first: appended, at: validatedEnd, index: index)
    }
}
