import Dispatch
import NotificationPlatform
import Synchronization

/// How long a file-plus-signal log keeps notifications.
public struct FileRetentionPolicy: Sendable, Hashable {
    /// Bytes a name's log may use before its oldest segments are deleted. Default 64 MiB.
    public var maximumBytes: Int
    /// Age after which a segment is deleted, or `nil` for no limit. Default `nil`.
    public var maximumAge: Duration?
    /// How far behind the log's end a durable identity's cursor may be and
    /// still keep segments from being deleted. An identity further behind
    /// (abandoned, or away for long) no longer holds them: retention deletes
    /// them as for everyone, and when it returns it goes on at the oldest
    /// record left and is told exactly how many it missed. Default 1 GiB;
    /// `nil`: no limit (one abandoned identity then keeps every segment).
    public var maximumBytesBehind: Int?

    /// Creates a policy.
    public init(
        maximumBytes: Int = 64 * 1024 * 1024, maximumAge: Duration? = nil,
        maximumBytesBehind: Int? = 1024 * 1024 * 1024
    ) {
        self.maximumBytes = maximumBytes
        self.maximumAge = maximumAge
        self.maximumBytesBehind = maximumBytesBehind
    }
}

/// Limits and policies of a ``FileSignalTransport``.
public struct FileSignalConfiguration: Sendable {
    /// Who besides the owner may use the directory. Default: ``DirectorySharing/ownerOnly``.
    public var sharing: DirectorySharing
    /// The size at which a log starts a new segment, from 4 KiB to 64 MiB.
    /// Default 4 MiB.
    public var segmentSize: Int
    /// What old segments are deleted; a segment a durable reader still needs is kept.
    public var retention: FileRetentionPolicy
    /// How often to look at the logs even without a change event: the safety
    /// net for lost events, and the only mechanism on file systems without
    /// them. Default 1 second.
    public var pollInterval: Duration
    /// Whether to wake on change events (inotify on Linux). Turn it off for a
    /// file system that does not deliver them (some network file systems);
    /// then only ``pollInterval`` wakes readers. Default `true`.
    public var usesChangeEvents: Bool

    /// Creates a configuration.
    public init(
        sharing: DirectorySharing = .ownerOnly,
        segmentSize: Int = 4 * 1024 * 1024,
        retention: FileRetentionPolicy = FileRetentionPolicy(),
        pollInterval: Duration = .seconds(1),
        usesChangeEvents: Bool = true
    ) {
        self.sharing = sharing
        self.segmentSize = min(64 * 1024 * 1024, max(4096, segmentSize))
        self.retention = retention
        self.pollInterval = pollInterval
        self.usesChangeEvents = usesChangeEvents
    }
}

/// Counters of a ``FileSignalTransport``.
public struct FileSignalStatistics: Hashable, Sendable {
    /// Envelopes this transport appended.
    public var appended: Int
    /// Writes that appended them. Posts that queue up while an append is in
    /// progress are appended together, under one lock with one write, so
    /// under concurrent posting this is less than ``appended``.
    public var appendWrites: Int
    /// Appends that failed (a full disk, a file-size limit) and were cut back.
    public var failedAppends: Int
    /// Torn records, left by a writer killed mid-append, that this
    /// transport's appends stepped over (to the next 32 KiB block; never cut
    /// off, so nothing another process wrote is ever destroyed).
    public var repairedTails: Int
    /// Records read from the logs and handed to the center.
    public var delivered: Int
    /// Corrupt stretches skipped while reading; each is reported, never delivered.
    public var corruptRecordsSkipped: Int
    /// Old segments deleted by the retention policy.
    public var deletedSegments: Int
    /// Durable cursors that could not be used: not a regular file of this
    /// user (a FIFO, a link), not a cursor, or pointing past the end of the
    /// log. Each such identity resumed at the oldest record the log still
    /// had, every record up to the end marked as a redelivery; see
    /// ``FileSignalTransport/cursorProblem(for:)``.
    public var invalidCursors: Int
    /// Times a segment was found shorter than what this transport had read
    /// (truncated by someone): reading went on at the first record it had not
    /// delivered, nothing delivered twice.
    public var shrunkSegments: Int
    /// Times the segment being read was removed or replaced under the reader
    /// (its log deleted, say): reading went on in the log as it is now, from
    /// its oldest segment's start.
    public var vanishedSegments: Int
    /// Files in a log refused because they were not a regular file of this
    /// user with the sharing's mode (a FIFO, a link, mode 0666): never opened
    /// for reading, never read.
    public var refusedFiles: Int
}

/// The log appenders of a ``FileSignalTransport`` not in use, and whether
/// it takes posts (from `open` until `close`): one lock per post for both.
struct AppenderTable {
    var idle: [NotificationName: LogAppender] = [:]
    var isOpen = false
}

final class FileSignalCounters: Sendable {
    let appended = Atomic<Int>(0)
    let appendWrites = Atomic<Int>(0)
    let failedAppends = Atomic<Int>(0)
    let repairedTails = Atomic<Int>(0)
    let delivered = Atomic<Int>(0)
    let corruptRecordsSkipped = Atomic<Int>(0)
    let deletedSegments = Atomic<Int>(0)
    let invalidCursors = Atomic<Int>(0)
    let shrunkSegments = Atomic<Int>(0)
    let vanishedSegments = Atomic<Int>(0)
    let refusedFiles = Atomic<Int>(0)

