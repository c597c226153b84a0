import Dispatch
@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// The receive path on the event loop: datagrams, the spool, and dead endpoints.
extension SocketTransport {
    // MARK: - The I/O thread

    /// Looks at the spool once, `after` nanoseconds: a file was busy or
    /// not settled.
    func scheduleSpoolLook(_ bound: LoopBound<SocketReceiving>, after nanoseconds: UInt64) {
        loop.schedule(after: nanoseconds) { [weak self] in
            guard let self, isOpen else { return }
            bound.value.recheckScheduled = false
            takeSpool(bound)
        }
    }

    /// Reads the spool's change events, then takes what the spool holds.
    func lookAtSpool(_ bound: LoopBound<SocketReceiving>) {
        _ = bound.value.spoolMonitor?.changes()
        takeSpool(bound)
    }

    func takeSpool(_ bound: LoopBound<SocketReceiving>) {
        let receiving = bound.value
        // Too much waits for observers' room: the spool waits, as the socket does.
        guard receiving.handOver.mayReceive else {
            receiving.spoolWanted = true
            holdOff(bound)
            return
        }
        let pending = takeSpool(
            datagrams: receiving.batch, decoder: &receiving.decoder, handOver: receiving.handOver,
            firstSeen: &receiving.firstSeen, lastTake: &receiving.lastTake)
        if receiving.handOver.isHolding { holdOff(bound) }
        // Looked at again shortly.
        if pending, !receiving.recheckScheduled {
            receiving.recheckScheduled = true
            scheduleSpoolLook(bound, after: 1_000_000)
        }
    }

    /// Something waits for its observers' room: looked at again until it
    /// has all been handed over, after 1 ms (up to 64 ms while nothing moves
    /// and more names wait than one look takes). While too much waits
    /// (``SocketHandOver/mayReceive``), receiving stops too (the socket
    /// leaves the event queue, where the thread sleeps there), so what
    /// arrives stays in the socket's queue, then in posters' spools.
    func holdOff(_ bound: LoopBound<SocketReceiving>) {
        let receiving = bound.value
        if receiveCall == nil, !receiving.receivePaused, !receiving.handOver.mayReceive {
            loop.deregister(receiveSocket.rawValue)
            receiving.receivePaused = true
        }
        guard !receiving.handOverRecheckScheduled else { return }
        receiving.handOverRecheckScheduled = true
        loop.schedule(after: receiving.handOverRecheckNanoseconds) { [weak self] in
            guard let self, isOpen else { return }
            let receiving = bound.value
            receiving.handOverRecheckScheduled = false
            let done = resumeHandOver(bound)
            // A look at a few names costs microseconds: every millisecond,
            // so an observer that reads again gets its backlog at once.
            // Past what one look takes, back off while nothing moves.
            let few = receiving.handOver.waitingNames <= SocketHandOver.namesPerFlush
            receiving.handOverRecheckNanoseconds =
                receiving.handOver.lastFlushMoved || done || few
                ? 1_000_000 : min(64_000_000, receiving.handOverRecheckNanoseconds * 2)
            if !done { holdOff(bound) }
        }
    }

    /// Hands over what waits, as far as observers have room; once little
    /// enough waits, receiving goes on and a spool look put off meanwhile
    /// is made. Returns whether nothing waits.
    func resumeHandOver(_ bound: LoopBound<SocketReceiving>) -> Bool {
        let receiving = bound.value
        receiving.handOver.flush()
        guard receiving.handOver.mayReceive else { return false }
        if receiving.receivePaused {
            receiving.receivePaused = false
            do throws(Errno) {
                try registerReceive(bound)
            } catch {
                receiving.receiver.fail(SharedDirectory.failure(error, "could not watch \(socketPath) again"))
                return false
            }
        }
        if receiving.spoolWanted {
            receiving.spoolWanted = false
            takeSpool(bound)
        }
        return !receiving.handOver.isHolding
    }

