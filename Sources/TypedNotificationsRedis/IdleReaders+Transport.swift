@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// How a transport parks its quiet readers in the idle watches, and wakes them.
extension RedisStreamsTransport {
    /// Whether `reader` takes part: a name's reader, not in a cluster.
    func mayPark(_ reader: StreamReader) -> Bool {
        !router.isCluster && reader.discovers == nil
    }

    /// Whether the reader should read without blocking: others wait for its
    /// connection.
    func readsWithoutBlocking(_ reader: StreamReader) -> Bool {
        reader.discovers == nil && reader.idleState == .reading && !idleReaders.value.isQueueEmpty
    }

    /// The reader's read came back empty, with nothing in flight on its
    /// connection: it goes quiet, and its connection goes to the next woken
    /// reader. Returns `false` when it does not take part. On the loop.
    func park(_ reader: StreamReader) -> Bool {
        guard mayPark(reader), reader.idleState == .reading, let after = reader.machine.quietAfter else {
            return false
        }
        let connection = reader.connection
        if let connection { loop.deregister(connection.descriptor) }
        reader.connection = nil
        reader.disown()
        reader.waitAfter = after
        reader.machine.quieted()
        // No read of its own in flight: nothing for the watchdog to wait for.
        readDeadlines.value.remove(ObjectIdentifier(reader))
        // Its connection serves a new watch if one is needed, else the next
        // woken reader, else is kept spare: under the server's `maxclients`,
        // connections change hands rather than being made.
        release(reader, handingOver: connection)
        wait([reader])
        fillSlots()
        return true
    }

    /// Readers made without a connection, for a namespace's names listed
    /// when it was subscribed or announced later: a plain observer's start
    /// quiet; a durable identity's first read their pending entries, on a
    /// reading connection when one is free. On the loop.
    func startWaiting(_ readers: [StreamReader], receiver: TransportReceiver) {
        var quiet: [StreamReader] = []
        for reader in readers where !reader.isCancelled {
            reader.receiver = receiver
            if case .after(let id) = reader.machine.position {
                reader.waitAfter = id
                quiet.append(reader)
            } else {
                wake(reader, counted: false)
            }
        }
        wait(quiet)
    }

    /// Puts readers without a connection into watches: one with no read in
    /// flight and room, else a new one while under the limit, else the
    /// next read of the emptiest. Then sends the reads that must go.
    private func wait(_ readers: [StreamReader]) {
        let idle = idleReaders.value
        var touched: [IdleReaders.Watch] = []
        for reader in readers {
            counters.add(to: .parkedReaders)
            if let watch = idle.watches.first(where: { !$0.awaiting && $0.count < IdleReaders.capacity }) {
                reader.idleState = .waiting(in: ObjectIdentifier(watch))
                watch.covered[reader.key] = reader
                if !touched.contains(where: { $0 === watch }) { touched.append(watch) }
            } else if idle.watches.count < idle.watchLimit {
                let watch = IdleReaders.Watch()
                watch.connection = idle.spare.popLast()
                idle.watches.append(watch)
                reader.idleState = .waiting(in: ObjectIdentifier(watch))
                watch.covered[reader.key] = reader
                touched.append(watch)
            } else if let watch = idle.watches.min(by: { $0.count < $1.count }) {
                reader.idleState = .waiting(in: ObjectIdentifier(watch))
                watch.joining.append(reader)
            }
        }
        for watch in touched { sendWatchRead(watch) }
    }

    /// The reader gives up its place among the reading ones (quiet, or
    /// cancelled), and its connection, kept spare for the next: call
    /// ``fillSlots()`` after.
    private func release(_ reader: StreamReader, handingOver connection: RedisConnection?) {
        let idle = idleReaders.value
        idle.reading[ObjectIdentifier(reader)] = nil
        if let connection, !connection.isBroken { idle.spare.append(connection) }
    }

    /// Lets queued readers read while there is room, or a spare connection
    /// (which costs the server no client more) and fewer than
    /// ``IdleReaders/readingLimit`` read, then closes the spare connections
    /// past ``IdleReaders/spareLimit``.
    ///
    /// A spare connection never takes a reader past the limit: a watch that
    /// closed leaves its connection spare, and the next watch connects
    /// again, so granting spares past it would let the reading connections
    /// grow by one each time, beyond the bound the type promises.
    private func fillSlots() {
        let idle = idleReaders.value
        while idle.reading.count < idle.readingCap
            || (!idle.spare.isEmpty && idle.reading.count < IdleReaders.readingLimit),
            let next = idle.dequeue()
        {
            grant(next, connection: idle.spare.popLast())
        }
        let extra = idle.spare.count - IdleReaders.spareLimit
        if extra > 0 { idle.spare.removeFirst(extra) }
    }

    /// A quiet reader's name was posted to (or its watch failed): it reads
    /// on a connection of its own, now or once one is free.
    private func wake(_ reader: StreamReader, counted: Bool = true) {
        guard !reader.isCancelled else { return }
        if counted { counters.add(to: .wokenReaders) }
        let idle = idleReaders.value
        if idle.reading.count >= idle.readingCap { releaseCancelledReaders() }
        reader.idleState = .queued
        idle.queue.append(reader)
        fillSlots()
    }

