import Dispatch
@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// What wakes the loop besides datagrams: the watches of the directory, the
// registry and the registration file, and the repair of registry entries
// someone removed.
extension SocketTransport {
    /// Watches what this endpoint depends on, so that a change to any of it
    /// wakes the loop for a look (``lookAtDirectory(_:)``), and nothing else
    /// does: the directory and those above it (removed or moved), its
    /// `sockets` folder and this endpoint's socket, the registry's folder
    /// and generation file, and the registration file, which every registry
    /// entry of this endpoint is a hard link to, so that removing an entry
    /// changes its link count. Where the loop sleeps in the system's event
    /// queue without inotify (Apple platforms), the spool's folder too
    /// (`spool`).
    /// A fixed number of watches, however many names are observed.
    ///
    /// The directory is watched for its entries too, and a change there (the
    /// registry's `names` or `namespaces` removed or moved, say) asks the
    /// next look to check every entry, as does a watched path that names
    /// another file than when watched. Every directory and symbolic link
    /// the path goes through is watched (`pathsTraversed`), and mounts.
    /// Made again, all of them, when a watched path moved (see
    /// ``lookAtDirectory(_:)``).
    func watchDirectory(_ bound: LoopBound<SocketReceiving>, spool: Bool) throws(TypedNotificationError) {
        let look: @Sendable () -> Void = { [weak self] in self?.lookSoon(bound) }
        let lookAtEveryEntry: @Sendable () -> Void = { [weak self] in
            self?.lookAtEveryEntry.store(true, ordering: .releasing)
            self?.lookSoon(bound)
        }
        let moved = PathEvents.removedOrMoved
        let movedOrLinked: PathEvents = [.removedOrMoved, .attributes]
        let above = SharedPaths.pathsTraversed(to: directory)
        var paths: [(String, PathEvents, @Sendable () -> Void)] = above.map { ($0, moved, look) }
        paths.append((directory, [.removedOrMoved, .entries], lookAtEveryEntry))
        paths.append((SocketRegistry.socketsDirectory(directory), moved, look))
        paths.append((socketPath, movedOrLinked, look))
        paths.append((SocketRegistry.namesDirectory(directory), moved, lookAtEveryEntry))
        if registryGeneration != nil {
            paths.append((SocketRegistry.generationPath(directory), movedOrLinked, look))
        }
        var spoolWatch: [(String, PathEvents, @Sendable () -> Void)] = []
        if spool {
            spoolWatch.append(
                (
                    spoolDirectory, .entries,
                    { [weak self] in
                        self?.loop.execute { [weak self] in
                            guard let self, isOpen else { return }
                            takeSpool(bound)
                        }
                    }
                ))
        }
        // A mount anywhere: looked at on the watcher's thread, so that only
        // an endpoint whose paths it covered wakes.
        let missing: Bool
        do throws(ChangeMonitorError) {
            missing = try watches.watch(paths, andAlso: spoolWatch) { [weak self] in self?.lookIfMoved(bound) }
        } catch {
            throw SharedDirectory.failure(error, "could not watch \(directory)")
        }
        try watchRegistration(bound)
        if missing { lookAtEveryEntry() }
    }

    /// Watches the registration file for a change in its link count (a
    /// removed registry entry); again after a repair made a new one.
    private func watchRegistration(_ bound: LoopBound<SocketReceiving>) throws(TypedNotificationError) {
        let path = SocketRegistry.registrationPath(directory, identifier)
        let watch: PathWatch
        do throws(ChangeMonitorError) {
            watch = try PathWatcher.shared().watch(path, for: [.removedOrMoved, .attributes]) { [weak self] in
                self?.lookSoon(bound)
            }
        } catch {
            throw SharedDirectory.failure(error, "could not watch \(path)")
        }
        let replaced = watches.withLock { watches -> PathWatch? in
            guard !watches.isClosed else { return watch }
            defer { watches.registration = watch }
            return watches.registration
        }
        replaced?.cancel()
    }

    /// Whether the path watcher tells of the spool: a thread that sleeps
    /// in the event queue without inotify (Apple platforms). One that
    /// sleeps in its receive learns of it from posters' nudges; one with
    /// inotify, from its spool monitor.
    func watchesSpool(besides spoolMonitor: DirectoryMonitor?) -> Bool {
        receiveCall == nil && spoolMonitor?.pollDescriptor == nil
    }