    /// Puts the socket on the event queue: what arrives is received a
    /// handler loop's slice at a time.
    func registerReceive(_ receiving: LoopBound<SocketReceiving>) throws(Errno) {
        // Weak: a close no longer waits for the loop, so a handler may
        // run once more while the transport is being released.
        try loop.register(receiveSocket.rawValue) { [weak self] in
            // As many as a handler loop delivers in one slice: a handler on
            // the hub's executor, which runs on this thread too, keeps up
            // with a flood instead of watching its buffer fill (it dropped
            // when this read 4,096 at a time). The loop comes back while
            // datagrams are waiting, and the spool is read in between.
            self?.receiveAll(into: receiving, limit: HandlerLoopBudget.deliveries, waitingFirst: false)
        }.get()
    }

    /// Reads every spool file posters left for this endpoint and hands their
    /// records over in post order. Returns whether a file must be looked at
    /// again shortly: busy (a poster mid-append), or not settled yet.
    ///
    /// A file is taken at once, unless this endpoint took one less than
    /// ``Spool/burstNanoseconds`` (10 ms) ago: then only once it has existed
    /// for ``Spool/settleNanoseconds`` (1 ms) since this endpoint first saw
    /// it. A poster that finds a socket full keeps appending to its file until
    /// the file is taken, so under a sustained burst letting it fill for a
    /// moment gives a few large files instead of a file per datagram the
    /// socket could not take, while an occasional spill costs no latency.
    ///
    /// Files are taken in batches of at most ``Spool/filesPerPass``, oldest
    /// first. A batch's files are all locked, the socket is drained (what it
    /// holds was sent before any of them started), and their records are
    /// merged by the time they were posted: each poster's in its own order,
    /// posters interleaved as they posted, so 200 short-lived posters that
    /// posted one after another are delivered one after another.
    func takeSpool(
        datagrams: DatagramBatch, decoder: inout EnvelopeDecoder, handOver: SocketHandOver,
        firstSeen: inout [String: UInt64], lastTake: inout UInt64
    ) -> Bool {
        let names = SystemCalls.directoryEntries(of: spoolFolder)
        let now = SystemClock.monotonicNanoseconds()
        let settle = lastTake != 0 && now &- lastTake < Spool.burstNanoseconds ? Spool.settleNanoseconds : 0
        var unsettled = false
        firstSeen = firstSeen.filter { names.contains($0.key) }
        var byPoster: [String: [(generation: UInt32, file: String)]] = [:]
        for name in names where !name.hasPrefix(".") {
            let seen = firstSeen[name] ?? now
            firstSeen[name] = seen
            if now &- seen < settle {
                unsettled = true
                continue
            }
            guard let parsed = Spool.parseFileName(name) else {
                // Not ours to read: count it and clear it out of the way.
                counters.add(to: .refusedMalformed)
                _ = SystemCalls.removeFile(name, in: spoolFolder)
                continue
            }
            byPoster[parsed.poster, default: []].append((parsed.generation, name))
        }
        // Each poster's generations in order; posters by their oldest file.
        var posters: [(started: Int64, files: [String])] = byPoster.values.map { files in
            let ordered = files.sorted { $0.generation < $1.generation }.map(\.file)
            var started = Int64.max
            if let first = ordered.first, case .success(let info) = SystemCalls.linkStatus(first, in: spoolFolder) {
                started = info.modifiedNanoseconds
            }
            return (started, ordered)
        }
        posters.sort { $0.started < $1.started }
        var busy = false
        var lockedAny = false
        var batch: [[SpoolFileLock]] = []
        var lockedFiles = 0
        for poster in posters {
            var locks: [SpoolFileLock] = []
            files: for name in poster.files {
                switch lockSpoolFile(name) {
                case .locked(let lock): locks.append(lock)
                case .refused: continue
                case .busy:
                    busy = true
                    break files  // a later generation waits for this one
                }
            }
            if !locks.isEmpty {
                lockedAny = true
                batch.append(locks)
                lockedFiles += locks.count
            }
            if lockedFiles >= Spool.filesPerPass {
                if deliverSpoolBatch(batch, datagrams: datagrams, decoder: &decoder, handOver: handOver) {
                    unsettled = true
                }
                batch = []
                lockedFiles = 0
            }
        }
        if !batch.isEmpty, deliverSpoolBatch(batch, datagrams: datagrams, decoder: &decoder, handOver: handOver) {
            unsettled = true
        }
        if lockedAny { lastTake = now }
        return busy || unsettled
    }

    enum SpoolFileOutcome {
        case locked(SpoolFileLock)
        /// Not a file this endpoint reads (removed and counted).
        case refused
        /// A poster holds it: try again shortly.
        case busy
    }

