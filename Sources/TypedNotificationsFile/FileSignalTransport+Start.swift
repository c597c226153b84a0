@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// Where reading a name starts: a saved cursor, the log's end, its
// beginning or its newest records, always on a record boundary.
extension FileSignalTransport {
    /// Where reading `name` starts, and up to where what is read may have
    /// been delivered before. A durable identity without a cursor for
    /// `name` starts at the first record when it observes a namespace that
    /// contains it (its marker; `except` one whose first run this is).
    func startingPoint(
        for name: NotificationName, except namespace: NotificationNamespace? = nil
    ) -> (position: LogPosition, redeliverThrough: LogPosition?) {
        let segments = FileLog.segments(directory, name)
        let end = logEnd(of: name, segments: segments)
        let oldest = LogPosition(segment: segments.first ?? 1, offset: 0)
        guard let identity else { return (firstPosition(of: name, segments: segments, end: end), nil) }
        let problem: String
        // Read again from the oldest record, what may have been delivered
        // before is marked: all there is now, and all the cursor says it
        // handed over (a segment being written back may not hold it yet).
        var redeliverThrough = end
        switch FileCursor.loadCovering(
            root: directory, identity: identity, name: name, sharing: configuration.sharing, except: namespace)
        {
        case .missing:
            return (firstPosition(of: name, segments: segments, end: end), nil)
        case .invalid(let reason):
            problem = reason
        case .valid(let cursor):
            if let saved = cursor.committed.log, let current = end.log, saved != current {
                // The log was removed and started again since the cursor was
                // saved: what it pointed into is gone; the new log is read
                // from its oldest record, none of it delivered before.
                counters.add(to: .vanishedSegments)
                return (LogPosition(segment: oldest.segment, offset: 0, log: current), nil)
            }
            if cursor.committed > end {
                problem = "the cursor (\(cursor.committed)) points past the end of the log (\(end))"
                if cursor.delivered.segment == end.segment,
                    cursor.delivered.log == nil || cursor.delivered.log == end.log
                {
                    // The segment the log ends in is shorter than where
                    // the cursor was: what it holds from there on, once
                    // written back, was handed over before too.
                    redeliverThrough = max(end, cursor.delivered)
                }
            } else if cursor.committed < oldest {
                // Retention deleted what it had not read: start at what is
                // left; the index saved with the cursor tells how much that was.
                return (
                    LogPosition(
                        segment: oldest.segment, offset: 0, index: cursor.committed.index,
                        log: cursor.committed.log ?? end.log),
                    max(cursor.delivered, oldest)
                )
            } else if let saved = cursor.committed.index, let found = index(at: cursor.committed, of: name),
                found != saved
            {
                problem =
                    "the log was started again since the cursor was saved (record \(saved) was at \(cursor.committed), record \(found) is there now)"
            } else {
                let aligned = recordBoundary(atOrBefore: cursor.committed, of: name)
                return (aligned, max(cursor.delivered, cursor.committed))
            }
        }
        counters.add(to: .invalidCursors)
        commits.withLock { $0.problems[name] = problem }
        return (oldest, redeliverThrough)
    }

    /// The index of the record that starts at `position` (or comes next, at
    /// the end of what the segment holds), or `nil` when that cannot be told.
    private func index(at position: LogPosition, of name: NotificationName) -> UInt64? {
        guard
            case .success(let file) = FileLog.openForReading(
                FileLog.segmentPath(directory, name, position.segment), sharing: configuration.sharing),
            case .success(let info) = SystemCalls.fileExtent(file), position.offset <= info.size
        else { return nil }
        let from = LogFormat.blockStart(of: position.offset)
        let count = min(info.size, position.offset + LogFormat.blockSize) - from
        guard case .success(let bytes) = FileLog.read(file, at: from, count: count) else { return nil }
        var found: UInt64?
        var next: UInt64?
        _ = LogScanner.walk(bytes, base: from, fileSize: info.size) { item in
            switch item {
            case .record(let start, let end, let index, _):
                if start == position.offset { found = found ?? index }
                if end == position.offset { next = index &+ 1 }
            case .start(let index, _):
                if position.offset == LogFormat.startSize || position.offset == 0 { next = index }
            case .rollover, .damaged, .skipped, .piece: break
            }
        }
        return found ?? next
    }

    /// Where `name`'s log ends now: past its newest segment's last whole
    /// record, before any torn tail, with the index of the record to come.
    /// A segment of format 1 "ends" at its start, where a reader refuses it
    /// and goes on to the segment after it.
    private func logEnd(of name: NotificationName, segments: [UInt64]) -> LogPosition {
        // No log yet: it will start at segment 1 with record 0, and a reader
        // that finds those deleted before it read them counts them.
        guard let newest = segments.last else { return LogPosition(segment: 1, offset: 0, index: 0) }
        guard
            case .success(let file) = FileLog.openForReading(
                FileLog.segmentPath(directory, name, newest), sharing: configuration.sharing),
            let end = FileLog.end(of: file, number: newest)
        else { return LogPosition(segment: newest, offset: 0) }
        return end
    }