    /// Called on the watcher's thread after a mount or an overflow: queues
    /// a look if one of the watched paths names another file than when
    /// watched.
    private func lookIfMoved(_ bound: LoopBound<SocketReceiving>) {
        if watches.anyMoved { lookSoon(bound) }
    }

    /// Called on the watcher's thread: queues one look on the loop, however
    /// many changes come before it runs.
    private func lookSoon(_ bound: LoopBound<SocketReceiving>) {
        guard !lookQueued.exchange(true, ordering: .acquiringAndReleasing) else { return }
        loop.execute { [weak self] in
            guard let self else { return }
            lookQueued.store(false, ordering: .releasing)
            lookAtDirectory(bound)
        }
    }

    /// Something this endpoint depends on changed: is the directory, or
    /// this endpoint's socket, gone? Was one of its registry entries
    /// removed? A repair that failed is tried again in a second, until
    /// it has failed for as long as `repairFailed` allows.
    func lookAtDirectory(_ bound: LoopBound<SocketReceiving>) {
        guard isOpen else { return }
        let receiving = bound.value
        if let removal = receiving.removalWatch.removal(throttled: false) {
            receiving.receiver.fail(removal)
            return
        }
        // A registry removed whole takes its generation file with it:
        // from then on posts here read the registry's change events.
        registryGeneration?.noteIfReplaced()
        let registration = state.withLock { $0.shared.registration }
        // A watch follows its file: one whose file left its path (moved, or
        // removed and made again) watches the wrong one. Every entry is
        // looked at then (the registry's folder may have gone with it), and
        // the watches are made again on what is there now.
        let ended = watches.anyMoved
        let everyEntry = lookAtEveryEntry.exchange(false, ordering: .acquiringAndReleasing) || ended
        do throws(TypedNotificationError) {
            try checkRegistrations(receiving, everyEntry: everyEntry)
            if ended, receiving.failedRepairs == 0 {
                do throws(TypedNotificationError) {
                    try watchDirectory(bound, spool: watchesSpool(besides: receiving.spoolMonitor))
                } catch {
                    // Gone again meanwhile (an `rm -rf` still running):
                    // tried again with the repairs.
                    if repairFailed(receiving) { throw error }
                }
            } else if state.withLock({ $0.shared.registration }) != registration {
                try watchRegistration(bound)
            }
        } catch {
            receiving.receiver.fail(error)
            return
        }
        if receiving.failedRepairs > 0, !receiving.repairRetryScheduled {
            receiving.repairRetryScheduled = true
            loop.schedule(after: 1_000_000_000) { [weak self] in
                bound.value.repairRetryScheduled = false
                self?.lookAtDirectory(bound)
            }
        }
    }

    /// Makes again the registry entries someone removed (`rm -rf
    /// DIR/names/NAME`), which would leave this endpoint observing a name
    /// nobody posts to it any more.
    ///
    /// Costs one `fstat` however many names are observed: every entry is a
    /// hard link to the registration file, so a change in how many links it
    /// has beyond the linked entries (at least its own name; more once
    /// someone made others, a `cp -al` backup) says an entry went, or
    /// something else changed. Only then is each name's entry looked at.
    ///
    /// A repair that fails is tried again at the next look (an `rm -rf` may
    /// still be running); the error is thrown once the failures in a row
    /// have lasted (see `repairFailed`).
    func checkRegistrations(_ receiving: SocketReceiving, everyEntry: Bool = false) throws(TypedNotificationError) {
        let (linked, sender, ours) = state.withLock { state in
            (
                state.shared.subscribed.count - state.shared.unlinkedEntries.count,
                try? state.lifecycle.opened(for: "registration"), state.shared.registration
            )
        }
        guard let sender, let ours, case .success(let info) = SystemCalls.fileStatus(receiving.registration),
            everyEntry || info.links - linked != receiving.linksBeyondEntries
        else {
            receiving.failedRepairs = 0
            return
        }
        do throws(TypedNotificationError) {
            try repairRegistrations(receiving, sender: sender, registration: ours)
            receiving.failedRepairs = 0
            // Every entry is there now: what is beyond them is the new normal.
            let linkedNow = state.withLock { $0.shared.subscribed.count - $0.shared.unlinkedEntries.count }
            if case .success(let now) = SystemCalls.fileStatus(receiving.registration) {
                receiving.linksBeyondEntries = max(1, now.links - linkedNow)
            }
        } catch {
            if repairFailed(receiving) { throw error }
        }
    }