    /// Opens and locks the spool file `name`, refusing anything but a
    /// regular file of an allowed owner; never blocks (a FIFO planted here
    /// included).
    func lockSpoolFile(_ name: String) -> SpoolFileOutcome {
        guard
            case .success(let file) = SystemCalls.openFile(
                name, in: spoolFolder, .readOnly, options: [.noFollow, .nonBlocking])
        else {
            counters.add(to: .refusedMalformed)
            _ = SystemCalls.removeFile(name, in: spoolFolder)
            return .refused
        }
        guard case .success(let info) = SystemCalls.fileStatus(file), info.kind == .regular else {
            counters.add(to: .refusedMalformed)
            _ = SystemCalls.removeFile(name, in: spoolFolder)
            return .refused
        }
        guard configuration.sharing == .group || info.owner == SystemProcess.userID else {
            counters.add(to: .refusedForeignSender)
            _ = SystemCalls.removeFile(name, in: spoolFolder)
            return .refused
        }
        // A poster holds the lock only for one append (microseconds): look
        // again a few times, briefly, before leaving the file for the next pass.
        for attempt in 0..<Spool.lockAttempts {
            if case .success(true) = SystemCalls.tryLockFile(file) {
                return .locked(SpoolFileLock(name: name, descriptor: file, owner: info.owner))
            }
            if attempt + 1 < Spool.lockAttempts { SystemProcess.pause(microseconds: 20) }
        }
        return .busy
    }

    /// Drains the socket, reads every locked file, hands their records over
    /// merged by post time, then unlinks the files (only then: an empty spool
    /// means everything in it reached the center) and unlocks them. Returns
    /// whether the drain said the spool needs another look: a file started
    /// after these were listed.
    func deliverSpoolBatch(
        _ posters: [[SpoolFileLock]], datagrams: DatagramBatch, decoder: inout EnvelopeDecoder,
        handOver: SocketHandOver
    ) -> Bool {
        // Datagrams already queued were sent before these files were started:
        // they go first, so each poster's order holds (all of them, though
        // too much waits for room: they wait, in order, with the records).
        let signals = receiveAll(
            into: datagrams, decoder: &decoder, handOver: handOver, limit: Spool.socketDrainLimit,
            evenWhenWaiting: true)
        // (key, poster, index): keys are post times made non-decreasing per
        // poster, so sorting merges posters without reordering any one.
        var merged: [(key: UInt64, poster: Int, index: Int, record: Spool.Record)] = []
        for (posterIndex, files) in posters.enumerated() {
            var key: UInt64 = 0
            for file in files {
                // Read a chunk at a time up to the first record that is not
                // valid: a huge file planted in the spool (64 GiB of zeros
                // after one record) costs one chunk, never its size.
                let (records, malformed) = file.readRecords(decoder: &decoder)
                if malformed { counters.add(to: .refusedMalformed) }
                for record in records {
                    // The file's owner is who wrote it; a record may not claim another user.
                    guard record.sender?.userID == file.owner else {
                        counters.add(to: .refusedForeignSender)
                        continue
                    }
                    key = max(key, record.monotonicNanoseconds ?? key)
                    merged.append((key, posterIndex, merged.count, record))
                }
            }
        }
        merged.sort { ($0.key, $0.poster, $0.index) < ($1.key, $1.poster, $1.index) }
        handOver.startRound()
        for entry in merged {
            switch entry.record {
            case .envelope(let message):
                counters.add(to: .received)
                counters.add(to: .receivedFromSpool)
                handOver.handOver(.message(message))
            case .dropped:
                if let report = entry.record.report { handOver.handOver(.missed(report)) }
            case .oversized(let report):
                counters.add(to: .refusedOversized)
                handOver.handOver(.refused(report))
            }
        }
        for files in posters {
            for file in files { _ = SystemCalls.removeFile(file.name, in: spoolFolder) }
        }
        return signals.spoolNeedsLook
    }

