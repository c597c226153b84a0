import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// The receive path: read passes on the transport's event loop, the
// hand-over to the center, and a durable identity's commits.
extension FileSignalTransport {
    /// The loop's wait on Linux: sleeps in the read of the change events,
    /// at most `timeoutMilliseconds` (-1: without limit), and makes a read
    /// pass when a change came.
    func sleepForChanges(_ timeoutMilliseconds: CInt) {
        guard let bound = state.withLock({ $0.shared.receiving }) else { return }
        if bound.value.sleep(timeoutMilliseconds: timeoutMilliseconds) { readPass() }
    }

    /// Reads subscribed logs and hands what is new to the center: a change
    /// event only says when to look, and which log to look at.
    ///
    /// With `thorough` (the poll, without change events; or something the
    /// logs depend on changed), every subscribed log is read; else only
    /// those whose directory changed, new subscriptions and readers with
    /// more to read, so a wake-up costs the same however many names are
    /// observed.
    func readPass(thorough: Bool = false) {
        passQueued.store(false, ordering: .releasing)
        guard
            let (bound, subscribed) = state.withLock({ state -> (LoopBound<FileReading>, [NotificationName])? in
                guard let receiving = state.shared.receiving else { return nil }
                defer { state.shared.newlySubscribed = [] }
                return (receiving, state.shared.newlySubscribed)
            })
        else { return }
        let checking = bound.value
        let structural = structureChanged.exchange(false, ordering: .acquiringAndReleasing)
        if structural {
            guard lookAtStructure(checking) else { return }
        }
        let thorough = thorough || structural
        // The change events, and watches for new logs, on this thread, which
        // alone uses the monitor, with no lock held.
        let changed = checking.changedNames(newlySubscribed: subscribed, in: directory)
        // A log that could not be watched (not for its folder: a folder
        // made or replaced comes as an event) is read by every pass: one is
        // made in 1, 2, 4 … 64 s, which watches it again.
        if checking.hasUnwatchable {
            scheduleRetry(after: min(64, 1 << min(checking.unwatchableRetries, 6)))
            checking.unwatchableRetries += 1
        } else {
            checking.unwatchableRetries = 0
        }
        // Logs made in a subscribed namespace: their readers are read by
        // the pass requested here, which watches their directories first.
        let (discovering, relist, namespaces) = state.withLock { state in
            defer { state.shared.discoveringChanged = false }
            return (!state.shared.discovering.isEmpty, state.shared.discoveringChanged, state.shared.namespaces)
        }
        if let found = checking.newLogs(
            in: directory, wanted: discovering, relist: relist || changed == nil || structural),
            discover(found.listAll ? nil : found.entries)
        {
            requestPass()
        }
        if let signal = checking.takeNewSignalDescriptor(), configuration.usesChangeEvents {
            // Apple platforms: posters' signals wake the loop (see DirectoryMonitor).
            _ = loop.register(signal) { [weak self] in self?.readPass() }
        }
        // Names that waited for their observers first (oldest first, a few a
        // pass), then those the change events name.
        let waited = checking.takeWaiting(Self.waitingPerPass)
        var candidates = waited
        // What may have news (`nil`: every candidate): those, and those the
        // events name. The others a thorough pass reads as a safety net,
        // and if their observers cannot take more now, they are not made to
        // wait: the next thorough pass looks again.
        var mayHaveNews: Set<NotificationName>?
        if thorough || changed == nil {
            candidates += state.withLock { Array($0.shared.readers.keys) }
            if let changed { mayHaveNews = changed.union(waited) }
        } else {
            candidates += changed ?? []
        }
        let wereWaiting = checking.stopWaiting(for: candidates)
        mayHaveNews?.formUnion(wereWaiting)
        // Decided under the lock: which readers read. The reading itself
        // happens after, with no lock held, so a subscribe or a post never
        // waits behind a pread.
        let plan = state.withLock {
            state -> (UInt64, [(name: NotificationName, reader: LogReader)], Int)? in
            guard state.lifecycle.isOpen, state.shared.receiving === bound else { return nil }
            let plan = candidates.compactMap { name in state.shared.readers[name].map { (name: name, reader: $0) } }
            return (readersChanged.load(ordering: .acquiring), plan, state.shared.readers.count)
        }
        guard let (generation, planned, readerCount) = plan else { return }
        // Up to this many readers keep their segment open between passes.
        let keepingOpen = readerCount <= Self.openSegmentsKept
        let sharesRooms = !namespaces.isEmpty
        // Names whose observers cannot take more now, looked at again in
        // 1 ms; names left for the next pass because this one filled a
        // namespace observer's buffer.
        var held: Set<NotificationName> = []
        var deferred: [NotificationName] = []
        var handedOver = 0
        var full = false
        var read: [(name: NotificationName, reader: LogReader, records: [LogRecord])] = []
        // A name comes twice only when it waited and has news too.
        var examined: Set<NotificationName>? = waited.isEmpty ? nil : []
        for (name, reader) in planned where examined?.insert(name).inserted ?? true {
            let covered = sharesRooms && namespaces.contains { $0.contains(name) }
            let waits = mayHaveNews?.contains(name) ?? true
            // A namespace observer's buffer is full: its other names wait,
            // unasked, so a pass costs what it hands over, not the names.
            if covered && full {
                if waits, handedOver > 0 { deferred.append(name) } else if waits { held.insert(name) }
                continue
            }
            // A name whose observers have a slice waiting is not read now:
            // the log keeps it, and reading on would only overflow their
            // buffers. Asked with no lock of this transport held: the
            // center's own lock comes before it.
            guard !checking.receiver.isBackedUp(name) else {
                if waits { held.insert(name) }
                full = full || covered
                continue
            }
            // No pass hands a name's observers more than they can still
            // buffer, so a buffering policy never drops what the log keeps:
            // a durable identity must deliver it, and a plain observer gets
            // a backlog whole. A namespace observer's buffer takes the
            // records of many names: each name's count against the next's.
            let room = checking.receiver.room(for: name).map { covered ? $0 - handedOver : $0 }
            if let left = room, left <= 0 {
                if waits, handedOver > 0, covered { deferred.append(name) } else if waits { held.insert(name) }
                full = full || covered
                continue
            }
            let records = reader.readNew(
                root: directory, decoder: &checking.decoder, counters: counters, maximumRecords: room,
                segmentsChanged: checking.createdSegments?.contains(name) ?? true,
                keepingOpen: keepingOpen && !checking.isUnwatched(name))
            handedOver += records.count
            read.append((name, reader, records))
        }
        // A name unsubscribed (or subscribed again, with a reader of its own)
        // meanwhile: what its old reader read is for nobody. Rare, so looked
        // at under the lock only when a reader was added or removed.
        if readersChanged.load(ordering: .acquiring) != generation {
            let readBy = read.map { ($0.name, ObjectIdentifier($0.reader)) }
            let current = state.withLock { state in
                readBy.map { name, reader in state.shared.readers[name].map(ObjectIdentifier.init) == reader }
            }
            read = zip(read, current).filter { $0.1 }.map(\.0)
        }
        // Held names are looked at again by the recheck, not by a pass
        // queued at once (which would spin while their observers catch up).
        let batches = (
            records: read.map {
                (
                    $0.name, $0.records,
                    (
                        missed: $0.reader.missedAfterRecords, refused: $0.reader.refusedAfterRecords,
                        skippedThrough: $0.reader.skippedThrough
                    )
                )
            },
            hasMore: read.filter { $0.reader.hasMore }.map(\.name)
        )
        checking.markDue(batches.hasMore)
        // Looked at again after the others waiting: in 1 ms when their
        // observers were full, at once when this pass filled them.
        checking.wait(deferred + held)
        if let removal = checking.removalWatch.removal() {
            checking.receiver.fail(removal)
            return
        }
        saveDueCursors()
        for (name, records, after) in batches.records {
            if !records.isEmpty { deliver(records, of: name, to: checking.receiver) }
            checking.receiver.report(missed: after.missed, refused: after.refused, of: name)
            if let skipped = after.skippedThrough { passOver(through: skipped, of: name) }
        }
        // Behind the handler jobs these records just queued on this thread.
        if !batches.hasMore.isEmpty || !deferred.isEmpty { requestPass() }
        // Names still waiting beyond this pass's few: looked at in 1 ms.
        if !held.isEmpty || (deferred.isEmpty && checking.hasWaiting) { scheduleRecheck() }
    }