    var snapshot: FileSignalStatistics {
        FileSignalStatistics(
            appended: appended.load(ordering: .relaxed),
            appendWrites: appendWrites.load(ordering: .relaxed),
            failedAppends: failedAppends.load(ordering: .relaxed),
            repairedTails: repairedTails.load(ordering: .relaxed),
            delivered: delivered.load(ordering: .relaxed),
            corruptRecordsSkipped: corruptRecordsSkipped.load(ordering: .relaxed),
            deletedSegments: deletedSegments.load(ordering: .relaxed),
            invalidCursors: invalidCursors.load(ordering: .relaxed),
            shrunkSegments: shrunkSegments.load(ordering: .relaxed),
            vanishedSegments: vanishedSegments.load(ordering: .relaxed),
            refusedFiles: refusedFiles.load(ordering: .relaxed)
        )
    }
}

/// Durable typed notifications through a shared directory: the app-group
/// model, done right.
///
/// A post appends its envelope to the name's log and the append itself is the
/// wake-up signal (inotify on Linux; a poll every
/// ``FileSignalConfiguration/pollInterval`` as a safety net and where there are
/// no change events). Observers read what is new past their cursor. Because
/// the log is the truth, a lost or coalesced signal loses nothing, and two
/// quick posts are both kept and delivered, in order.
///
/// - A plain observer starts at the end of the log, new notifications only,
///   unless the transport's ``firstRead`` says the beginning or the newest records.
/// - A transport created with an `identity` (say `"widget"`) keeps a durable
///   cursor per name and resumes where it stopped after a restart, a crash or
///   a suspension: **at least once, never less.** Its first run starts where
///   ``firstRead`` says (the log's end by default). The cursor moves past a
///   notification only once every observer of the name has handled it (a
///   handler returned; a `for await` loop asked for the next element; see
///   ``DeliveryReceipt``). After a crash, what was handed over and not yet
///   handled is delivered again, marked ``NotificationDelivery/isRedelivery``;
///   nothing is skipped. A cursor file that cannot be used (a FIFO, garbage,
///   past the end) is reported in ``FileSignalStatistics/invalidCursors`` and
///   ``cursorProblem(for:)``, and reading starts at the oldest record the log
///   still has, each marked as a redelivery.
/// - `NotificationHub.latest(of:)` reads the newest notification without observing.
/// - Segments roll by size and are deleted by ``FileRetentionPolicy`` once every
///   durable cursor is past them, so disk use stays bounded.
public final class FileSignalTransport: NotificationTransport {
    /// The shared directory.
    public let directory: String
    /// The durable identity whose cursors this transport keeps, if any.
    public let identity: String?
    /// Where reading a name starts when there is no saved cursor for it: for
    /// a plain observer always, for a durable identity on its first run.
    public let firstRead: FileLogStart
    /// Limits and policies.
    public let configuration: FileSignalConfiguration

    private let counters = FileSignalCounters()
    private let state: Locked<FileSignalState>
    // What the durable identity's observers handled: its own lock, taken by
    // whatever thread lets go of a receipt, never across a system call.
    private let commits = Locked<CommitTable>(CommitTable())
    // Appenders not in use, by name; a send takes its name's out while it
    // appends. Closed with the transport: nothing is put back after.
    private let appenders = Locked(AppenderTable())
    // Reads the logs, saves cursors and runs the jobs of the hub's executor.
    private let loop: EventLoop
    // A read pass is queued on the loop and has not started yet.
    private let passQueued = Atomic<Bool>(false)
    // Serializes cursor file writes (see saveCursor).
    private let cursorSaves = SystemMutex()
    // A pass for names held back for their observers is scheduled.
    private let recheckScheduled = Atomic<Bool>(false)
    // Bumped under the state lock whenever a reader is added or removed, so
    // a read pass, which reads with no lock held, knows without taking the
    // lock again whether the readers it read are still the current ones.
    private let readersChanged = Atomic<UInt64>(0)
    // The shared directory as it was when opened: if it goes, observers are told.
    private let root: RecordedPath?

    /// A directory for this user: `$XDG_RUNTIME_DIR/typed-notifications-files`,
    /// else `/tmp/typed-notifications-files-<uid>`.
    public static var defaultDirectory: String {
        SystemProcess.runtimeDirectory(named: "typed-notifications-files")
    }