    /// Removes the sockets (and spools) in the directory that nobody is bound
    /// to any more: processes that ended without closing, by SIGTERM or
    /// SIGKILL. Their registry entries go on the next post that routes to them.
    /// Removes as well the spools whose socket is gone: a process that
    /// ended while it closed (its socket unlinked, its spool not yet).
    ///
    /// An endpoint binds its socket before it makes its spool, and unlinks
    /// it first when it closes, so a spool listed before the sockets are
    /// whose socket is not among them is of an endpoint that closed or
    /// died, never of one being born.
    func sweepDeadSockets() {
        let spools = SystemCalls.directoryEntries(Spool.directory(directory))
        guard case .success(let names) = SystemCalls.directoryEntries(SocketRegistry.socketsDirectory(directory)) else {
            return
        }
        // This process's own sockets are alive: not probed.
        let ours = Self.boundHere.withLock { $0 }
        var sockets = Set<String>()
        for name in names where name.hasSuffix(".sock") {
            guard isOpen else { return }
            let id = String(name.dropLast(5))
            sockets.insert(id)
            guard !ours.contains(id), SocketRegistry.isIdentifier(id) else { continue }
            if SocketTransport.endpointState(directory, id) == .dead {
                SocketRegistry.removeSocket(directory, id)
                SocketRegistry.removeSpool(directory, id)
            }
        }
        guard case .success(let spooled) = spools else { return }
        for id in spooled where !sockets.contains(id) && SocketRegistry.isIdentifier(id) {
            guard isOpen else { return }
            SocketRegistry.removeSpool(directory, id)
        }
    }

    /// The loop's receive where its thread sleeps in it (Linux): waits at
    /// most `timeoutMilliseconds` (-1: without limit, 0: not at all) for a
    /// datagram, then takes what else is waiting.
    ///
    /// The wait is the socket's receive timeout, changed only when the
    /// wait crosses a power of two (``receiveTimeout(forWaitOf:)``). A
    /// wake-up datagram ends it; so does a nudge, an empty datagram a
    /// poster sends once it started a spool file, after which the spool is
    /// looked at. A poster whose nudge the socket refused found its queue
    /// full: this receive, or a later one, then takes a full queue's worth
    /// in one call, and the spool is looked at after that too. So a spool
    /// started while this thread slept is seen without inotify and
    /// without waiting for a timer.
    func receiveWaiting(_ bound: LoopBound<SocketReceiving>, timeoutMilliseconds: CInt) {
        let receiving = bound.value
        // Too much waits for room: nothing is received; the recheck (a
        // timer, so the wait is at most 1 ms) hands it over.
        guard receiving.handOver.mayReceive else {
            if timeoutMilliseconds != 0 { SystemProcess.pause(microseconds: 1_000) }
            return
        }
        let waits = timeoutMilliseconds != 0
        if waits {
            let timeout = Self.receiveTimeout(forWaitOf: timeoutMilliseconds)
            if timeout != receiving.receiveTimeout, SystemCalls.setReceiveTimeout(receiveSocket, milliseconds: timeout)
            {
                receiving.receiveTimeout = timeout
            }
        }
        receiveAll(into: bound, limit: HandlerLoopBudget.deliveries, waitingFirst: waits)
    }

    /// Receives up to about `limit` datagrams, the first waited for when
    /// `waitingFirst`, then looks at the spool if what arrived says so.
    func receiveAll(into bound: LoopBound<SocketReceiving>, limit: Int, waitingFirst: Bool) {
        let receiving = bound.value
        if receiving.handOver.isHolding { _ = resumeHandOver(bound) }
        guard receiving.handOver.mayReceive else {
            holdOff(bound)
            return
        }
        let signals = receiveAll(
            into: receiving.batch, decoder: &receiving.decoder, handOver: receiving.handOver, limit: limit,
            waitingFirst: waitingFirst)
        if receiving.handOver.isHolding { holdOff(bound) }
        if signals.spoolNeedsLook { takeSpool(bound) }
    }