    /// Something the logs depend on changed (see `watchDirectory`): is the
    /// directory gone? Then observers are told, and this returns `false`.
    /// Else the path watches are made again if a watched path names
    /// another file now, and the read pass's watches looked at against
    /// their paths. A watch that cannot be made is tried again in a second,
    /// at most ``Self/rewatchAttempts`` times in a row, then reported.
    private func lookAtStructure(_ checking: FileReading) -> Bool {
        if let removal = checking.removalWatch.removal(throttled: false) {
            checking.receiver.fail(removal)
            return false
        }
        checking.recheckEverything()
        // `DIR/logs` missing: an `rm -rf` of the directory may be under
        // way, and the directory's own end comes only once nothing holds it
        // (a segment this process keeps open does). Looked at again in 1,
        // 2, 4 … 32 s, until it is made again or the directory is gone.
        if case .failure = SystemCalls.linkStatus(FileLog.logsDirectory(directory)) {
            if checking.brokenLooks < configuration.looksWhileLogsMissing {
                loop.schedule(after: 1_000_000_000 << checking.brokenLooks) { [weak self] in
                    self?.lookAtEverything()
                }
                checking.brokenLooks += 1
            }
        } else {
            checking.brokenLooks = 0
        }
        guard watches.anyMoved else { return true }
        do throws(TypedNotificationError) {
            try watchDirectory()
            checking.failedRewatches = 0
        } catch {
            checking.failedRewatches += 1
            guard checking.failedRewatches < Self.rewatchAttempts else {
                checking.receiver.fail(error)
                return false
            }
            loop.schedule(after: 1_000_000_000) { [weak self] in self?.lookAtEverything() }
        }
        return true
    }

