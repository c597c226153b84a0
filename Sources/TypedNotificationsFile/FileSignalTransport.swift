import Dispatch
import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Durable typed notifications through a shared directory: the app-group
/// model, done right.
///
/// A post appends its envelope to the name's log and the append itself is the
/// wake-up signal (inotify on Linux, notify(3) on Apple platforms; a poll
/// every ``FileSignalConfiguration/pollInterval`` only where change events are
/// turned off). An idle observer makes no system call until something changes
/// in its directory: what else it must notice (its directory or one above it
/// moved or removed, a log's folder made again) comes as an event too.
/// Observers read what is new past their cursor. Because
/// the log is the truth, a lost or coalesced signal loses nothing, and two
/// quick posts are both kept and delivered, in order.
///
/// - **Woken by the change itself:** on Linux the reading thread of the
///   process's first two file transports sleeps in a blocking `read` of an
///   inotify instance of its own, not in `epoll`, so the event that wakes it
///   is taken by the same call. Its other work reaches it through that
///   instance: a one-byte write to an unnamed file of its own that the
///   instance watches, and, for timers, a wake-up from one deadline thread
///   per process (see *Design decisions*). Further file transports in the
///   process share its one instance and wait in `epoll`; Apple platforms
///   wait in `kqueue`.
/// - A plain observer starts at the end of the log, new notifications only,
///   unless the transport's `firstRead` says the beginning or the newest records.
/// - A transport created with an `identity` (say `"widget"`) keeps a durable
///   cursor per name and resumes where it stopped after a restart, a crash or
///   a suspension: **at least once, never less.** Its first run starts where
///   `firstRead` says (the log's end by default). The cursor moves past a
///   notification only once every observer of the name has handled it (a
///   handler returned; a `for await` loop asked for the next element; see
///   `DeliveryReceipt`). After a crash, what was handed over and not yet
///   handled is delivered again, marked ``NotificationDelivery/isRedelivery``;
///   nothing is skipped. A cursor file that cannot be used (a FIFO, garbage,
///   past the end) is reported in ``FileSignalStatistics/invalidCursors`` and
///   ``cursorProblem(for:)``, and reading starts at the oldest record the log
///   still has, each marked as a redelivery.
/// - An observer of a namespace reads every log of a name in it: those there
///   when it subscribed as above, and each log made later from its first
///   record. A durable identity in a namespace reads a name that appeared
///   while it was away from its first record, at least once; with its
///   marker unreadable (``cursorProblem(in:)``), from its oldest, marked.
/// - `NotificationHub.latest(_:)` reads the newest notification without observing.
/// - Segments roll by size and are deleted by ``FileRetentionPolicy`` once every
///   durable cursor is past them, so disk use stays bounded.
public final class FileSignalTransport: KeepsLatest {
    /// The shared directory.
    package let directory: String
    /// The durable identity whose cursors this transport keeps, if any.
    package let identity: String?
    /// Where reading a name starts when there is no saved cursor for it: for
    /// a plain observer always, for a durable identity on its first run.
    package let firstRead: ReadStart
    /// Limits and policies.
    package let configuration: FileSignalConfiguration