    /// Creates the directory structure if needed and checks it.
    ///
    /// - Parameters:
    ///   - directory: The shared directory; created 0700 if missing.
    ///   - identity: A durable identity such as `"widget"`, following the rules
    ///     of endpoint labels; `nil` for a plain observer.
    ///   - firstRead: Where reading a name starts when there is no saved
    ///     cursor for it (a plain observer, or a durable identity's first
    ///     run): the log's end (new notifications only, the default), its
    ///     beginning, or its newest records. A durable identity with a saved
    ///     cursor always resumes there.
    ///   - configuration: Limits and policies.
    /// - Throws: ``TypedNotificationError`` for an insecure directory or an invalid identity.
    public init(
        directory: String = FileSignalTransport.defaultDirectory,
        identity: String? = nil,
        firstRead: FileLogStart = .end,
        configuration: FileSignalConfiguration = FileSignalConfiguration()
    ) throws(TypedNotificationError) {
        let directory = directory.count > 1 && directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        if let identity, let problem = NotificationName.problem(with: identity.utf8, maximumLength: 64) {
            throw TypedNotificationError(
                code: .invalidEndpoint, message: "identity \(TypedNotificationError.quote(identity)) \(problem)")
        }
        self.directory = directory
        self.identity = identity
        self.firstRead = firstRead
        self.configuration = configuration
        // A write past RLIMIT_FSIZE must fail with EFBIG, not kill the process.
        SystemCalls.ignoreFileSizeSignal()
        try SharedDirectory.prepare(directory, sharing: configuration.sharing)
        try SharedDirectory.prepare(FileLog.logsDirectory(directory), sharing: configuration.sharing)
        try SharedDirectory.prepare(FileLog.cursorsDirectory(directory), sharing: configuration.sharing)
        if let identity {
            try SharedDirectory.prepare(
                FileLog.cursorsDirectory(directory) + "/" + identity, sharing: configuration.sharing)
        }
        root = RecordedPath(directory)
        do throws(Errno) {
            loop = try EventLoop(name: "TypedNotifications.FileSignalTransport")
            state = Locked(FileSignalState(monitor: try DirectoryMonitor(includingModifications: true)))
        } catch {
            throw SharedDirectory.failure(error, "could not set up change notifications for \(directory)")
        }
    }

    deinit {
        close()
        cursorSaves.deallocate()
    }

    /// Counters since the transport was created.
    public var statistics: FileSignalStatistics { counters.snapshot }

    /// File-plus-signal transports carry envelopes.
    public var payloadForm: TransportPayloadForm { .encoded }

    /// `true`: the log numbers every record, so a reader counts exactly what
    /// retention deleted or corruption destroyed before it read it, of every
    /// sender, including senders it never heard from.
    public var reportsEveryMissedNotification: Bool { true }

    /// Starts the event-loop thread that reads the logs.
    public func open(as sender: NotificationSender, receiver: TransportReceiver) throws(TypedNotificationError) {
        let monitorDescriptor = try state.withLock {
            (state: inout FileSignalState) throws(TypedNotificationError) -> CInt? in
            guard case .created = state.phase, let monitor = state.unopenedMonitor.take() else {
                throw TypedNotificationError(code: .closed, message: "this file transport was already opened")
            }
            state.phase = .open
            // Under the state lock, so a close cannot come in between and
            // leave the appenders open after it.
            appenders.withLock { $0.isOpen = true }
            state.receiving = FileReading(receiver: receiver, root: root, monitor: monitor)
            return monitor.pollDescriptor
        }
        if configuration.usesChangeEvents, let monitorDescriptor {
            do throws(Errno) {
                try loop.register(monitorDescriptor) { [weak self] in self?.readPass() }.get()
            } catch {
                throw SharedDirectory.failure(error, "could not watch the logs in \(directory)")
            }
        }
        // Also the safety net where change events are used: a pass at least
        // once a second.
        let interval = UInt64(max(1, min(configuration.pollInterval.clampedMilliseconds, 1_000))) * 1_000_000
        schedulePolls(every: interval)
        loop.start()
    }

    /// The transport's event loop, which also runs the jobs of its hub's
    /// executor, so a notification it reads reaches a handler there without
    /// waking another thread.
    public var deliveryExecutor: (any TaskExecutor & SerialExecutor)? { loop }

    private func schedulePolls(every interval: UInt64) {
        loop.schedule(after: interval) { [weak self] in
            guard let self else { return }
            readPass(thorough: true)
            schedulePolls(every: interval)
        }
    }

    /// Queues one read pass on the loop, unless one is queued already.
    private func requestPass() {
        guard !passQueued.exchange(true, ordering: .acquiringAndReleasing) else { return }
        loop.execute { [weak self] in self?.readPass() }
    }

    /// Starts reading `name`'s log: at the end, or at this identity's saved
    /// cursor. A cursor that cannot be used starts at the oldest record the
    /// log still has (see ``cursorProblem(for:)``).
    public func subscribe(to name: NotificationName) throws(TypedNotificationError) {
        try SharedDirectory.prepare(FileLog.nameDirectory(directory, name), sharing: configuration.sharing)
        let start = startingPoint(for: name)
        #if canImport(Darwin)
            var newSignal: CInt?
        #endif
        try state.withLock { (state: inout FileSignalState) throws(TypedNotificationError) in
            guard case .open = state.phase else {
                throw TypedNotificationError(code: .closed, message: "subscribe on a file transport that is not open")
            }
            // The read pass requested below watches the log's directory
            // before it reads, on the event loop: an append before the watch
            // is read by that pass, and one after it wakes the loop.
            readersChanged.wrappingAdd(1, ordering: .releasing)
            state.newlySubscribed.append(name)
            state.readers[name] = LogReader(
                name: name, start: start.position, redeliveringThrough: start.redeliverThrough,
                sharing: configuration.sharing)
            #if canImport(Darwin)
                let before = state.signalDescriptor
                state.signalDescriptor =
                    DarwinChangeSignal.register(
                        FileLog.signalName(directory, name),
                        descriptor: state.signalDescriptor
                    ) ?? state.signalDescriptor
                newSignal = before == nil && configuration.usesChangeEvents ? state.signalDescriptor : nil
            #endif
        }
        #if canImport(Darwin)
            if let newSignal {
                _ = loop.register(newSignal) { [weak self] in
                    DarwinChangeSignal.drain(newSignal)
                    self?.readPass()
                }
            }
        #endif
        if identity != nil {
            let cursor = FileCursor(committed: start.position, delivered: start.redeliverThrough ?? start.position)
            commits.withLock { table in
                table.generation &+= 1
                table.slots[name] = CommitSlot(
                    generation: table.generation,
                    machine: CursorCommitStateMachine(committed: cursor.committed, delivered: cursor.delivered))
            }
            // Saved now, so retention keeps what this identity has yet to read.
            saveCursor(of: name)
        }
        requestPass()
    }