    /// Lets the reader read, on `connection` or a new one.
    private func grant(_ reader: StreamReader, connection: RedisConnection?) {
        idleReaders.value.reading[ObjectIdentifier(reader)] = reader
        reader.idleState = .reading
        guard let receiver = reader.receiver else { return }
        guard let connection, !connection.isBroken else {
            connectGranted(reader, receiver: receiver)
            return
        }
        // Not read from when the reader is being stopped.
        guard reader.adopt(connection) else { return }
        reader.connection = connection
        startReading(reader, receiver: receiver)
    }

    /// Connects a reader let read. When the server refuses (its
    /// `maxclients`, or it is down), the reader goes back to the head of
    /// the queue, to read on the next connection another gives up, and no
    /// more are made than the server took until a try after a backoff: a
    /// reader does not hold a place it cannot use, nor try in a loop.
    private func connectGranted(_ reader: StreamReader, receiver: TransportReceiver) {
        let idle = idleReaders.value
        var node = router.options(forKey: reader.key)
        node.commandTimeout = min(node.commandTimeout, .seconds(1))
        do throws(TypedNotificationError) {
            let connection = try RedisConnection.connect(
                node, clientName: "tn-reader", identifying: identity != nil)
            idle.backoff.succeeded()
            idle.readingCap = min(IdleReaders.readingLimit, idle.readingCap + 1)
            guard reader.adopt(connection) else { return }
            reader.connection = connection
            if !reader.wasRefused {
                state.withLock { _ = $0.shared.readerErrors.removeValue(forKey: reader.name) }
                readerErrorsMayHaveChanged()
            }
            startReading(reader, receiver: receiver)
        } catch {
            reportFailedConnect(error, of: reader)
            idle.reading[ObjectIdentifier(reader)] = nil
            idle.readingCap = max(1, idle.reading.count)
            reader.idleState = .queued
            idle.queue.insert(reader, at: idle.queueStart)
            idle.backoff.failed(at: SystemClock.monotonicNanoseconds(), error.message)
            guard !idle.retryScheduled else { return }
            idle.retryScheduled = true
            let delay = idle.backoff.nextDelay(after: idle.backoff.failures)
            loop.schedule(after: delay) { [weak self] in
                guard let self else { return }
                let idle = idleReaders.value
                idle.retryScheduled = false
                idle.readingCap = max(idle.readingCap, idle.reading.count + 1)
                fillSlots()
            }
        }
    }

    /// Redis refused to read the reader's name for good (its key is not a
    /// stream): said in `readerErrors` already; its place goes to others,
    /// and it reads again in 2 s, from where it stood. On the loop.
    func readAgainLater(_ reader: StreamReader) {
        reader.wasRefused = true
        reader.dropConnection()
        let parks = mayPark(reader)
        if parks, reader.idleState == .reading {
            release(reader, handingOver: nil)
            reader.idleState = .queued
            fillSlots()
        }
        loop.schedule(after: 2_000_000_000) { [weak self, weak reader] in
            guard let self, let reader, !reader.isCancelled, state.withLock({ $0.shared.isCurrent(reader) }) else {
                return
            }
            if parks { wake(reader, counted: false) } else { connect(reader) }
        }
    }

    /// Frees the reading connections of readers cancelled while reading
    /// (unsubscribed, or refused for good). On the loop, once they are
    /// cancelled, and when every connection is taken.
    func releaseCancelledReaders() {
        let cancelled = idleReaders.value.reading.values.filter { $0.isCancelled }
        for reader in cancelled { release(reader, handingOver: nil) }
        if !cancelled.isEmpty { fillSlots() }
    }