    // The thread that reads the logs, saves cursors and runs the jobs of the
    // hub's executor; the counters; the lifecycle with the readers.
    let core: FileCore
    // What the durable identity's observers handled: its own lock, taken by
    // whatever thread lets go of a receipt, never across a system call.
    let commits = Locked<CommitTable>(CommitTable())
    // Appenders not in use, by name; a send takes its name's out while it
    // appends. Closed with the transport: nothing is put back after.
    let appenders = Locked(AppenderTable())
    // A read pass is queued on the loop and has not started yet.
    let passQueued = Atomic<Bool>(false)
    // Writes the identity's cursor files, also after the transport is gone.
    let cursorSaver: CursorSaver
    // A pass for names held back for their observers is scheduled.
    let recheckScheduled = Atomic<Bool>(false)
    // What the logs depend on, watched (see `watchDirectory`); a change
    // there asks the next pass to look at everything.
    let watches = Locked(DirectoryWatches())
    let structureChanged = Atomic<Bool>(false)
    // A pass is scheduled to watch again what could not be watched.
    let retryScheduled = Atomic<Bool>(false)
    // Bumped under the state lock whenever a reader is added or removed, so
    // a read pass, which reads with no lock held, knows without taking the
    // lock again whether the readers it read are still the current ones.
    let readersChanged = Atomic<UInt64>(0)
    // The shared directory as it was when opened: if it goes, observers are told.
    private let root: RecordedPath?
    // The directory's identity, which names its notify(3) signals (see
    // FileLog.signalName): read when opened and again whenever a log is
    // started, so a directory made anew under the same path is followed.
    let signalDirectory: Locked<FileIdentity?>
    // On Linux the loop's thread sleeps in the read of its change events
    // (see `sleepForChanges`): what it does there, set by `open`.
    private let receiveCall: LoopReceiveCall?

    /// A directory for this user: `$XDG_RUNTIME_DIR/typed-notifications-files`,
    /// else `/tmp/typed-notifications-files-<uid>`.
    public static var defaultDirectory: String {
        SystemProcess.runtimeDirectory(named: "typed-notifications-files")
    }

    /// Creates the directory structure if needed and checks it.
    ///
    /// - Parameters:
    ///   - directory: The shared directory; created 0700 if missing (0770 when
    ///     shared with a group).
    ///   - identity: A durable identity such as `"widget"`, following the rules
    ///     of endpoint labels; `nil` for a plain observer.
    ///   - firstRead: Where reading a name starts when there is no saved
    ///     cursor for it (a plain observer, or a durable identity's first
    ///     run): the log's end (new notifications only, the default), its
    ///     beginning, or its newest records. A durable identity with a saved
    ///     cursor always resumes there.
    ///   - configuration: Limits and policies.
    /// - Throws: ``TypedNotificationError`` for an insecure directory or an
    ///   invalid identity; ``TypedNotificationError/Code/pathTooLong`` for a
    ///   directory so long that a path the transport makes below it would
    ///   not fit in `PATH_MAX` (on Linux, more than 3,783 bytes), before
    ///   anything is created.
    public init(
        directory: String = FileSignalTransport.defaultDirectory,
        identity: String? = nil,
        firstRead: ReadStart = .end,
        configuration: FileSignalConfiguration = FileSignalConfiguration()
    ) throws(TypedNotificationError) {
        let directory = directory.count > 1 && directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        if let identity, let problem = NotificationName.problem(with: identity.utf8, maximumLength: 64) {
            throw TypedNotificationError(
                code: .invalidEndpoint, message: "identity \(TypedNotificationError.quote(identity)) \(problem)")
        }
        try FileLog.checkDirectory(directory)
        self.directory = directory
        self.identity = identity
        self.firstRead = firstRead
        self.configuration = configuration
        cursorSaver = CursorSaver(
            directory: directory, identity: identity, sharing: configuration.sharing, commits: commits)
        // A write past RLIMIT_FSIZE must fail with EFBIG, not kill the process.
        SystemCalls.ignoreFileSizeSignal()
        try SharedDirectory.prepare(directory, sharing: configuration.sharing)
        // Each made again if another process removes it meanwhile.
        try SharedDirectory.prepare(chain: [FileLog.logsDirectory(directory)], sharing: configuration.sharing)
        let cursors = FileLog.cursorsDirectory(directory)
        try SharedDirectory.prepare(
            chain: [cursors] + (identity.map { [cursors + "/" + $0] } ?? []), sharing: configuration.sharing)
        root = RecordedPath(directory)
        signalDirectory = Locked(FileLog.directoryIdentity(directory))
        // On Linux the loop's thread sleeps in the read of an inotify
        // instance of its own, so the change that wakes it is taken by the
        // same call; work for the loop and timers come in through it too
        // (see ChangeSleeper). Elsewhere, or when the process already has
        // its few such instances, it shares a thread of the loop group.
        let sleeping =
            configuration.usesChangeEvents && configuration.sleepsInRead
            ? DirectoryMonitor.sleeping(
                includingModifications: true, beyondLimit: configuration.sleepsInReadBeyondLimit) : nil
        let wakeUp = sleeping?.wakeUp
        let receiveCall = wakeUp.map { _ in LoopReceiveCall() }
        self.receiveCall = receiveCall
        let loop: EventLoop
        if let wakeUp, let receiveCall {
            loop = try FileCore.makeLoop(
                named: "TypedNotifications.FileSignalTransport", for: directory,
                waiting: .receiving({ receiveCall($0) }, wake: wakeUp))
        } else {
            loop = try FileCore.sharedLoop(
                named: "TypedNotifications.FileSignalTransport", for: directory, in: configuration.loopGroup)
        }
        do throws(ChangeMonitorError) {
            let monitor: DirectoryMonitor
            if let sleeping {
                monitor = sleeping
            } else {
                monitor = try DirectoryMonitor(includingModifications: true)
            }
            core = FileCore(kind: "file", loop: loop, shared: FileSignalState(monitor: monitor))
        } catch {
            throw SharedDirectory.failure(error, "could not set up change notifications for \(directory)")
        }
    }

