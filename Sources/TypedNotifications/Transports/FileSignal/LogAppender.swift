import NotificationPlatform

/// Appends envelopes to one name's log (see ``LogFormat``), serialized with
/// every other process by an exclusive `flock` on the name's lock file.
///
/// Under the lock it first looks at what other processes wrote since it last
/// looked, from where it knows the log is whole: a rollover mark there is
/// followed to the next segment (opened for appending, whoever created it);
/// a tail torn by a writer killed mid-append is stepped over to the next
/// block, never cut off; its own segment deleted under it (retention, `rm`)
/// is left for the newest one. So a post either lands where readers find it
/// or throws. It never truncates what another writer wrote: only its own
/// write that failed (a full disk, RLIMIT_FSIZE) is cut back, so nothing
/// partial stays and nothing before it is touched.
final class LogAppender: @unchecked Sendable {
    // Sendable: one thread uses an appender at a time. It lives either in
    // its transport's table of idle appenders, touched only under that
    // table's lock, or in the hands of the one send that took it out of the
    // table (under the same lock) and puts it back when done; a concurrent
    // send of the same name finds no appender there and opens its own.
    private let files: any LogFiles
    private let name: NotificationName
    private let segmentSize: Int
    private let counters: FileSignalCounters
    private var current: OpenSegment?
    // Where the next fragment goes in the current segment, and the
    // segment's size when that was established; -1: not known yet.
    private var validatedEnd = -1
    private var knownSize = -1
    // The index of the next record; `nil` until read from the log.
    private var nextIndex: UInt64?
    // The identifier of the log, carried into every segment this appender
    // starts; `nil` until read from a segment's start mark.
    private var log: UInt64?
    // The bytes of one write: fragments, padding, a rollover mark.
    private var batch: [UInt8] = []
    private static let keptBatchCapacity = 256 * 1024

    private struct OpenSegment {
        let file: any LogSegmentFile
        let number: UInt64
    }

    /// An appender of `name`'s log in a shared directory.
    convenience init(
        root: String,
        name: NotificationName,
        configuration: FileSignalConfiguration,
        counters: FileSignalCounters
    ) throws(TypedNotificationError) {
        self.init(
            files: try SystemLogFiles(root: root, name: name, configuration: configuration, counters: counters),
            name: name, segmentSize: configuration.segmentSize, counters: counters)
    }

    /// An appender of the log in `files`.
    init(files: any LogFiles, name: NotificationName, segmentSize: Int, counters: FileSignalCounters) {
        self.files = files
        self.name = name
        self.segmentSize = segmentSize
        self.counters = counters
    }

    /// Whether the log this appender holds was found removed (`rm -rf`):
    /// its segment and its lock file are no longer linked. Appending through
    /// it would write into deleted files; the transport starts a new appender.
    private(set) var isRemoved = false