    /// Notes a look whose repair failed, and says whether to give up: only
    /// after ``Self/repairAttempts`` looks in a row failed, the last at
    /// least ``Self/repairPatienceNanoseconds`` after the first. Each
    /// removal another process makes wakes a look, so a burst of them (`rm
    /// -rf` in a loop) can fail five looks within milliseconds; the
    /// retries a second apart are what tell a lasting failure.
    private func repairFailed(_ receiving: SocketReceiving) -> Bool {
        let now = SystemClock.monotonicNanoseconds()
        if receiving.failedRepairs == 0 { receiving.firstFailedRepair = now }
        receiving.failedRepairs += 1
        return receiving.failedRepairs >= Self.repairAttempts
            && now &- receiving.firstFailedRepair >= Self.repairPatienceNanoseconds
    }

    /// Looks in a row a repair may fail before the transport gives up.
    static var repairAttempts: Int { 5 }

    /// How long, at least, a repair fails before the transport gives up:
    /// four retries a second apart.
    static var repairPatienceNanoseconds: UInt64 { 4_000_000_000 }

    private func repairRegistrations(
        _ receiving: SocketReceiving, sender: NotificationSender, registration: FileIdentity
    )
        throws(TypedNotificationError)
    {
        let (names, unlinked) = state.withLock { ($0.shared.subscribed, $0.shared.unlinkedEntries) }
        var ours = registration
        func entry(_ name: NotificationSelector) -> String { SocketRegistry.entryPath(directory, name, identifier) }
        func status(_ path: String) -> FileStatus? {
            if case .success(let found) = SystemCalls.linkStatus(path) { return found }
            return nil
        }
        var missing: [NotificationSelector] = []
        var present: String?
        for name in names {
            let found = status(entry(name))
            if unlinked.contains(name) ? found?.kind == .regular : found?.identity == ours {
                if !unlinked.contains(name) { present = present ?? entry(name) }
            } else {
                missing.append(name)
            }
        }
        // In the spool folder opened at start, never by path: with spool/
        // swapped for a link, a path would lead to another folder's file.
        let path = SocketRegistry.registrationPath(directory, identifier)
        let name = SocketRegistry.registrationName
        var current: FileIdentity?
        if case .success(let found) = SystemCalls.linkStatus(name, in: spoolFolder) { current = found.identity }
        if current != ours {
            if let present, case .success = SystemCalls.hardLink(present, toEntry: name, in: spoolFolder) {
                // Its own name went too: linked back from an entry still there.
            } else {
                // Gone with every entry: a new one, which every entry links to.
                _ = SystemCalls.removeFile(name, in: spoolFolder)
                let file = try SocketRegistry.makeRegistration(
                    in: spoolFolder, path: path, sender: sender, sharing: configuration.sharing)
                guard case .success(let made) = SystemCalls.fileStatus(file) else {
                    throw TypedNotificationError(code: .transportFailure, message: "could not inspect \(path)")
                }
                ours = made.identity
                receiving.registration = file
                state.withLock { $0.shared.registration = made.identity }
                missing = Array(names)
            }
        }
        guard !missing.isEmpty else { return }
        var repaired = 0
        for name in missing {
            let made = try SocketRegistry.register(
                identifier, for: name, in: directory, spool: spoolFolder, registration: ours, sender: sender,
                sharing: configuration.sharing)
            repaired += 1
            // Unsubscribed meanwhile (it forgets the name before it unlinks):
            // the entry just made is not wanted.
            let wanted = state.withLock { state in
                guard state.shared.subscribed.contains(name) else { return false }
                if made == .unlinked {
                    state.shared.unlinkedEntries.insert(name)
                } else {
                    state.shared.unlinkedEntries.remove(name)
                }
                return true
            }
            if !wanted { _ = SystemCalls.removeFile(entry(name)) }
        }
        counters.add(repaired, to: .repairedEntries)
        registryGeneration?.increment()
    }
}