    deinit {
        close()
    }

    /// Counters since the transport was created.
    public var statistics: FileSignalStatistics { counters.snapshot }

    /// Whether the reading thread sleeps in the read of its change events
    /// (Linux, for the process's first few file transports), rather than in
    /// the system's event queue.
    package var sleepsInRead: Bool { receiveCall != nil }

    /// File-plus-signal transports carry envelopes.
    @_spi(TransportAuthoring) public var payloadForm: TransportPayloadForm { .encoded }

    /// The lifecycle and the readers, under the core's lock.
    var state: Locked<FileCore.State> { core.state }

    /// `true`: the log numbers every record, so a reader counts exactly what
    /// retention deleted or corruption destroyed before it read it, of every
    /// sender, including senders it never heard from.
    @_spi(TransportAuthoring) public var reportsEveryMissedNotification: Bool { true }

    /// Starts the event-loop thread that reads the logs.
    @_spi(TransportAuthoring) public func open(as sender: NotificationSender, receiver: TransportReceiver)
        throws(TypedNotificationError)
    {
        let monitorDescriptor = try core.open(()) {
            (shared: inout FileSignalState) throws(TypedNotificationError) -> CInt? in
            guard let monitor = shared.unopenedMonitor.take() else {
                // The monitor is taken by the one open there is.
                throw TypedNotificationError(code: .closed, message: "this file transport was already opened")
            }
            // Under the state lock, so a close cannot come in between and
            // leave the appenders open after it.
            appenders.withLock { $0.isOpen = true }
            shared.receiving = core.onThread(FileReading(receiver: receiver, root: root, monitor: monitor))
            // The process's hubs share one change queue: events for this
            // transport that another one read come by this call.
            if configuration.usesChangeEvents, let descriptor = monitor.pollDescriptor {
                monitor.whenChangedElsewhere = { [loop] in loop.markReadable(descriptor) }
            }
            return monitor.pollDescriptor
        }
        if configuration.usesChangeEvents, let monitorDescriptor {
            do throws(Errno) {
                try loop.register(monitorDescriptor, exclusive: true) { [weak self] in self?.readPass() }.get()
            } catch {
                throw SharedDirectory.failure(error, "could not watch the logs in \(directory)")
            }
        }
        receiveCall?.set { [weak self] timeout in self?.sleepForChanges(timeout) }
        if configuration.usesChangeEvents {
            // An idle reader sleeps until a change: every change a pass
            // would look for comes as an event (see `watchDirectory`).
            try watchDirectory()
        } else {
            schedulePolls(every: UInt64(max(1, configuration.pollInterval.clampedMilliseconds)) * 1_000_000)
        }
        loop.start()
    }