    /// The bytes of segment `number` of `name`'s log, or `nil` when it
    /// cannot be opened or read (it may have been deleted meanwhile).
    func wholeSegment(_ number: UInt64, of name: NotificationName) -> [UInt8]? {
        guard
            case .success(let file) = FileLog.openForReading(
                FileLog.segmentPath(directory, name, number), sharing: configuration.sharing),
            case .success(let info) = SystemCalls.fileExtent(file),
            case .success(let bytes) = FileLog.read(file, at: 0, count: info.size)
        else { return nil }
        return bytes
    }

    /// Where reading starts without a saved cursor (see `firstRead`).
    private func firstPosition(of name: NotificationName, segments: [UInt64], end: LogPosition) -> LogPosition {
        switch firstRead.kind {
        case .end:
            return end
        case .beginning:
            return segments.first.map { LogPosition(segment: $0, offset: 0) } ?? end
        case .newest(let count):
            // Back from the newest segment, counting whole records.
            var wanted = count
            for segment in segments.reversed() {
                guard wanted > 0 else { break }
                guard let bytes = wholeSegment(segment, of: name) else { continue }
                var decoder = EnvelopeDecoder()
                let records = FileLog.records(in: bytes, decoder: &decoder)
                if records.count >= wanted {
                    let record = records[records.count - wanted]
                    return LogPosition(segment: segment, offset: record.start, index: record.index)
                }
                wanted -= records.count
            }
            return segments.first.map { LogPosition(segment: $0, offset: 0) } ?? end
        }
    }

    /// `position` if a fragment starts or ends there (or it is the end of
    /// the segment), else the start of the record it falls in: a cursor
    /// never lands mid-record, where resynchronizing would skip records. A
    /// record damaged since the cursor passed it is still a boundary, so
    /// the position keeps its index and nothing handled is counted missed.
    private func recordBoundary(atOrBefore position: LogPosition, of name: NotificationName) -> LogPosition {
        guard position.offset > 0,
            case .success(let file) = FileLog.openForReading(
                FileLog.segmentPath(directory, name, position.segment), sharing: configuration.sharing),
            case .success(let bytes) = FileLog.read(file, at: 0, count: position.offset)
        else { return position }
        var boundary = 0
        var aligned = position.offset == LogFormat.startSize
        let walked = LogScanner.walk(bytes, base: 0, fileSize: bytes.count) { item in
            switch item {
            case .record(let start, let end, _, _):
                boundary = end
                if start == position.offset || end == position.offset { aligned = true }
            case .skipped(let start, let end):
                if start == position.offset || end == position.offset { aligned = true }
            case .start, .rollover, .damaged, .piece: break
            }
        }
        // The walk stopped at a fragment (damaged, say) that ends right there.
        if walked.end == position.offset
            || bytes.withUnsafeBytes({ raw in
                walked.end + LogFormat.headerSize <= raw.count
                    && LogFormat.header(in: raw, at: walked.end, base: 0).map {
                        walked.end + LogFormat.headerSize + $0.length == position.offset
                    } == true
            })
        {
            aligned = true
        }
        guard !aligned, boundary != position.offset else { return position }
        return LogPosition(segment: position.segment, offset: boundary, log: position.log)
    }

    /// How far this identity's observers of `name` have handled the log, in
    /// memory (the cursor file follows shortly); for tests.
    func committedPosition(of name: NotificationName) -> LogPosition? {
        commits.withLock { $0.slots[name]?.machine.committed }
    }

    /// Why this identity's saved cursor for `name` could not be used when it
    /// subscribed, or `nil`. Reading then started at the oldest record the log
    /// still had, every record up to the end marked as a redelivery.
    public func cursorProblem(for name: NotificationName) -> String? {
        commits.withLock { $0.problems[name] }
    }

    /// Why this identity's marker for `namespace` could not be used when it
    /// subscribed (garbage, a FIFO, a link, another user's file), or `nil`.
    /// The marker says the identity observed the namespace before, so that
    /// a name that appeared while it was away is read from its first record;
    /// unreadable, every name of the namespace without a cursor of its own
    /// was read from its oldest record, each marked as a redelivery (see
    /// ``cursorProblem(for:)`` for each), and the marker was written anew.
    public func cursorProblem(in namespace: NotificationNamespace) -> String? {
        commits.withLock { $0.namespaceProblems[namespace] }
    }
}