    /// How many times in a row the path watches may fail to be made again
    /// before observers are told.
    static var rewatchAttempts: Int { 30 }

    /// A pass in `seconds`, unless one is scheduled, for a log that could
    /// not be watched.
    private func scheduleRetry(after seconds: UInt64) {
        guard !retryScheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        loop.schedule(after: seconds * 1_000_000_000) { [weak self] in
            guard let self else { return }
            retryScheduled.store(false, ordering: .releasing)
            readPass()
        }
    }

    /// How many waiting names a pass looks at, besides those with news.
    static var waitingPerPass: Int { 64 }

    /// How many readers may keep their segment open between passes: past
    /// it (a namespace over many names, say), each pass opens what it reads.
    static var openSegmentsKept: Int { 256 }

    /// Lets a durable cursor move past records that were skipped and
    /// reported (refused or corrupt) after the last one handed over, once
    /// the records before them are handled: so a restart does not report
    /// them again. Nothing for a plain observer.
    private func passOver(through position: LogPosition, of name: NotificationName) {
        guard identity != nil else { return }
        let handedOver = commits.withLock { table -> (generation: UInt64, token: UInt64)? in
            guard let generation = table.slots[name]?.generation,
                let token = table.slots[name]?.machine.handOver(endingAt: position)
            else { return nil }
            return (generation, token)
        }
        guard let handedOver else { return }
        handled(handedOver.token, of: name, generation: handedOver.generation)
    }

    /// Looks again in 1 ms at names held back for their observers (their
    /// change events are spent): a few of them a pass, oldest first, not at
    /// every log, so a namespace observer over thousands of names with a
    /// small buffer pays a pass for what it hands over.
    private func scheduleRecheck() {
        guard !recheckScheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        loop.schedule(after: 1_000_000) { [weak self] in
            guard let self else { return }
            recheckScheduled.store(false, ordering: .releasing)
            readPass()
        }
    }