    /// Appends envelopes in order, each whole or not at all, under one lock
    /// and, while they fit in the segment, with one write: a group commit.
    /// Returns how many were appended, from the first, and why the next was
    /// not. Stops early, with no failure, and sets ``isRemoved`` when the log
    /// was removed.
    func append<Envelopes: RandomAccessCollection<EncodedNotification>>(_ envelopes: Envelopes) -> (
        appended: Int, failure: TypedNotificationError?
    ) where Envelopes.Index == Int {
        do throws(TypedNotificationError) {
            try files.lock()
        } catch {
            return (0, error)
        }
        defer { files.unlock() }
        var appended = 0
        let first = envelopes.startIndex
        while appended < envelopes.count {
            do throws(TypedNotificationError) {
                try findTail()
            } catch {
                return (appended, error)
            }
            if isRemoved { return (appended, nil) }
            guard let segment = current, let index = nextIndex else { break }
            // As many as fit in this segment go out in one write; a record
            // larger than a segment goes alone into a segment of its own.
            let start = validatedEnd
            var end = start
            var count = 0
            batch.removeAll(keepingCapacity: true)
            while appended + count < envelopes.count {
                let envelope = envelopes[first + appended + count]
                let mark = batch.count
                let after = envelope.storage.withUnsafeBytes { raw in
                    LogFormat.appendRecord(
                        UnsafeRawBufferPointer(rebasing: raw[envelope.envelopeRange]),
                        index: index &+ UInt64(count), at: end, to: &batch)
                }
                let holdsRecords = end > LogFormat.startSize
                if after > segmentSize && (count > 0 || holdsRecords) {
                    batch.removeSubrange(mark...)
                    break
                }
                end = after
                count += 1
            }
            guard count > 0 else {
                do throws(TypedNotificationError) {
                    try roll()
                } catch {
                    return (appended, error)
                }
                continue
            }
            let result = segment.file.write(batch, at: start)
            if batch.capacity > Self.keptBatchCapacity { batch = [] }
            if case .failure(let error) = result {
                // Cut back whatever part was written: no partial record stays.
                segment.file.truncate(to: start)
                counters.failedAppends.add(1, ordering: .relaxed)
                return (appended, Self.writeFailure(error, name: name))
            }
            validatedEnd = end
            knownSize = end
            nextIndex = index &+ UInt64(count)
            appended += count
            counters.appended.add(count, ordering: .relaxed)
            counters.appendWrites.add(1, ordering: .relaxed)
        }
        return (appended, nil)
    }

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

    // MARK: - Finding the tail, under the lock

    /// Makes ``current`` the log's newest segment and ``validatedEnd`` the end
    /// of what it holds, following what other processes did since the last
    /// look. Cheap when nothing changed: one `fstat`.
    private func findTail() throws(TypedNotificationError) {
        if current == nil { try openNewest() }
        // Each turn follows one rollover or one removal; more than a few
        // thousand means the log is being rolled faster than it can be followed.
        for _ in 0..<4_096 {
            guard let segment = current else { return }
            guard let info = segment.file.status() else {
                throw TypedNotificationError(code: .transportFailure, message: "could not inspect the log of \(name)")
            }
            if info.links > 0, info.size == knownSize, validatedEnd >= 0, nextIndex != nil { return }
            if info.links == 0, files.isRemoved {
                // The whole log was removed (its lock file too): not followed
                // by its rollover mark, which would start a segment of the
                // old log among the new one's; the transport starts it again.
                isRemoved = true
                return
            }
            if info.size > LogFormat.maximumSegmentBytes {
                // Grown past what any segment can be (a sparse file planted
                // or truncated up by hand): never read or appended to again.
                try stepOver(segment)
                continue
            }
            let (rollover, tailEnd) = try examine(segment, size: info.size)
            if tailEnd < 0 {
                try stepOver(segment)
                continue
            }
            if let rollover {
                try follow(rollover.next, index: rollover.index)
                continue
            }
            if info.links == 0 {
                // This segment removed under this appender without a
                // rollover mark (rm; the whole log was ruled out above).
                try moveOnFromRemoved(segment)
                continue
            }
            validatedEnd = tailEnd
            knownSize = info.size
            if let created = files.newestCreated(), created > segment.number,
                files.segments().last == segment.number
            {
                // The log had a later segment, removed since (rm of the
                // newest), and this one's rollover mark is unreadable: it
                // is closed all the same. Appending here would fork the
                // log behind a writer that went on after the removed one,
                // and behind readers waiting there; it is closed again,
                // with a mark to a new segment after every number used.
                try roll(after: created)
            }
            return
        }
        throw TypedNotificationError(
            code: .transportFailure, message: "the log of \(name) changes faster than a writer can follow it")
    }

