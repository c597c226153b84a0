@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

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
    /// Of ``missedAfterRecords``, those refused as over the center's payload limit.
    private(set) var refusedAfterRecords = 0
    /// The end of the last record skipped after the last one read, if any.
    private(set) var skippedThrough: LogPosition?
    private let sharing: DirectorySharing
    private var machine: LogCursorStateMachine
    // The segment being read.
    private var open: OpenSegment?

    private final class OpenSegment {
        let file: FileDescriptor
        let path: String
        init(file: consuming FileDescriptor, path: String) {
            self.file = file
            self.path = path
        }

        /// Whether the file open is no longer the one at its path: its
        /// directory was renamed away (or it was replaced), so for the log
        /// it is as good as unlinked, though it still has a link.
        ///
        /// The corresponding C function is `lstat`.
        func leftItsPath(_ open: FileIdentity) -> Bool {
            guard case .success(let atPath) = SystemCalls.linkStatus(path) else { return true }
            return atPath.identity != open
        }
    }

    init(
        name: NotificationName, start: LogPosition, redeliveringThrough: LogPosition?, subscribedAt: Int64?,
        sharing: DirectorySharing
    ) {
        self.name = name
        self.sharing = sharing
        self.machine = LogCursorStateMachine(
            name: name, start: start, redeliveringThrough: redeliveringThrough, subscribedAt: subscribedAt)
    }

    /// Reads the records written past the cursor, moving on to newer segments
    /// by their rollover marks; closes the segment after unless `keepingOpen`.
    func readNew(
        root: String, decoder: inout EnvelopeDecoder, counters: Counters<FileSignalStatistics>,
        maximumRecords: Int? = nil,
        segmentsChanged: Bool = false,
        keepingOpen: Bool = true
    ) -> [LogRecord] {
        // Closed after the pass when many logs are read, so a namespace
        // over thousands of names holds no descriptor per name.
        defer {
            if !keepingOpen, open != nil {
                open = nil
                machine.segmentClosed()
            }
        }
        var action = machine.startPass(maximumRecords: maximumRecords, segmentsChanged: segmentsChanged)
        while true {
            let event: LogCursorStateMachine.Event
            switch action {
            case .finish:
                let result = machine.takeResult()
                hasMore = result.hasMore
                missedAfterRecords = result.missedAfterRecords
                refusedAfterRecords = result.refusedAfterRecords
                skippedThrough = result.skippedThrough
                if result.oversizedRecords > 0 { counters.add(result.oversizedRecords, to: .refusedOversized) }
                if result.corruptRecordsSkipped > 0 {
                    counters.add(result.corruptRecordsSkipped, to: .corruptRecordsSkipped)
                }
                if result.shrunkSegments > 0 { counters.add(result.shrunkSegments, to: .shrunkSegments) }
                if result.vanishedSegments > 0 {
                    counters.add(result.vanishedSegments, to: .vanishedSegments)
                }
                if result.refusedFiles > 0 { counters.add(result.refusedFiles, to: .refusedFiles) }
                return result.records
            case .open(let segment):
                open = nil
                let path = FileLog.segmentPath(root, name, segment)
                switch FileLog.openForReading(path, sharing: sharing) {
                case .success(let file):
                    open = OpenSegment(file: file, path: path)
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
                if let current = open, case .success(let info) = SystemCalls.fileExtent(current.file) {
                    // Checked only when the directory reported new entries
                    // or was watched anew (a log made again there), so a
                    // wake-up for an append costs no extra call.
                    let gone = info.links > 0 && segmentsChanged && current.leftItsPath(info.identity)
                    event = .measured(size: info.size, links: gone ? 0 : info.links)
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
            case .identify(let segment):
                event = .identified(FileLog.logIdentifier(root, name, segment, sharing: sharing))
            case .read(let offset, let count):
                if let current = open, case .success(let bytes) = FileLog.read(current.file, at: offset, count: count) {
                    Anatomy.received()
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

/// What the read passes keep between them.
/// Used only by the read passes, on the transport's event loop, through a
/// ``LoopBound``.
final class FileReading {
    let receiver: TransportReceiver
    // Refuses what the center would: a record over its limit is skipped
    // and reported as refused.
    var decoder: EnvelopeDecoder
    var removalWatch: RemovalWatch
    // The logs' change events (inotify), which log each watch is for, the
    // logs not watched yet (their directory could not be watched: read on
    // every pass), and the names to read on the next pass whatever the events.
    private let monitor: DirectoryMonitor
    private var watchIndex: [NotificationName: Int] = [:]
    private var watchedNames: [Int: NotificationName] = [:]
    private var unwatched: Set<NotificationName> = []
    private var due: Set<NotificationName> = []
    // Names held back for their observers, oldest first (`waitingSet` says
    // which entries of `waiting` from `waitingHead` on still wait).
    private var waiting: [NotificationName] = []
    private var waitingHead = 0
    private var waitingSet: Set<NotificationName> = []
    // The watch on `DIR/logs`, which names the logs made there: for
    // namespace observers, and to watch again a name's directory made anew
    // at its path while the old one is held open (its end comes only once
    // this reader closes its segment). The names made since the last look
    // (`nil`: list it).
    private var logsWatch: Int?
    private var newLogEntries: [String]? = []
    // Something above the logs changed (see ``recheckEverything()``).
    private var recheckAll = false
    // Apple platforms: the posters' signal descriptor, once made, until the
    // read pass registers it with the loop.
    private var newSignalDescriptor: CInt?

    /// Sleeps in the change events, for a monitor made to sleep in (see
    /// `DirectoryMonitor.sleeping`); whether a change came.
    func sleep(timeoutMilliseconds: CInt) -> Bool {
        monitor.sleep(timeoutMilliseconds: timeoutMilliseconds)
    }

    init(receiver: TransportReceiver, root: RecordedPath?, monitor: DirectoryMonitor) {
        self.receiver = receiver
        self.decoder = EnvelopeDecoder(maximumPayloadSize: receiver.maximumPayloadSize)
        self.removalWatch = RemovalWatch([root].compactMap { $0 })
        self.monitor = monitor
    }

    /// The descriptor that posters' signals make readable, the first time
    /// one exists (Apple platforms only; see `DirectoryMonitor`).
    func takeNewSignalDescriptor() -> CInt? {
        defer { newSignalDescriptor = nil }
        return newSignalDescriptor
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
    /// Names whose directory had entries created (a segment, say) or was
    /// watched again, as of the last ``changedNames(newlySubscribed:in:)``;
    /// `nil`: the events overflowed, so any may have.
    private(set) var createdSegments: Set<NotificationName>? = []

    /// The directory's identity for its signal names: only where signals
    /// are listened for (Apple platforms), a `stat` per name watched.
    private func signalDirectory(_ root: String) -> FileIdentity? {
        DirectoryMonitor.usesSignals ? FileLog.directoryIdentity(root) : nil
    }

    /// Something above the logs' directories changed (the transport's
    /// directory had an entry made, removed or renamed, or a directory on
    /// its path moved): the next ``changedNames(newlySubscribed:in:)``
    /// looks whether each watched directory is still the one at its path,
    /// since a watch follows its directory wherever it went.
    func recheckEverything() {
        recheckAll = true
    }

    /// Whether a name's log could not be watched at the last look for a
    /// reason that no change of its folder ends (the user's limit of
    /// watches, say; see ``changedNames(newlySubscribed:in:)``): it is read
    /// on every pass, and nothing but a pass tries again. A folder missing,
    /// not a folder, or unreadable is watched again when `logs/` reports an
    /// entry made there.
    private(set) var hasUnwatchable = false
    /// How many retries in a row found a log that could not be watched.
    var unwatchableRetries = 0

    /// Whether `name`'s folder is not watched now: it left its path (or
    /// cannot be watched), so its reader keeps no segment open between
    /// passes. A segment held open in a removed folder holds the folders
    /// above it too, and the transport's directory removed later would
    /// send its end only once the segment closes.
    func isUnwatched(_ name: NotificationName) -> Bool {
        unwatched.contains(name)
    }
    /// How many times in a row the transport's path watches could not be
    /// made again.
    var failedRewatches = 0
    /// How many looks were made in a row with `DIR/logs` missing.
    var brokenLooks = 0

    func changedNames(newlySubscribed: [NotificationName], in root: String) -> Set<NotificationName>? {
        let changed = monitor.changes()
        var created = Set(monitor.takeCreations().compactMap { watchedNames[$0] })
        if let logsWatch, let entries = monitor.takeCreatedEntries()[logsWatch] {
            if let entries { newLogEntries?.append(contentsOf: entries) } else { newLogEntries = nil }
            // A name's directory made at its path: the one watched may be
            // the one removed (`rm -rf`), whose end comes only once nothing
            // holds it open, and this reader's segment does.
            if let entries {
                let names = entries.compactMap { try? NotificationName(validating: $0) }
                monitor.recheckPaths(names.compactMap { watchIndex[$0] })
            } else {
                monitor.recheckPaths(watchedNames.keys)
            }
        }
        var lost = monitor.takeLostWatches()
        // `DIR/logs` left its path: the names' watches followed it too.
        if let logsWatch, lost.contains(logsWatch) { recheckAll = true }
        if recheckAll || changed == nil {
            recheckAll = false
            monitor.recheckPaths(Array(watchedNames.keys) + [logsWatch].compactMap { $0 })
            lost.formUnion(monitor.takeLostWatches())
        }
        defer { createdSegments = changed == nil ? nil : created }
        var names = due
        due = []
        for index in lost {
            if index == logsWatch {
                // `DIR/logs` was removed (and perhaps made again): watched
                // and listed again.
                logsWatch = nil
                newLogEntries = nil
            }
            guard let name = watchedNames.removeValue(forKey: index) else { continue }
            watchIndex[name] = nil
            unwatched.insert(name)
        }
        // `DIR/logs` is watched before the names below it, so a name's
        // directory made after this look comes as an event. Missing (an
        // `rm -rf` of it), it is watched again once made: a change in the
        // transport's directory, which asks for ``recheckEverything()``.
        if logsWatch == nil, let index = try? monitor.watch(FileLog.logsDirectory(root), namingEntries: true) {
            logsWatch = index
            newLogEntries = nil
        }
        for name in newlySubscribed where watchIndex[name] == nil {
            unwatched.insert(name)
        }
        hasUnwatchable = false
        for name in unwatched {
            names.insert(name)
            let index: Int
            do throws(ChangeMonitorError) {
                index = try monitor.watch(FileLog.nameDirectory(root, name))
            } catch {
                let pathProblems: [Errno] = [.noSuchFile, .notADirectory, .tooManySymbolicLinks, .permissionDenied]
                if !pathProblems.contains(error.errno) { hasUnwatchable = true }
                continue
            }
            if let directory = signalDirectory(root),
                let descriptor = monitor.listen(forSignal: FileLog.signalName(directory, name), as: index)
            {
                newSignalDescriptor = descriptor
            }
            created.insert(name)
            watchIndex[name] = index
            watchedNames[index] = name
            unwatched.remove(name)
        }
        names.formUnion(newlySubscribed)
        guard let changed else { return nil }
        for index in changed {
            if let name = watchedNames[index] { names.insert(name) }
        }
        return names
    }

    /// Names to look at again once their observers have room: after the
    /// names already waiting, each once.
    func wait(_ names: [NotificationName]) {
        for name in names where waitingSet.insert(name).inserted { waiting.append(name) }
    }

    /// Up to `count` waiting names, oldest first; they no longer wait.
    func takeWaiting(_ count: Int) -> [NotificationName] {
        var taken: [NotificationName] = []
        while taken.count < count, waitingHead < waiting.count {
            let name = waiting[waitingHead]
            waitingHead += 1
            if waitingSet.remove(name) != nil { taken.append(name) }
        }
        // Compacted once half of it is spent.
        if waitingHead > 64, waitingHead * 2 > waiting.count {
            waiting.removeFirst(waitingHead)
            waitingHead = 0
        }
        return taken
    }

    /// Whether any name waits.
    var hasWaiting: Bool { !waitingSet.isEmpty }

    /// `names` are looked at now: they no longer wait. Returns those that did.
    func stopWaiting(for names: [NotificationName]) -> [NotificationName] {
        guard !waitingSet.isEmpty else { return [] }
        return names.filter { waitingSet.remove($0) != nil }
    }

    /// The logs made in `DIR/logs` since the last look, for namespace
    /// observers (`wanted`), after ``changedNames(newlySubscribed:in:)``:
    /// `listAll` when the directory must be listed (first watched, watched
    /// again, `relist`, too many names, or no watch could be made); `nil`
    /// when nothing is wanted.
    func newLogs(in root: String, wanted: Bool, relist: Bool) -> (listAll: Bool, entries: [String])? {
        defer { newLogEntries = [] }
        guard wanted else { return nil }
        // Watched (by ``changedNames(newlySubscribed:in:)``) before it is
        // listed: a log made after the listing comes as an event.
        guard logsWatch != nil, let entries = newLogEntries, !relist else { return (true, []) }
        return (false, entries)
    }
}