    /// Receives what is waiting, a batch per system call, until the socket
    /// is drained, about `limit` datagrams were taken, or (unless
    /// `evenWhenWaiting`) too much waits for observers' room; with
    /// `waitingFirst`, the first call waits for a datagram. Returns the
    /// signs that the spool needs a look.
    @discardableResult
    func receiveAll(
        into datagrams: DatagramBatch, decoder: inout EnvelopeDecoder, handOver: SocketHandOver, limit: Int,
        waitingFirst: Bool = false, evenWhenWaiting: Bool = false
    ) -> ReceiveSignals {
        var signals = ReceiveSignals()
        var taken = 0
        var waits = waitingFirst
        while taken < limit, evenWhenWaiting || handOver.mayReceive {
            guard case .success(let count) = datagrams.receive(receiveSocket, waiting: waits) else { return signals }
            Anatomy.received()
            waits = false
            if count >= fullQueueSign { signals.sawFullQueue = true }
            handOver.startRound()
            for index in 0..<count {
                if accept(datagrams.datagram(index), datagrams.bytes(index), decoder: &decoder, handOver: handOver) {
                    signals.nudged = true
                }
                // Once it is decoded: its slot's pages above the first 64 KiB go back.
                datagrams.shrink(index)
            }
            taken += count
            // Fewer than a batch: nothing else was waiting, and no call is
            // needed to learn it. The loop comes back if more arrive.
            if DatagramBatch.drainsInOneCall, count < datagrams.slots { return signals }
        }
        return signals
    }

    /// Checks one received datagram and hands its notification over.
    /// Returns whether it was a nudge: an empty datagram, which a poster
    /// sends once it started a spool file.
    private func accept(
        _ datagram: SystemCalls.Datagram, _ bytes: UnsafeRawBufferPointer, decoder: inout EnvelopeDecoder,
        handOver: SocketHandOver
    ) -> Bool {
        let kernelSays = configuration.usesKernelCredentials
        if kernelSays {
            // No credentials where the kernel always attaches them: refused.
            guard let user = datagram.senderUserID else {
                counters.add(to: .refusedForeignSender)
                return false
            }
            // Shared with a group, the socket's mode (0660, of the
            // directory's group) is the gate: the kernel let only a member
            // (or root) connect, and a member's primary group need not be
            // the shared one, so the sender's group says nothing here.
            guard user == ownUser || configuration.sharing == .group else {
                counters.add(to: .refusedForeignSender)
                return false
            }
        }
        if !datagram.truncated, bytes.isEmpty { return true }
        if let wake, !datagram.truncated, bytes.count == SocketWake.length,
            !kernelSays || datagram.senderProcessID == ownProcess
        {
            wake.taken()
            return false
        }
        guard !datagram.truncated else {
            refuseOversized(bytes, datagram, decoder: &decoder, handOver: handOver)
            return false
        }
        let message: TransportMessage
        do {
            message = try decoder.decode(copying: bytes)
        } catch {
            refuseOversized(bytes, datagram, decoder: &decoder, handOver: handOver, requiringWhole: true)
            return false
        }
        guard !isForged(message.sender, datagram) else {
            counters.add(to: .refusedForeignSender)
            return false
        }
        counters.add(to: .received)
        handOver.handOver(.message(message))
        return false
    }

    /// A datagram that was cut by its slot, or would not decode: refused
    /// from its header, and said whose it was, when it is an envelope over
    /// the center's limit (for one not cut, `requiringWhole`: with every
    /// byte and a valid checksum; a short datagram whose header only claims
    /// a large payload is malformed, and nothing was missed).
    private func refuseOversized(
        _ bytes: UnsafeRawBufferPointer, _ datagram: SystemCalls.Datagram, decoder: inout EnvelopeDecoder,
        handOver: SocketHandOver, requiringWhole: Bool = false
    ) {
        guard let report = decoder.oversized(bytes), !requiringWhole || report.lastSequence != nil else {
            counters.add(to: .refusedMalformed)
            return
        }
        guard let sender = report.sender, !isForged(sender, datagram) else {
            counters.add(to: .refusedForeignSender)
            return
        }
        counters.add(to: .refusedOversized)
        handOver.handOver(.refused(report))
    }

    /// Whether an envelope's sender claims another user or process than
    /// the one that sent the datagram.
    private func isForged(_ sender: NotificationSender, _ datagram: SystemCalls.Datagram) -> Bool {
        if configuration.usesKernelCredentials {
            // The kernel says who sent it.
            return sender.userID != datagram.senderUserID || sender.processID != datagram.senderProcessID
        }
        // Darwin's path: only this user can reach an owner-only socket
        // (0600 in a 0700 directory), so a claim of another user is a forgery.
        return configuration.sharing == .ownerOnly && sender.userID != ownUser
    }
}