    /// Reads what the segment holds past the validated end (or from its last
    /// block, when the end is not known) and returns its rollover mark, if
    /// any, and where the next fragment goes (-1: the segment is not one of
    /// this log's, see ``stepOver(_:)``). Learns the next record index.
    private func examine(_ segment: OpenSegment, size: Int) throws(TypedNotificationError) -> (
        rollover: (next: UInt64, index: UInt64)?, end: Int
    ) {
        var from = validatedEnd >= 0 && validatedEnd <= size ? validatedEnd : LogFormat.blockStart(of: max(0, size - 1))
        while true {
            guard let bytes = segment.file.read(at: from, count: size - from) else {
                throw TypedNotificationError(code: .transportFailure, message: "could not read the log of \(name)")
            }
            var rollover: (next: UInt64, index: UInt64)?
            var learned: UInt64?
            let walked = LogScanner.walk(bytes, base: from, fileSize: size) { item in
                if case .rollover(let next, let index, _) = item { rollover = (next, index) }
                learned = LogScanner.index(after: item, following: learned)
            }
            if let learned { nextIndex = learned }
            if let rollover { return (rollover, walked.end) }
            if walked.stop == .formatOne || size == 0 {
                // Format 1, or an empty file: every segment is created whole
                // with its start mark, so an empty one is none of this log's.
                return (nil, -1)
            }
            if nextIndex == nil && from > 0 {
                // Nothing in the last block told the index: read the segment
                // from its start (linear, once per appender).
                from = 0
                continue
            }
            // Neither a start mark nor a record: not a segment of this log.
            guard let index = nextIndex else { return (nil, -1) }
            if walked.end < size, let later = files.segments().last, later > segment.number {
                // Something unreadable ends a segment that has a successor:
                // its rollover mark, damaged (a writer writes the mark before
                // it creates the next segment). Closed: the log goes on in
                // the newest segment, never here, behind its readers.
                return ((later, index), walked.end)
            }
            if walked.end < size, let damaged = Self.damagedTail(bytes, from: walked.end - from, base: from) {
                // The log ends in fragments that are all there and fail
                // their checksums: damaged, not torn (a torn write ends
                // short). Their posts may have returned, so their indexes
                // are not used again: the next record's tells readers they
                // were lost (the walk counted them). Left as they are; a
                // torn tail after them is zeroed (see below); the log goes
                // on in the next block.
                nextIndex = index
                if damaged.end < size {
                    let zeros = [UInt8](repeating: 0, count: size - damaged.end)
                    if case .failure(let error) = segment.file.write(zeros, at: damaged.end) {
                        throw Self.writeFailure(error, name: name)
                    }
                    counters.repairedTails.add(1, ordering: .relaxed)
                }
                return (nil, LogFormat.blockEnd(of: size - 1))
            }
            if walked.stop == .waiting {
                // A torn tail: the writer that left it was killed (this one
                // holds the lock). It is zeroed, so that the hole after it
                // can never complete it (a torn rollover mark whose missing
                // bytes are zeros would read as whole), and the log goes on
                // in the next block, where readers find it; nothing is cut off.
                let zeros = [UInt8](repeating: 0, count: size - walked.end)
                if case .failure(let error) = segment.file.write(zeros, at: walked.end) {
                    throw Self.writeFailure(error, name: name)
                }
                counters.repairedTails.add(1, ordering: .relaxed)
                return (nil, LogFormat.blockEnd(of: max(walked.end, size - 1)))
            }
            return (nil, walked.end)
        }
    }