    /// Hands records to the center. For a durable identity, first saves how
    /// far delivery got, so a crash from here on marks them as redeliveries,
    /// and gives each a receipt whose release commits it.
    private func deliver(_ records: [LogRecord], of name: NotificationName, to receiver: TransportReceiver) {
        guard identity != nil else {
            for record in records {
                receiver.report(missed: record.missedBefore, refused: record.refusedBefore, of: name)
                counters.add(to: .delivered)
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
            // A message an observer's buffer dropped is never committed, nor
            // one that every observer holding it ended with unhandled (or
            // that came when nobody observed the name): it comes again,
            // marked, on the next run.
            message.receipt = DeliveryReceipt.unlessAbandonedOrDropped { [weak self] in
                self?.handled(token, of: name, generation: generation)
            }
            receiver.report(missed: record.missedBefore, refused: record.refusedBefore, of: name)
            counters.add(to: .delivered)
            receiver.receive(message)
        }
    }

    /// Every observer handled the record with `token`: commit it. The cursor
    /// file is written by the reader thread (woken once for many commits), or
    /// here once the transport is closed or the name unsubscribed: a loop
    /// body or a handler that was running when its observer was cancelled
    /// has handled its record when it ends, after the unsubscribe.
    private func handled(_ token: UInt64, of name: NotificationName, generation: UInt64) {
        let action = commits.withLock { table -> (wake: Bool, save: Bool) in
            guard table.slots[name]?.generation == generation else {
                let moved =
                    table.departed[name]?.generation == generation
                    && table.departed[name]?.machine.handled(token) == true
                return (false, moved)
            }
            guard table.slots[name]?.machine.handled(token) == true else { return (false, false) }
            if table.isClosed { return (false, true) }
            guard table.slots[name]?.savePending == false else { return (false, false) }
            table.slots[name]?.savePending = true
            return (true, false)
        }
        if action.wake { loop.execute { [weak self] in self?.saveDueCursors() } }
        if action.save { saveCursor(of: name) }
    }

    /// Writes `name`'s cursor (see ``CursorSaver/save(of:else:)``).
    func saveCursor(of name: NotificationName, else fallback: FileCursor? = nil) {
        cursorSaver.save(of: name, else: fallback)
    }

    /// Writes the cursors whose committed position moved since last saved
    /// (see ``CursorSaver/saveDue(closing:)``).
    func saveDueCursors(closing: Bool = false) {
        cursorSaver.saveDue(closing: closing)
    }
}

/// A durable identity's commit state for each subscribed name.
struct CommitTable {
    /// Counts subscriptions, so receipts of an earlier one are ignored.
    var generation: UInt64 = 0
    var slots: [NotificationName: CommitSlot] = [:]
    /// Names unsubscribed with records still in hand, until subscribed
    /// again: what is handled after the unsubscribe is still committed.
    var departed: [NotificationName: CommitSlot] = [:]
    /// Why a saved cursor could not be used, by name.
    var problems: [NotificationName: String] = [:]
    /// Why a namespace's marker could not be used, by namespace.
    var namespaceProblems: [NotificationNamespace: String] = [:]
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
    /// What the cursor file was last written with, by this transport.
    var saved: FileCursor?

    var cursor: FileCursor { FileCursor(committed: machine.committed, delivered: machine.delivered) }
}

/// A record read from a log, and where it ends.
struct LogRecord {
    var message: TransportMessage
    var end: LogPosition
    /// Notifications the log lost just before this one (retention, corruption).
    var missedBefore = 0
    /// Of ``missedBefore``, those refused as over the center's payload limit.
    var refusedBefore = 0
}

extension TransportReceiver {
    /// Reports `missed` notifications of `name`, `refused` of them as over
    /// the center's payload limit.
    func report(missed lost: Int, refused: Int, of name: NotificationName) {
        self.refused(MissedNotifications(count: refused, name: name))
        self.missed(MissedNotifications(count: lost - refused, name: name))
    }
}

/// The skeleton of a ``FileSignalTransport``: open, it keeps nothing.
typealias FileCore = TransportCore<Void, FileSignalState, FileSignalStatistics>

/// What a ``FileSignalTransport`` changes after creation, under its core's
/// lock beside the lifecycle.
struct FileSignalState {
    /// The logs' change events until `open` hands them to the read passes.
    var unopenedMonitor: DirectoryMonitor?
    /// One reader per name read, whether subscribed by name, covered by a
    /// subscribed namespace, or both.
    var readers: [NotificationName: LogReader] = [:]
    /// The names subscribed by name, and the namespaces subscribed: a name
    /// is read while either covers it.
    var named: Set<NotificationName> = []
    var namespaces: Set<NotificationNamespace> = []
    /// When the first namespace still subscribed was subscribed: where
    /// plain readers of logs found later begin to promise.
    var namespacesSince: Int64?
    /// The namespaces whose subscribe has listed the logs there were: the
    /// loop starts reading logs made later in these; changed since the
    /// loop last listed `DIR/logs`.
    var discovering: Set<NotificationNamespace> = []
    var discoveringChanged = false
    /// Names subscribed since the last read pass, which watches their logs.
    var newlySubscribed: [NotificationName] = []
    /// What the loop's read passes keep, from `open` on.
    var receiving: LoopBound<FileReading>?

    init(monitor: DirectoryMonitor) {
        unopenedMonitor = monitor
    }
}