    /// Watches what the logs depend on, so that a change there wakes the
    /// loop for a pass that looks at everything (``lookAtEverything()``):
    /// every directory and symbolic link the directory's path goes through
    /// (renamed or removed, or a link made to lead elsewhere, any of them
    /// takes the directory away), the directory itself (removed or moved,
    /// and its entries: `logs` removed, renamed or made again), every
    /// mount, and `DIR/logs` (removed or moved; where the read pass's own
    /// monitor does not name the logs made there, Apple platforms, its
    /// entries too). A fixed number of watches, however many names are
    /// read; made again when a watched path names another file.
    ///
    /// A path missing now (`DIR/logs` during an `rm -rf`) is watched once
    /// it is made again, which changes the directory's entries.
    func watchDirectory() throws(TypedNotificationError) {
        let look: @Sendable () -> Void = { [weak self] in self?.lookAtEverything() }
        let absolute = SharedDirectory.absolute(directory)
        var paths = SharedPaths.pathsTraversed(to: absolute).map { ($0, PathEvents.removedOrMoved, look) }
        paths.append((absolute, [.removedOrMoved, .entries], look))
        if DirectoryMonitor.usesSignals {
            paths.append((FileLog.logsDirectory(absolute), .removedOrMoved, look))
            let pass: @Sendable () -> Void = { [weak self] in self?.requestPass() }
            paths.append((FileLog.logsDirectory(absolute), .entries, pass))
        } else {
            paths.append((FileLog.logsDirectory(absolute), .removedOrMoved, look))
        }
        do throws(ChangeMonitorError) {
            _ = try watches.watch(paths) { [weak self] in self?.lookIfMoved() }
        } catch {
            throw SharedDirectory.failure(error, "could not watch \(directory)")
        }
    }

    /// Called on the path watcher's thread after a mount or an overflow:
    /// asks for a look if one of the watched paths names another file.
    private func lookIfMoved() {
        if watches.anyMoved { lookAtEverything() }
    }

    /// Something the logs depend on changed: the next pass looks whether
    /// the directory is still there, watches again what left its path, and
    /// reads every log. Called on the path watcher's thread, and by the
    /// loop's timers while something is broken.
    func lookAtEverything() {
        structureChanged.store(true, ordering: .releasing)
        requestPass()
    }

    /// The transport's event loop, which also runs the jobs of its hub's
    /// executor, so a notification it reads reaches a handler there without
    /// waking another thread.
    @_spi(TransportAuthoring) public var deliveryExecutor: (any TaskExecutor & SerialExecutor)? { loop }

    private func schedulePolls(every interval: UInt64) {
        loop.schedule(after: interval) { [weak self] in
            guard let self else { return }
            readPass(thorough: true)
            schedulePolls(every: interval)
        }
    }

    /// Queues one read pass on the loop, unless one is queued already.
    func requestPass() {
        guard !passQueued.exchange(true, ordering: .acquiringAndReleasing) else { return }
        loop.execute { [weak self] in self?.readPass() }
    }

    /// Starts reading the log of the name `selector` says, or the log of
    /// every name in its namespace, those made later included: at the end,
    /// or at this identity's saved cursor. A cursor that cannot be used
    /// starts at the oldest record the log still has (see
    /// ``cursorProblem(for:)``).
    ///
    /// A namespace's logs made after this call are read from their first
    /// record. A durable identity that observes a namespace leaves a marker
    /// beside its cursors: on its next run, a name of the namespace that
    /// appeared while it was away is read from its first record, and
    /// retention keeps such a log for it as for a cursor.
    ///
    /// - Throws: ``TypedNotificationError/Code/invalidName`` for an invalid
    ///   selector; ``TypedNotificationError/Code/closed`` when closed.
    @_spi(TransportAuthoring) public func subscribe(to selector: NotificationSelector) throws(TypedNotificationError) {
        switch try selector.validated() {
        case .name(let name): try subscribe(name: name)
        case .namespace(let namespace): try subscribe(namespace: namespace)
        }
    }