    /// Stops reading `name`'s log. A durable cursor stays where its handled
    /// notifications left it; what was in flight is delivered again (marked
    /// as a redelivery) to the next subscription.
    public func unsubscribe(from name: NotificationName) {
        state.withLock { state in
            readersChanged.wrappingAdd(1, ordering: .releasing)
            _ = state.readers.removeValue(forKey: name)
        }
        // Saved whether or not a save is pending: one the loop had taken
        // (and cleared the flag for) finds the slot gone and writes nothing,
        // and the last commits would be lost (once in a few hundred stops of
        // a busy durable watcher).
        let slot = commits.withLock { $0.slots.removeValue(forKey: name) }
        if identity != nil, let slot {
            saveCursor(of: name, else: slot.cursor)
        }
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

    /// Appends the envelope to its name's log.
    ///
    /// - Throws: ``TypedNotificationError/Code/storageFull`` when the disk or the
    ///   file-size limit is reached; nothing partial is kept.
    public func send(_ message: TransportMessage) throws(TypedNotificationError) {
        guard case .encoded(let encoded) = message.payload else {
            throw TypedNotificationError(code: .transportFailure, message: "the file transport appends envelopes only")
        }
        if let failure = append(CollectionOfOne(encoded), named: message.name).failure { throw failure }
    }

    /// Appends the envelopes to their names' logs: each run of one name
    /// under one lock with one write (a group commit), as long as it fits in
    /// the segment. Stops at the first that fails (a full disk, say);
    /// nothing partial is kept.
    public func send(batch messages: [TransportMessage]) -> TransportBatchResult {
        var result = TransportBatchResult()
        var envelopes: [EncodedNotification] = []
        envelopes.reserveCapacity(messages.count)
        var index = 0
        while index < messages.count {
            let name = messages[index].name
            envelopes.removeAll(keepingCapacity: true)
            while index + envelopes.count < messages.count, messages[index + envelopes.count].name == name {
                guard case .encoded(let encoded) = messages[index + envelopes.count].payload else {
                    result.failure = TypedNotificationError(
                        code: .transportFailure, message: "the file transport appends envelopes only")
                    break
                }
                envelopes.append(encoded)
            }
            let (appended, failure) = append(envelopes, named: name)
            result.sent += appended
            index += appended
            if let failure = failure ?? result.failure {
                result.failure = failure
                return result
            }
        }
        return result
    }

    /// Appends to one name's log with its appender, holding no lock while
    /// the appender works: the appender is taken out of the table and put
    /// back after. A concurrent caller of the same name (the center never
    /// makes one, direct callers might) opens an appender of its own, and
    /// the log's `flock` orders the two as it orders two processes.
    private func append<Envelopes: RandomAccessCollection<EncodedNotification>>(
        _ envelopes: Envelopes, named name: NotificationName
    ) -> (appended: Int, failure: TypedNotificationError?) where Envelopes.Index == Int {
        let (isOpen, idle) = appenders.withLock { table in
            table.isOpen ? (true, table.idle.removeValue(forKey: name)) : (false, nil)
        }
        guard isOpen else {
            return (0, TypedNotificationError(code: .closed, message: "post of \(name) to a closed file transport"))
        }
        var appender = idle
        var appended = 0
        while appended < envelopes.count {
            if appender == nil || appender?.isRemoved == true {
                // The first post of this name, or its log was removed since
                // (rm -rf): start it (again), never writing into deleted files.
                do throws(TypedNotificationError) {
                    appender = try LogAppender(
                        root: directory, name: name, configuration: configuration, counters: counters)
                } catch {
                    return (appended, error)
                }
            }
            guard let current = appender else { break }
            let (count, failure) = current.append(envelopes.dropFirst(appended))
            appended += count
            if let failure {
                putBack(current, named: name)
                return (appended, failure)
            }
            // Stopped early without a failure: the log was removed; go on in a new one.
        }
        if let appender { putBack(appender, named: name) }
        #if canImport(Darwin)
            if appended > 0 { DarwinChangeSignal.post(FileLog.signalName(directory, name)) }
        #endif
        return (appended, nil)
    }

    private func putBack(_ appender: LogAppender, named name: NotificationName) {
        appenders.withLock { table in
            guard table.isOpen, table.idle[name] == nil else { return }
            table.idle[name] = appender
        }
    }

    /// The newest notification in `name`'s log, without observing it.
    ///
    /// - Throws: ``TypedNotificationError/Code/insecureDirectory`` when a
    ///   segment it would read is refused (a mode wider than the sharing
    ///   allows, another owner), naming it: never a silent "nothing".
    package func latestMessage(of name: NotificationName) throws(TypedNotificationError) -> TransportMessage? {
        var decoder = EnvelopeDecoder()
        for number in FileLog.segments(directory, name).reversed() {
            if case .failure(let error) = FileLog.open(
                FileLog.segmentPath(directory, name, number), create: false, sharing: configuration.sharing),
                error.code == .insecureDirectory
            {
                throw error
            }
            guard let bytes = wholeSegment(number, of: name) else { continue }
            if let newest = FileLog.records(in: bytes, decoder: &decoder).last(where: { $0.message != nil }) {
                return newest.message
            }
        }
        return nil
    }

    /// Stops reading and closes the logs, saving how far this identity's
    /// observers got. Waits for the event-loop thread, at most 2 seconds:
    /// nothing it does blocks (every open is non-blocking), and a thread
    /// stuck anyway (a hung network file system) is left to end on its own.
    /// Called on that thread (a center released while it delivered), it
    /// does not wait for itself. Idempotent.
    public func close() {
        let wasOpen = state.withLock { state -> Bool in
            defer {
                state.phase = .closed
                state.readers = [:]
            }
            if case .open = state.phase { return true }
            return false
        }
        appenders.withLock { table in
            table.isOpen = false
            table.idle = [:]
        }
        loop.stop()
        guard wasOpen else { return }
        _ = loop.join(nanoseconds: 2_000_000_000)
        // What was handled so far is saved; later commits save themselves.
        saveDueCursors(closing: true)
    }

    /// Where reading `name` starts, and up to where what is read may have
    /// been delivered before.
    private func startingPoint(for name: NotificationName) -> (position: LogPosition, redeliverThrough: LogPosition?) {
        let segments = FileLog.segments(directory, name)
        let end = logEnd(of: name, segments: segments)
        let oldest = LogPosition(segment: segments.first ?? 1, offset: 0)
        guard let identity else { return (firstPosition(of: name, segments: segments, end: end), nil) }
        let problem: String
        switch FileCursor.load(root: directory, identity: identity, name: name, sharing: configuration.sharing) {
        case .missing:
            return (firstPosition(of: name, segments: segments, end: end), nil)
        case .invalid(let reason):
            problem = reason
        case .valid(let cursor):
            if let saved = cursor.committed.log, let current = end.log, saved != current {
                // The log was removed and started again since the cursor was
                // saved: what it pointed into is gone; the new log is read
                // from its oldest record, none of it delivered before.
                counters.vanishedSegments.add(1, ordering: .relaxed)
                return (LogPosition(segment: oldest.segment, offset: 0, log: current), nil)
            }
            if cursor.committed > end {
                problem = "the cursor (\(cursor.committed)) points past the end of the log (\(end))"
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
        counters.invalidCursors.add(1, ordering: .relaxed)
        commits.withLock { $0.problems[name] = problem }
        return (oldest, end)
    }

    /// The index of the record that starts at `position` (or comes next, at
    /// the end of what the segment holds), or `nil` when that cannot be told.
    private func index(at position: LogPosition, of name: NotificationName) -> UInt64? {
        guard
            case .success(let file) = FileLog.open(
                FileLog.segmentPath(directory, name, position.segment), create: false, sharing: configuration.sharing),
            case .success(let info) = SystemCalls.fileStatus(file), position.offset <= info.size
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
            case .success(let file) = FileLog.open(
                FileLog.segmentPath(directory, name, newest), create: false, sharing: configuration.sharing),
            let end = FileLog.end(of: file, number: newest)
        else { return LogPosition(segment: newest, offset: 0) }
        return end
    }

    /// The bytes of segment `number` of `name`'s log, or `nil` when it
    /// cannot be opened or read (it may have been deleted meanwhile).
    private func wholeSegment(_ number: UInt64, of name: NotificationName) -> [UInt8]? {
        guard
            case .success(let file) = FileLog.open(
                FileLog.segmentPath(directory, name, number), create: false, sharing: configuration.sharing),
            case .success(let info) = SystemCalls.fileStatus(file),
            case .success(let bytes) = FileLog.read(file, at: 0, count: info.size)
        else { return nil }
        return bytes
    }

    /// Where reading starts without a saved cursor (see ``firstRead``).
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
            case .success(let file) = FileLog.open(
                FileLog.segmentPath(directory, name, position.segment), create: false, sharing: configuration.sharing),
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

    // MARK: - Reading, on the event loop

    /// Reads subscribed logs and hands what is new to the center: a change
    /// event only says when to look, and which log to look at.
    ///
    /// With `thorough` (the poll, the safety net), every subscribed log is
    /// read; else only those whose directory changed, new subscriptions and
    /// readers with more to read, so a wake-up costs the same however many
    /// names are observed.
    private func readPass(thorough: Bool = false) {
        passQueued.store(false, ordering: .releasing)
        guard
            let (checking, subscribed) = state.withLock({ state -> (FileReading, [NotificationName])? in
                guard let receiving = state.receiving else { return nil }
                defer { state.newlySubscribed = [] }
                return (receiving, state.newlySubscribed)
            })
        else { return }
        // The change events, and watches for new logs, on this thread, which
        // alone uses the monitor, with no lock held.
        let changed = checking.changedNames(newlySubscribed: subscribed, in: directory)
        let candidates: [NotificationName]
        if thorough || changed == nil {
            candidates = state.withLock { Array($0.readers.keys) }
        } else {
            candidates = Array(changed ?? [])
        }
        // A name whose observers have a slice waiting is not read now: the
        // log keeps it, and reading on would only overflow their buffers.
        // Asked before the lock, which the center's own lock comes before.
        var held = Set(candidates.filter { checking.receiver.isBackedUp($0) })
        // A durable identity hands over no more than its observers can
        // buffer: a buffering policy never drops what it must deliver.
        var rooms: [NotificationName: Int] = [:]
        if identity != nil {
            for name in candidates where !held.contains(name) {
                guard let room = checking.receiver.room(for: name) else { continue }
                if room == 0 { held.insert(name) } else { rooms[name] = room }
            }
        }
        // Decided under the lock: which readers read. The reading itself
        // happens after, with no lock held, so a subscribe or a post never
        // waits behind a pread.
        let plan = state.withLock {
            state -> (FileReading, UInt64, [(name: NotificationName, reader: LogReader)])? in
            guard case .open = state.phase, let receiving = state.receiving else { return nil }
            let plan = candidates.compactMap { name -> (name: NotificationName, reader: LogReader)? in
                held.contains(name) ? nil : state.readers[name].map { (name, $0) }
            }
            return (receiving, readersChanged.load(ordering: .acquiring), plan)
        }
        guard let (receiving, generation, plan) = plan else { return }
        var read = plan.map { name, reader in
            (
                name: name, reader: reader,
                records: reader.readNew(
                    root: directory, decoder: &receiving.decoder, counters: counters, maximumRecords: rooms[name])
            )
        }
        // A name unsubscribed (or subscribed again, with a reader of its own)
        // meanwhile: what its old reader read is for nobody. Rare, so looked
        // at under the lock only when a reader was added or removed.
        if readersChanged.load(ordering: .acquiring) != generation {
            let readBy = read.map { ($0.name, ObjectIdentifier($0.reader)) }
            let current = state.withLock { state in
                readBy.map { name, reader in state.readers[name].map(ObjectIdentifier.init) == reader }
            }
            read = zip(read, current).filter { $0.1 }.map(\.0)
        }
        // Held names are looked at again by the recheck, not by a pass
        // queued at once (which would spin while their observers catch up).
        let batches = (
            records: read.map { ($0.name, $0.records, $0.reader.missedAfterRecords) },
            hasMore: read.filter { $0.reader.hasMore }.map(\.name)
        )
        receiving.markDue(batches.hasMore)
        if let removal = receiving.removalWatch.removal() {
            receiving.receiver.fail(removal)
            return
        }
        saveDueCursors()
        for (name, records, missedAfter) in batches.records {
            if !records.isEmpty { deliver(records, of: name, to: receiving.receiver) }
            receiving.receiver.missed(MissedNotifications(count: missedAfter, name: name))
        }
        // Behind the handler jobs these records just queued on this thread.
        if !batches.hasMore.isEmpty { requestPass() }
        if !held.isEmpty { scheduleRecheck() }
    }

    /// Looks again in 1 ms at names held back for their observers; a
    /// thorough pass, since the change events of this one are spent.
    private func scheduleRecheck() {
        guard !recheckScheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        loop.schedule(after: 1_000_000) { [weak self] in
            guard let self else { return }
            recheckScheduled.store(false, ordering: .releasing)
            readPass(thorough: true)
        }
    }

    /// Hands records to the center. For a durable identity, first saves how
    /// far delivery got, so a crash from here on marks them as redeliveries,
    /// and gives each a receipt whose release commits it.
    private func deliver(_ records: [LogRecord], of name: NotificationName, to receiver: TransportReceiver) {
        guard identity != nil else {
            for record in records {
                receiver.missed(MissedNotifications(count: record.missedBefore, name: name))
                counters.delivered.add(1, ordering: .relaxed)
                receiver.receive(record.message)
            }
            return
        }
        let handedOver = commits.withLock { table -> (generation: UInt64, firstToken: UInt64, cursor: FileCursor)? in
            guard table.slots[name] != nil else { return nil }
            var first: UInt64?
            for record in records {
                let token = table.slots[name]?.machine.handOver(endingAt: record.end)
                if first == nil { first = token }
            }
            guard let slot = table.slots[name], let first else { return nil }
            return (slot.generation, first, slot.cursor)
        }
        // Unsubscribed meanwhile: nobody to hand them to.
        guard let handedOver else { return }
        saveCursor(of: name)
        for (index, record) in records.enumerated() {
            var message = record.message
            let token = handedOver.firstToken &+ UInt64(index)
            let generation = handedOver.generation
            // A message an observer's buffer dropped is never committed: it
            // comes again, marked, on the next run.
            message.receipt = DeliveryReceipt.unlessDropped { [weak self] in
                self?.handled(token, of: name, generation: generation)
            }
            receiver.missed(MissedNotifications(count: record.missedBefore, name: name))
            counters.delivered.add(1, ordering: .relaxed)
            receiver.receive(message)
        }
    }

    /// Every observer handled the record with `token`: commit it. The cursor
    /// file is written by the reader thread (woken once for many commits), or
    /// here once the transport is closed.
    private func handled(_ token: UInt64, of name: NotificationName, generation: UInt64) {
        let action = commits.withLock { table -> (wake: Bool, save: FileCursor?) in
            guard table.slots[name]?.generation == generation,
                table.slots[name]?.machine.handled(token) == true
            else { return (false, nil) }
            if table.isClosed { return (false, table.slots[name]?.cursor) }
            guard table.slots[name]?.savePending == false else { return (false, nil) }
            table.slots[name]?.savePending = true
            return (true, nil)
        }
        if action.wake { loop.execute { [weak self] in self?.saveDueCursors() } }
        if action.save != nil {
            saveCursor(of: name)
        }
    }

    /// Writes `name`'s cursor as it is now in the commit table (`fallback`,
    /// given by unsubscribe only, once the name is unsubscribed). Saves are serialized, and each writes
    /// the newest position there is when it starts writing: saves that
    /// overlap (the loop's, one drained after the loop stopped, close's own)
    /// could otherwise rename an older cursor over a newer one, and a
    /// restart would deliver again what was handled (seen once in 200 runs).
    /// The lock orders only these writes; nothing else waits for it.
    private func saveCursor(of name: NotificationName, else fallback: FileCursor? = nil) {
        guard let identity else { return }
        cursorSaves.lock()
        defer { cursorSaves.unlock() }
        // Unsubscribed: only unsubscribe's own save (the fallback) writes; a
        // save that was due before must not put its older position back.
        guard let latest = commits.withLock({ $0.slots[name]?.cursor }) ?? fallback else { return }
        latest.save(root: directory, identity: identity, name: name, sharing: configuration.sharing)
    }

    /// Writes the cursors whose committed position moved since last saved.
    /// With `closing`, later commits are saved by whoever makes them.
    private func saveDueCursors(closing: Bool = false) {
        guard identity != nil else { return }
        let due = commits.withLock { table -> [NotificationName] in
            if closing { table.isClosed = true }
            let due = table.slots.keys.filter { table.slots[$0]?.savePending == true }
            for name in due { table.slots[name]?.savePending = false }
            return due
        }
        // Each save writes the newest position there is (see saveCursor).
        for name in due { saveCursor(of: name) }
    }
}

/// A durable identity's commit state for each subscribed name.
struct CommitTable {
    /// Counts subscriptions, so receipts of an earlier one are ignored.
    var generation: UInt64 = 0
    var slots: [NotificationName: CommitSlot] = [:]
    /// Why a saved cursor could not be used, by name.
    var problems: [NotificationName: String] = [:]
    /// Set once the reader thread has ended: commits are saved by the thread
    /// that makes them.
    var isClosed = false
}

/// One subscribed name's commits.
struct CommitSlot {
    let generation: UInt64
    var machine: CursorCommitStateMachine
    /// The committed position moved since the cursor file was last written.
    var savePending = false

    var cursor: FileCursor { FileCursor(committed: machine.committed, delivered: machine.delivered) }
}

/// A record read from a log, and where it ends.
struct LogRecord {
    var message: TransportMessage
    var end: LogPosition
    /// Notifications the log lost just before this one (retention, corruption).
    var missedBefore = 0
}

/// What a ``FileSignalTransport`` changes after creation, under one lock.
struct FileSignalState {
    enum Phase {
        case created
        case open
        case closed
    }

    var phase: Phase = .created
    /// The logs' change events until `open` hands them to the read passes.
    var unopenedMonitor: DirectoryMonitor?
    var readers: [NotificationName: LogReader] = [:]
    /// Names subscribed since the last read pass, which watches their logs.
    var newlySubscribed: [NotificationName] = []
    /// What the loop's read passes keep, from `open` on.
    var receiving: FileReading?
    /// Apple platforms: the notify(3) descriptor that wakes the reader.
    var signalDescriptor: CInt?

    init(monitor: DirectoryMonitor) {
        unopenedMonitor = monitor
    }
}

/// One subscribed name's reader: performs the system calls its
/// ``LogCursorStateMachine`` asks for, and keeps the segment it reads open
/// between passes. Used only by read passes, on the transport's event loop,
/// with no lock held.
final class LogReader {
    let name: NotificationName
    /// The last pass stopped at ``LogCursorStateMachine/bytesPerPass`` with more to read.
    private(set) var hasMore = false
    /// Notifications the last pass found lost after the last record it read.
    private(set) var missedAfterRecords = 0
    private let sharing: DirectorySharing
    private var machine: LogCursorStateMachine
    // The segment being read.
    private var open: OpenSegment?

    private final class OpenSegment {
        let file: FileDescriptor
        init(file: consuming FileDescriptor) { self.file = file }
    }

    init(name: NotificationName, start: LogPosition, redeliveringThrough: LogPosition?, sharing: DirectorySharing) {
        self.name = name
        self.sharing = sharing
        self.machine = LogCursorStateMachine(name: name, start: start, redeliveringThrough: redeliveringThrough)
    }

    /// Reads the records written past the cursor, moving on to newer segments
    /// by their rollover marks.
    func readNew(
        root: String, decoder: inout EnvelopeDecoder, counters: FileSignalCounters, maximumRecords: Int? = nil
    ) -> [LogRecord] {
        var action = machine.startPass(maximumRecords: maximumRecords)
        while true {
            let event: LogCursorStateMachine.Event
            switch action {
            case .finish:
                let result = machine.takeResult()
                hasMore = result.hasMore
                missedAfterRecords = result.missedAfterRecords
                if result.corruptRecordsSkipped > 0 {
                    counters.corruptRecordsSkipped.add(result.corruptRecordsSkipped, ordering: .relaxed)
                }
                if result.shrunkSegments > 0 { counters.shrunkSegments.add(result.shrunkSegments, ordering: .relaxed) }
                if result.vanishedSegments > 0 {
                    counters.vanishedSegments.add(result.vanishedSegments, ordering: .relaxed)
                }
                if result.refusedFiles > 0 { counters.refusedFiles.add(result.refusedFiles, ordering: .relaxed) }
                return result.records
            case .open(let segment):
                open = nil
                switch FileLog.open(FileLog.segmentPath(root, name, segment), create: false, sharing: sharing) {
                case .success(let file):
                    open = OpenSegment(file: file)
                    event = .opened
                case .failure(let error):
                    // Listed after the open failed: a segment renamed into
                    // place meanwhile (the writer that wrote the rollover
                    // mark had not yet) is there now, and must not be
                    // passed for a later one it had time to start.
                    let refused = error.code == .insecureDirectory
                    let segments = FileLog.segments(root, name)
                    event = .openFailed(
                        refused: refused,
                        nextSegment: !refused && segments.contains(segment) ? nil : segments.first { $0 > segment })
                }
            case .measure:
                if let current = open, case .success(let info) = SystemCalls.fileStatus(current.file) {
                    event = .measured(size: info.size, links: info.links)
                } else {
                    event = .measureFailed
                }
            case .checkRestart:
                // The newest segment's start mark names the log writers
                // append to now.
                event = .newestLogFound(
                    FileLog.segments(root, name).last.flatMap {
                        FileLog.logIdentifier(root, name, $0, sharing: sharing)
                    })
            case .read(let offset, let count):
                if let current = open, case .success(let bytes) = FileLog.read(current.file, at: offset, count: count) {
                    event = .read(bytes)
                } else {
                    event = .readFailed
                }
            case .findNext(let segment):
                // Asked only of a segment removed or of format 1, which no
                // rollover mark leads on from: the directory says.
                event = .nextFound(FileLog.segments(root, name).first { $0 > segment })
            }
            if open == nil { machine.segmentClosed() }
            action = machine.receive(event, decoder: &decoder)
        }
    }
}

extension NotificationHub where Transport == FileSignalTransport {
    /// The newest notification of type `N` in the log, with its metadata,
    /// without observing; `nil` if there is none or it does not decode as `N`.
    public func latest<N: TypedNotification>(of type: N.Type) throws(TypedNotificationError)
        -> DeliveredNotification<N>?
    {
        try latest(of: type, named: try N.name.validated(declaredBy: N.self))
    }

    /// The newest value posted under `name`, chosen at run time, decoded as
    /// `type`, with its metadata, without observing; `nil` if there is none
    /// or it does not decode as `type`.
    public func latest<Payload: DarwinPayload>(of type: Payload.Type, named name: NotificationName)
        throws(TypedNotificationError) -> DeliveredNotification<Payload>?
    {
        guard let message = try transport.latestMessage(of: try name.validated()) else { return nil }
        return DeliveredNotification(decoding: message, missed: 0)
    }
}

/// What the read passes keep between them.
final class FileReading: @unchecked Sendable {
    // Sendable: created by `open` and then used only by read passes, which
    // run as jobs and timers of the transport's event loop: on its thread,
    // or after it stopped on the one thread draining its jobs, never two at
    // a time. Other threads only read the `let` receiver, itself Sendable.
    let receiver: TransportReceiver
    var decoder = EnvelopeDecoder()
    var removalWatch: RemovalWatch
    // The logs' change events (inotify), which log each watch is for, the
    // logs not watched yet (their directory could not be watched: read on
    // every pass), and the names to read on the next pass whatever the events.
    private let monitor: DirectoryMonitor
    private var watchIndex: [NotificationName: Int] = [:]
    private var watchedNames: [Int: NotificationName] = [:]
    private var unwatched: Set<NotificationName> = []
    private var due: Set<NotificationName> = []

    init(receiver: TransportReceiver, root: RecordedPath?, monitor: DirectoryMonitor) {
        self.receiver = receiver
        self.removalWatch = RemovalWatch([root].compactMap { $0 })
        self.monitor = monitor
    }

    /// Names to read on the next pass even without a change event (a reader
    /// stopped with more to read).
    func markDue(_ names: [NotificationName]) {
        due.formUnion(names)
    }

    /// Reads the change events since the last look and watches the logs of
    /// names newly subscribed (and of those whose directory was removed, and
    /// perhaps made again, losing its watch). Returns the names to read: those
    /// whose log changed, the new ones, the unwatched ones and those due; `nil`
    /// when the events overflowed and every log must be read.
    func changedNames(newlySubscribed: [NotificationName], in root: String) -> Set<NotificationName>? {
        let changed = monitor.changes()
        _ = monitor.takeCreations()
        var names = due
        due = []
        for index in monitor.takeLostWatches() {
            guard let name = watchedNames.removeValue(forKey: index) else { continue }
            watchIndex[name] = nil
            unwatched.insert(name)
        }
        for name in newlySubscribed where watchIndex[name] == nil {
            unwatched.insert(name)
        }
        for name in unwatched {
            names.insert(name)
            if let index = try? monitor.watch(FileLog.nameDirectory(root, name)) {
                watchIndex[name] = index
                watchedNames[index] = name
                unwatched.remove(name)
            }
        }
        names.formUnion(newlySubscribed)
        guard let changed else { return nil }
        for index in changed {
            if let name = watchedNames[index] { names.insert(name) }
        }
        return names
    }
}