    /// The highest index among the fragments from `position` of `bytes`
    /// (segment offset `base` + `position`) on, one after another, whose
    /// headers are valid and whose data, all there, fail their checksums,
    /// and the segment offset after them; `nil` when the first is not one.
    private static func damagedTail(_ bytes: [UInt8], from start: Int, base: Int) -> (index: UInt64, end: Int)? {
        var highest: UInt64?
        var position = start
        bytes.withUnsafeBytes { raw in
            while position >= 0, position + LogFormat.headerSize <= raw.count {
                guard let header = LogFormat.header(in: raw, at: position, base: base) else { return }
                let dataStart = position + LogFormat.headerSize
                guard dataStart + header.length <= raw.count else { return }
                let data = UnsafeRawBufferPointer(rebasing: raw[dataStart..<(dataStart + header.length)])
                guard CRC32C.checksum(data) != header.dataChecksum else { return }
                highest = max(highest ?? header.index, header.index)
                position = dataStart + header.length
                // Zeros a writer padded the block's end with.
                let left = LogFormat.blockEnd(of: base + position) - (base + position)
                if left < LogFormat.headerSize + 1 { position += left }
            }
        }
        return highest.map { ($0, base + min(position, bytes.count)) }
    }

    /// `junk` is under a segment's name but not one of this log's segments (a
    /// file of format 1, bytes planted there, a sparse file larger than any
    /// segment): it is never read or appended to. The log goes on in a new
    /// segment after it, and the newest segment of this log before it, if
    /// not closed yet, gets a rollover mark to the new one, so its readers
    /// and long-lived writers follow there instead of waiting at its end.
    private func stepOver(_ junk: OpenSegment) throws(TypedNotificationError) {
        let next = try freeNumber(after: junk.number)
        var index = nextIndex
        for number in files.segments().reversed() where number < junk.number {
            guard let file = try? files.open(number), let info = file.status(),
                info.size <= LogFormat.maximumSegmentBytes, let bytes = file.read(at: 0, count: info.size)
            else { continue }
            var learned: UInt64?
            var closed = false
            let walked = LogScanner.walk(bytes, base: 0, fileSize: info.size) { item in
                if case .rollover = item { closed = true }
                learned = LogScanner.index(after: item, following: learned)
            }
            guard walked.stop != .formatOne, let found = learned else { continue }
            index = found
            if !closed {
                var end = walked.end
                if walked.stop == .waiting {
                    // A torn tail, zeroed first (see examine).
                    _ = file.write([UInt8](repeating: 0, count: info.size - walked.end), at: walked.end)
                    end = LogFormat.blockEnd(of: max(walked.end, info.size - 1))
                }
                var mark: [UInt8] = []
                LogFormat.appendRollover(next: next, index: found, at: end, to: &mark)
                _ = file.write(mark, at: end)
            }
            break
        }
        try createSegment(next, index: index)
    }

    /// Opens segment `number` for appending, or, when it is missing, the
    /// newest segment after it; with none, starts one after it (a writer
    /// that rolled the log was killed before it could create the segment, or
    /// someone removed it). A number is never used twice, so a reader still
    /// holding a removed segment never mistakes its successor for it.
    private func follow(_ number: UInt64, index: UInt64) throws(TypedNotificationError) {
        if !files.exists(number) {
            if let newest = files.segments().last, newest > number {
                current = nil
                try openNewest()
                return
            }
            try createSegment(try freeNumber(after: number), index: index)
            return
        }
        guard files.isSegment(number) else {
            // Something planted under the number the mark names.
            try createSegment(try freeNumber(after: number), index: index)
            return
        }
        // Its index is read from it: others may have appended to it since
        // the mark was written.
        use(OpenSegment(file: try files.open(number), number: number))
    }

    /// The current segment was removed without a rollover mark: the log goes
    /// on in the segment another writer started after it, or else in a new
    /// one, and a mark in the removed one tells readers that still hold it where.
    private func moveOnFromRemoved(_ segment: OpenSegment) throws(TypedNotificationError) {
        let later = files.segments().first { $0 > segment.number }
        let next: UInt64
        if let later { next = later } else { next = try freeNumber(after: segment.number) }
        if let index = nextIndex, validatedEnd >= 0 {
            var mark: [UInt8] = []
            LogFormat.appendRollover(next: next, index: index, at: validatedEnd, to: &mark)
            // Best effort: the file is gone from the directory either way.
            _ = segment.file.write(mark, at: validatedEnd)
        }
        if later != nil {
            current = nil
            try openNewest()
        } else {
            try createSegment(next, index: nextIndex)
        }
    }