    private func subscribe(name: NotificationName) throws(TypedNotificationError) {
        try FileLog.prepareNameDirectory(directory, name, sharing: configuration.sharing)
        // Covered by a subscribed namespace already: its reader serves both.
        let reading = try state.withLock { (state: inout FileCore.State) throws(TypedNotificationError) in
            _ = try state.lifecycle.opened(for: "subscribe")
            guard state.shared.readers[name] != nil else { return false }
            state.shared.named.insert(name)
            return true
        }
        if reading { return }
        let subscribedAt = SystemClock.wallClockNanoseconds()
        try startReading(name, from: startingPoint(for: name), subscribedAt: subscribedAt, byName: true)
        requestPass()
    }

    /// Adds a reader for `name` from `start` unless one is there (for a
    /// durable identity, with its commit slot and its cursor saved), and
    /// records that `name` is subscribed by name when `byName`. A plain
    /// reader promises what is posted from `subscribedAt` on.
    func startReading(
        _ name: NotificationName, from start: (position: LogPosition, redeliverThrough: LogPosition?),
        subscribedAt: Int64, byName: Bool
    ) throws(TypedNotificationError) {
        let added = try state.withLock { (state: inout FileCore.State) throws(TypedNotificationError) in
            _ = try state.lifecycle.opened(for: "subscribe")
            if byName { state.shared.named.insert(name) }
            // A namespace's name: unless the namespace was unsubscribed meanwhile.
            guard state.shared.readers[name] == nil,
                byName || state.shared.namespaces.contains(where: { $0.contains(name) })
            else { return false }
            // The read pass requested after this watches the log's directory
            // before it reads, on the event loop: an append before the watch
            // is read by that pass, and one after it wakes the loop.
            readersChanged.wrappingAdd(1, ordering: .releasing)
            // A durable reader's commit slot is there before the reader: a
            // read pass may run the moment the reader is in the table, and
            // what it reads must be handed over into the slot. Read into no
            // slot, its records were passed by, and the commits of the next
            // ones moved the cursor over them (a backlog lost, seen under load).
            // The commit lock nests in the state lock here only; it never
            // takes the state lock.
            if identity != nil {
                let cursor = FileCursor(
                    committed: start.position, delivered: start.redeliverThrough ?? start.position)
                commits.withLock { table in
                    table.generation &+= 1
                    table.departed[name] = nil
                    table.slots[name] = CommitSlot(
                        generation: table.generation,
                        machine: CursorCommitStateMachine(committed: cursor.committed, delivered: cursor.delivered))
                }
            }
            state.shared.newlySubscribed.append(name)
            state.shared.readers[name] = LogReader(
                name: name, start: start.position, redeliveringThrough: start.redeliverThrough,
                subscribedAt: identity == nil ? subscribedAt : nil, sharing: configuration.sharing)
            return true
        }
        guard added, identity != nil else { return }
        // Saved now, so retention keeps what this identity has yet to read.
        saveCursor(of: name)
    }