    /// Sends the watch's read over the readers it covers and those joining,
    /// connecting first if it must. A watch left with no reader closes.
    private func sendWatchRead(_ watch: IdleReaders.Watch) {
        guard !watch.awaiting else { return }
        let id = ObjectIdentifier(watch)
        // A cancelled reader never takes the place of its name's new one.
        for reader in watch.joining where !reader.isCancelled { watch.covered[reader.key] = reader }
        watch.joining = []
        // Watches no bigger than this one are merged into it: readers that
        // went quiet while every watch had a read in flight got a watch of
        // their own. A merged watch whose read is in flight closes when it
        // answers, having nobody left.
        for other in idleReaders.value.watches
        where other !== watch && other.count <= watch.count
            && other.count + watch.count <= IdleReaders.capacity
        {
            for reader in Array(other.covered.values) + other.joining
            where !reader.isCancelled && reader.idleState == .waiting(in: ObjectIdentifier(other)) {
                reader.idleState = .waiting(in: id)
                watch.covered[reader.key] = reader
            }
            other.covered = [:]
            other.joining = []
            if !other.awaiting { closeWatch(other) }
        }
        watch.covered = watch.covered.filter {
            !$0.value.isCancelled && $0.value.idleState == .waiting(in: id)
        }
        guard let anyKey = watch.covered.keys.first, state.withLock({ $0.lifecycle.isOpen }) else {
            closeWatch(watch)
            return
        }
        if watch.connection?.isBroken ?? true {
            var node = router.options(forKey: anyKey)
            node.commandTimeout = min(node.commandTimeout, .seconds(1))
            // Kept spare later, for a reader: a durable one's must say its ID.
            watch.connection = try? RedisConnection.connect(
                node, clientName: "tn-reader", identifying: identity != nil)
            watch.isRegistered = false
        }
        guard let connection = watch.connection else {
            lose(watch)
            return
        }
        if !watch.isRegistered {
            // Found again by identity: the watch is the loop's, not Sendable.
            let registered = loop.register(connection.descriptor) { [weak self] in
                guard let self,
                    let watch = idleReaders.value.watches.first(where: { ObjectIdentifier($0) == id })
                else { return }
                readWatchReply(watch)
            }
            guard case .success = registered else {
                lose(watch)
                return
            }
            watch.isRegistered = true
        }
        var keys: [[UInt8]] = []
        var positions: [[UInt8]] = []
        keys.reserveCapacity(watch.covered.count)
        positions.reserveCapacity(watch.covered.count)
        for (key, reader) in watch.covered {
            keys.append(key)
            positions.append(Array(reader.waitAfter.description.utf8))
        }
        let block = String(configuration.blockTimeout.clampedMilliseconds)
        connection.enqueue(
            ["XREAD", "COUNT", "1", "BLOCK", block, "STREAMS"].map { Array($0.utf8) } + keys + positions)
        do throws(TypedNotificationError) {
            try connection.flush()
        } catch {
            lose(watch)
            return
        }
        watch.awaiting = true
        watch.requestedAt = SystemClock.monotonicNanoseconds()
        readSent(by: ObjectIdentifier(watch), at: watch.requestedAt)
    }

    /// The watch's read answered: the readers of the names it names wake;
    /// the read goes out again for the rest and those joining.
    private func readWatchReply(_ watch: IdleReaders.Watch) {
        guard let connection = watch.connection else { return }
        let replies: [RESPValue]
        do throws(TypedNotificationError) {
            replies = try connection.readAvailable()
        } catch {
            lose(watch)
            return
        }
        guard let reply = replies.last else { return }
        watch.awaiting = false
        if case .error = reply {
            lose(watch)
            return
        }
        if case .array(let streams?) = reply {
            for stream in streams {
                guard case .array(let pair?) = stream, pair.count == 2,
                    case .bulkString(let key?) = pair[0],
                    let reader = watch.covered.removeValue(forKey: key),
                    reader.idleState == .waiting(in: ObjectIdentifier(watch))
                else { continue }
                wake(reader)
            }
        }
        sendWatchRead(watch)
    }

    /// The watch's connection failed, or its read went unanswered too long:
    /// every reader in it wakes and reads on a connection of its own, which
    /// finds out what happened to its stream meanwhile (a rewind, a trim).
    func lose(_ watch: IdleReaders.Watch) {
        // Its readers connect again, each on its own: counted once.
        if watch.connection?.isBroken ?? false { counters.add(to: .reconnects) }
        let readers = (Array(watch.covered.values) + watch.joining).filter {
            $0.idleState == .waiting(in: ObjectIdentifier(watch))
        }
        watch.covered = [:]
        watch.joining = []
        Self.close(watch, of: idleReaders, keepingConnection: false)
        for reader in readers { wake(reader) }
    }

    /// Forgets a watch with no read in flight, keeping its connection spare.
    private func closeWatch(_ watch: IdleReaders.Watch) {
        Self.close(watch, of: idleReaders, keepingConnection: true)
    }

    /// Forgets the watch; its connection, when `keepingConnection` and no
    /// read is in flight on it, is kept spare.
    private static func close(
        _ watch: IdleReaders.Watch, of idle: LoopBound<IdleReaders>, keepingConnection: Bool
    ) {
        if let connection = watch.connection {
            if watch.isRegistered { idle.loop.deregister(connection.descriptor) }
            if keepingConnection, !watch.awaiting, !connection.isBroken,
                idle.value.spare.count < IdleReaders.spareLimit
            {
                idle.value.spare.append(connection)
            }
        }
        watch.connection = nil
        watch.isRegistered = false
        watch.awaiting = false
        idle.value.watches.removeAll { $0 === watch }
    }

    /// Closes every watch and spare connection; when the transport closes.
    /// On the loop. Static, for `close()`, which may run in `deinit`.
    static func closeIdleReaders(_ idle: LoopBound<IdleReaders>) {
        for watch in idle.value.watches {
            watch.covered = [:]
            watch.joining = []
            close(watch, of: idle, keepingConnection: false)
        }
        idle.value.spare = []
        idle.value.reading = [:]
        idle.value.queue = []
        idle.value.queueStart = 0
    }

    /// The watches whose read went unanswered longer than `patience`.
    func stuckWatches(now: UInt64) -> [IdleReaders.Watch] {
        idleReaders.value.watches.filter { $0.awaiting && now &- $0.requestedAt >= patience }
    }
}