    /// Opens the newest segment for appending, or starts the log.
    private func openNewest() throws(TypedNotificationError) {
        guard let newest = files.segments().last else {
            try createSegment(try freeNumber(after: 0), index: nextIndex)
            return
        }
        // A segment this user may not write (mode 0666, another owner) is
        // refused with an error that names it.
        use(OpenSegment(file: try files.open(newest), number: newest))
    }

    /// Closes the current segment with a rollover mark, starts the next
    /// (after `number`, the current segment's by default) and applies the
    /// retention policy.
    private func roll(after number: UInt64? = nil) throws(TypedNotificationError) {
        guard let segment = current, let index = nextIndex else { return }
        let next = try freeNumber(after: number ?? segment.number)
        var mark: [UInt8] = []
        LogFormat.appendRollover(next: next, index: index, at: validatedEnd, to: &mark)
        try write(mark, to: segment, at: validatedEnd)
        try createSegment(next, index: index)
        files.applyRetention(keeping: next)
    }

    /// The first number after `number`, and after every number the log ever
    /// had, that nothing occupies: a number a planted file (a FIFO, a link)
    /// holds is skipped, never opened.
    private func freeNumber(after number: UInt64) throws(TypedNotificationError) -> UInt64 {
        // A number that is no longer in the log, or a nonsense one planted
        // in the lock file, is not followed more than a few thousand on.
        let newest = files.newestCreated().map { $0 >= number && $0 - number < 4_096 ? $0 : number } ?? number
        var next = newest + 1
        while files.exists(next) {
            next += 1
            guard next < newest + 64 else {
                throw TypedNotificationError(
                    code: .insecureDirectory,
                    message: "the log of \(name) is crowded with files that are not segments; remove them"
                )
            }
        }
        return next
    }

    /// Creates segment `number` whole, with its start mark. With no `index`
    /// (every segment removed, and this appender never read the log) how
    /// many records the log held cannot be known, so the segment starts a
    /// new log, with a new identifier, at index 0: its readers go on in it
    /// as in a log removed and made again, never counting a false gap.
    private func createSegment(_ number: UInt64, index: UInt64?) throws(TypedNotificationError) {
        let log = index == nil ? files.newLogIdentifier() : logIdentifier()
        let start = LogFormat.segmentStart(index: index ?? 0, log: log)
        use(OpenSegment(file: try files.create(number, holding: start), number: number))
        self.log = log
        validatedEnd = start.count
        knownSize = start.count
        nextIndex = index ?? 0
    }

    /// Makes `segment` the current one; where it ends, and its next index,
    /// are read from it (others may have appended to it).
    private func use(_ segment: OpenSegment) {
        current = segment
        validatedEnd = -1
        knownSize = -1
        nextIndex = nil
        if let bytes = segment.file.read(at: 0, count: LogFormat.startSize),
            let found = LogFormat.logIdentifier(inStart: bytes)
        {
            log = found
        }
    }

    /// The log's identifier: the one this appender read, else the one a
    /// segment of the log names (the newest whose start mark is whole), else
    /// a new one.
    private func logIdentifier() -> UInt64 {
        if let log { return log }
        for number in files.segments().reversed() {
            guard let bytes = files.readStart(of: number, count: LogFormat.startSize),
                let found = LogFormat.logIdentifier(inStart: bytes)
            else { continue }
            log = found
            return found
        }
        let new = files.newLogIdentifier()
        log = new
        return new
    }

    private func write(_ bytes: [UInt8], to segment: OpenSegment, at offset: Int) throws(TypedNotificationError) {
        if case .failure(let error) = segment.file.write(bytes, at: offset) {
            segment.file.truncate(to: offset)
            throw Self.writeFailure(error, name: name)
        }
    }
}