    /// Stops reading what `selector` says: a name no subscribed namespace
    /// covers, or every name of a namespace that nothing else covers. A
    /// durable cursor stays where its handled notifications left it, and
    /// still moves past one a handler or loop body was handling meanwhile;
    /// the rest of what was in flight is delivered again (marked as a
    /// redelivery) to the next subscription.
    @_spi(TransportAuthoring) public func unsubscribe(from selector: NotificationSelector) {
        let stopped = state.withLock { state -> [NotificationName] in
            let stopped = Self.stopped(by: selector, in: &state.shared)
            if !stopped.isEmpty { readersChanged.wrappingAdd(1, ordering: .releasing) }
            return stopped
        }
        guard !stopped.isEmpty else { return }
        for name in stopped {
            // Saved whether or not a save is pending: one the loop had taken
            // (and cleared the flag for) finds the slot gone and writes
            // nothing, and the last commits would be lost (once in a few
            // hundred stops of a busy durable watcher).
            let slot = commits.withLock { table -> CommitSlot? in
                let slot = table.slots.removeValue(forKey: name)
                if let slot, slot.machine.inFlight > 0 { table.departed[name] = slot }
                return slot
            }
            if identity != nil, let slot {
                saveCursor(of: name, else: slot.cursor)
            }
        }
    }

    /// The newest notification in `name`'s log, without observing it.
    ///
    /// - Throws: ``TypedNotificationError/Code/insecureDirectory`` when a
    ///   segment it would read is refused (a mode wider than the sharing
    ///   allows, another owner), naming it: never a silent "nothing".
    @_spi(TransportAuthoring) public func latestMessage(of name: NotificationName) throws(TypedNotificationError)
        -> TransportMessage?
    {
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

    /// Stops reading and closes the logs, without waiting for the
    /// event-loop thread: once it has finished (a handler running there
    /// returned), how far this identity's observers got is saved, and
    /// `NotificationTransport.whenClosed(_:)` calls back. Nothing it does blocks (every open is
    /// non-blocking); a thread stuck anyway (a hung network file system)
    /// delays only that call-back. Idempotent.
    @_spi(TransportAuthoring) public func close() {
        // The read state is let go after the lock: its descriptors (the
        // segments, a sleeper's inotify instance) close when it goes, and a
        // sleeper gives its place back to the process's later transports.
        let (closing, receiving) = core.close { shared in
            defer {
                shared.readers = [:]
                shared.receiving = nil
            }
            // Never opened: its change events go with it.
            return (shared.receiving, ReleasedReading(shared.readers, shared.unopenedMonitor.take()))
        }
        // The idle appenders too: their files close after the lock.
        let idle = appenders.withLock { table in
            table.isOpen = false
            defer { table.idle = [:] }
            return table.idle
        }
        for watch in watches.withLock({ $0.close() }) { watch.cancel() }
        // Once the loop's thread has finished (it may be this one: a center
        // released while it delivered), the read state goes, and what was
        // handled so far is saved; later commits save themselves.
        let (saver, core, wasOpen) = (cursorSaver, core, closing.wasOpen)
        closing.end(loop) {
            withExtendedLifetime((receiving, idle)) {}
            if wasOpen { saver.saveDue(closing: true) }
            core.finishClosing()
        }
    }
}

/// What a closed transport read with, let go after the state's lock, so
/// that no descriptor closes under it: the readers (their segments), and
/// the change events of a transport never opened.
private final class ReleasedReading: @unchecked Sendable {
    // Sendable: made under the state's lock from the state's references,
    // which it then drops, and never read: it only holds them until the
    // thread that drops it releases them (a read pass on the loop may still
    // hold a reader; whichever lets go last closes its segment). The monitor
    // is one no loop ever used: the transport was never opened.
    private let readers: [NotificationName: LogReader]
    private let monitor: DirectoryMonitor?

    init(_ readers: [NotificationName: LogReader], _ monitor: DirectoryMonitor?) {
        self.readers = readers
        self.monitor = monitor
    }
}

/// Built on the transport skeleton: see ``TransportCore``.
extension FileSignalTransport {
    /// Runs `body` once what `close()` started is done.
    @_spi(TransportAuthoring) public func whenClosed(_ body: @escaping @Sendable () -> Void) {
        core.whenClosed(body)
    }

    /// The transport's thread.
    var loop: EventLoop { core.loop }

    /// Whether it is open now.
    var isOpen: Bool { core.isOpen }

    /// The live counters.
    var counters: Counters<FileSignalStatistics> { core.counters }
}
