import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// The readers on the event loop: StreamReaderStateMachine decides, this performs.
extension RedisStreamsTransport {
    // MARK: The event loop

    /// Watches the reader's connection and asks for its first entries. On the loop.
    func startReading(_ reader: StreamReader, receiver: TransportReceiver) {
        guard !reader.isCancelled else { return }
        reader.receiver = receiver
        guard let descriptor = reader.connection?.descriptor else { return }
        let registered = loop.register(descriptor) { [weak self, weak reader] in
            guard let self, let reader else { return }
            readReplies(of: reader)
        }
        if case .failure(let error) = registered {
            reconnect(reader, because: "could not watch its connection: \(error)")
            return
        }
        requestEntries(of: reader)
    }

    /// Sends the reader's next blocking read, unless its observers are
    /// backed up or it holds entries they had no room for: then it looks
    /// again in 5 ms.
    func requestEntries(of reader: StreamReader) {
        guard !reader.isCancelled, !reader.machine.awaitingReply, let connection = reader.connection,
            let receiver = reader.receiver
        else { return }
        // A read takes no more than every observer can still buffer, so no
        // buffer drops what the stream keeps: a plain observer gets a
        // backlog whole, and a durable identity's group holds nothing
        // pending for the next run. The stream keeps the rest. With no room
        // (or nobody observing: the name's unsubscribe is on its way),
        // nothing is read.
        var count = configuration.readBatchSize
        if reader.discovers == nil {
            let room = handOutHeld(of: reader, to: receiver) ? receiver.room(for: reader.name) : 0
            if room == 0 || receiver.isBackedUp(reader.name) {
                loop.schedule(after: 5_000_000) { [weak self, weak reader] in
                    guard let self, let reader else { return }
                    requestEntries(of: reader)
                }
                return
            }
            if let room { count = min(count, room) }
        }
        guard let commands = reader.machine.nextRead() else { return }
        send(commands, of: reader, on: connection, blocking: !readsWithoutBlocking(reader), count: count)
    }

    /// Sends a reader's commands and starts the watch on its read. Returns
    /// `false` when the connection failed to take them: it is being made
    /// again, and the caller stops using it.
    @discardableResult
    private func send(
        _ commands: [StreamReaderStateMachine.Command], of reader: StreamReader, on connection: RedisConnection,
        blocking: Bool = true, count: Int? = nil
    ) -> Bool {
        for command in commands {
            connection.enqueue(self.command(command, of: reader, blocking: blocking, count: count))
        }
        do throws(TypedNotificationError) {
            try connection.flush()
        } catch {
            reconnect(reader, because: error.message)
            return false
        }
        reader.requestedAt = SystemClock.monotonicNanoseconds()
        readSent(by: ObjectIdentifier(reader), at: reader.requestedAt)
        return true
    }

    /// The words of one of a reader's commands; a read of new entries waits
    /// for them up to the block timeout unless not `blocking`, and takes at
    /// most `count` (the configured batch size when `nil`).
    func command(
        _ command: StreamReaderStateMachine.Command, of reader: StreamReader, blocking: Bool = true,
        count: Int? = nil
    ) -> [[UInt8]] {
        let block = String(configuration.blockTimeout.clampedMilliseconds)
        let count = String(count ?? configuration.readBatchSize)
        let group = identity ?? ""
        switch command {
        case .asking:
            return [Array("ASKING".utf8)]
        case .exists:
            return [Array("EXISTS".utf8), reader.key]
        case .streamInfo:
            return [Array("XINFO".utf8), Array("STREAM".utf8), reader.key]
        case .lastKept(let id):
            return [Array("XREVRANGE".utf8), reader.key, Array(id.description.utf8), [UInt8(ascii: "-")]]
                + [Array("COUNT".utf8), [UInt8(ascii: "1")]]
        case .raiseCounter(let position, let entriesRead):
            return ["XGROUP", "SETID"].map { Array($0.utf8) } + [reader.key]
                + [group, position.description, "ENTRIESREAD", String(entriesRead)].map { Array($0.utf8) }
        case .read(.after(let id)):
            let wait = blocking ? ["BLOCK", block] : []
            return (["XREAD", "COUNT", count] + wait + ["STREAMS"]).map { Array($0.utf8) }
                + [reader.key, Array(id.description.utf8)]
        case .read(.pendingAfter(let id)):
            return ["XREADGROUP", "GROUP", group, group, "COUNT", count, "STREAMS"].map { Array($0.utf8) }
                + [reader.key, Array(id.description.utf8)]
        case .read(.new):
            let wait = blocking ? ["BLOCK", block] : []
            return (["XREADGROUP", "GROUP", group, group, "COUNT", count] + wait + ["STREAMS"]).map { Array($0.utf8) }
                + [reader.key, [UInt8(ascii: ">")]]
        }
    }

    /// Raises the group's counter, as the batch asks, and waits for Redis to
    /// take it, before the entries whose read counted the trim are handed
    /// out: once an observer was told of a loss, a later run is not told
    /// again, even when the hub closes right after (not with the next read,
    /// which a closed hub never sends). On the acknowledgements' connection,
    /// not the reader's, which `close()` may end at the server at any
    /// moment; no read is in flight meanwhile, so the group's position it
    /// sets is where the group is. When it fails, the raise goes with the
    /// next read.
    func raiseGroupCounter(_ raise: StreamReaderStateMachine.Command, of reader: StreamReader) {
        guard let acknowledgements else { return }
        let routed = acknowledgements.runNow([RoutedCommand(key: reader.key, command(raise, of: reader))])
        if routed.failure == nil, case .simpleString? = routed.replies.first { reader.machine.counterRaised() }
    }

    /// How long a read may go unanswered before its connection counts as broken.
    var patience: UInt64 {
        configuration.blockTimeout.clampedNanoseconds &+ options.commandTimeout.clampedNanoseconds
    }

    /// A read of `owner` (a reader or a watch) went out at `now`: it is
    /// unanswered once the patience has passed. On the loop.
    func readSent(by owner: ObjectIdentifier, at now: UInt64) {
        readDeadlines.value.set(owner, to: now &+ patience)
        armWatchdog()
    }

    /// Sets the one timer at the earliest deadline of a read in flight,
    /// unless it is set already no more than a second before it: a timer
    /// that fires early finds nothing due and is set again, so under a
    /// steady stream of reads it is moved about once a second, not once a
    /// read. While every read answers in time, it never fires. On the loop.
    func armWatchdog() {
        let deadlines = readDeadlines.value
        guard let earliest = deadlines.earliest else {
            if let armed = deadlines.armed { loop.cancelTimer(armed.number) }
            deadlines.armed = nil
            return
        }
        if let armed = deadlines.armed {
            if armed.deadline <= earliest, earliest - armed.deadline < 1_000_000_000 { return }
            loop.cancelTimer(armed.number)
        }
        let now = SystemClock.monotonicNanoseconds()
        let number = loop.scheduleCancellable(after: earliest > now ? earliest - now : 0) { [weak self] in
            self?.watchReaders()
        }
        deadlines.armed = (number, earliest)
    }

    /// At the earliest deadline of a read in flight, on the loop: a reader
    /// or watch whose read went unanswered for the patience has lost its
    /// server, or the path to it, and connects again.
    func watchReaders() {
        readDeadlines.value.armed = nil
        let readers = state.withLock { state -> [StreamReader]? in
            guard state.lifecycle.isOpen else { return nil }
            return Array(state.shared.readers.values) + Array(state.shared.namespaces.values)
        }
        guard let readers else { return }
        let now = SystemClock.monotonicNanoseconds()
        let due = Set(readDeadlines.value.takeDue(now: now))
        if !due.isEmpty {
            var stuck = readers.filter {
                due.contains(ObjectIdentifier($0)) && $0.machine.awaitingReply && now &- $0.requestedAt >= patience
            }
            // An answer that came while the loop was busy is not silence:
            // taken first (the loop fires its timers before it reads).
            for reader in stuck { readReplies(of: reader) }
            stuck.removeAll { !$0.machine.awaitingReply || $0.requestedAt &+ patience > now || $0.connection == nil }
            let stuckWatches = stuckWatches(now: now).filter { due.contains(ObjectIdentifier($0)) }
            // A node that stopped answering may have been failed over: ask
            // the cluster before connecting again (at most once a refresh
            // interval).
            if !stuck.isEmpty || !stuckWatches.isEmpty { router.refresh(now: now) }
            for watch in stuckWatches { lose(watch) }
            for reader in stuck {
                let node = reader.connection?.options.redactedDescription ?? "Redis"
                reconnect(reader, because: "\(node) did not answer a read within \(patience / 1_000_000) ms")
            }
        }
        armWatchdog()
    }

    /// Reads what arrived on the reader's connection and delivers its entries.
    func readReplies(of reader: StreamReader) {
        guard !reader.isCancelled, let connection = reader.connection else { return }
        let replies: [RESPValue]
        do throws(TypedNotificationError) {
            replies = try connection.readAvailable()
        } catch {
            reconnect(reader, because: error.message)
            return
        }
        for reply in replies {
            switch reader.machine.received(reply, host: connection.options.host) {
            case .none:
                continue
            case .readNow:
                requestEntries(of: reader)
            case .send(let commands):
                // The counters after a read that went without them; its
                // entries wait for their answer.
                guard send(commands, of: reader, on: connection) else { return }
            case .deliver(let batch):
                reader.backoff.reset()
                if reader.wasRefused {
                    reader.wasRefused = false
                    state.withLock { _ = $0.shared.readerErrors.removeValue(forKey: reader.name) }
                    readerErrorsMayHaveChanged()
                }
                deliver(batch, of: reader)
                // A read that found nothing: the name goes quiet and gives
                // up its connection (see `IdleReaders`).
                if batch.entries.isEmpty, batch.missed == 0, batch.rewound == 0, batch.missedIsExact, park(reader) {
                    return
                }
            case .reconnect:
                reconnect(reader, because: "\(connection.options.redactedDescription) could not serve a read now")
                return
            case .redirect(let redirection):
                router.learn(redirection)
                counters.add(to: .redirections)
                reconnect(reader, redirected: true)
                return
            case .fail(let text):
                let error = Self.failure(text, doing: "read \(String(decoding: reader.key, as: UTF8.self))")
                // A name read only through a namespace (its key made by
                // someone else, not a stream) costs that name, not the rest.
                let alone = state.withLock { state in
                    guard reader.discovers == nil, !state.shared.named.contains(reader.name),
                        state.shared.readers[reader.name] === reader
                    else { return false }
                    state.shared.readerErrors[reader.name] = error
                    return true
                }
                guard alone else {
                    reader.receiver?.fail(error)
                    reader.cancel()
                    releaseCancelledReaders()
                    return
                }
                // Said, and read again in 2 s: the key may be a stream again.
                readerErrorsMayHaveChanged()
                readAgainLater(reader)
                return
            }
        }
        // The next read goes out after the jobs the deliveries queued on this
        // loop (handlers on the hub's executor), so its system call is not
        // between an entry's arrival and its handler.
        loop.execute { [weak self, weak reader] in
            guard let self, let reader else { return }
            requestEntries(of: reader)
        }
    }

    /// Passes one read's entries to the center: what was trimmed before
    /// them first, then the group's counter raised past it, then the entries.
    func deliver(_ batch: StreamReaderStateMachine.Batch, of reader: StreamReader) {
        // Unsubscribed, or replaced: exact once `unsubscribe` returned. A
        // durable reader's entries stay pending for its next subscription.
        guard let receiver = reader.receiver, !reader.isStopping else { return }
        if reader.discovers != nil {
            if let raise = batch.raiseCounter { raiseGroupCounter(raise, of: reader) }
            discovered(batch, by: reader)
            return
        }
        if batch.rewound > 0 { counters.add(batch.rewound, to: .rewoundEntries) }
        if batch.missed > 0 || !batch.missedIsExact {
            counters.add(batch.missed, to: .trimmedUnread)
            receiver.missed(MissedNotifications(count: batch.missed, name: reader.name, isExact: batch.missedIsExact))
        }
        if let raise = batch.raiseCounter { raiseGroupCounter(raise, of: reader) }
        reader.held = HeldEntries(entries: batch.entries[...], isRedelivery: batch.isRedelivery)
        handOutHeld(of: reader, to: receiver)
    }

    /// Hands out the reader's held entries while its observers have room;
    /// returns whether none is left. Entries come held when one read asked
    /// for more than there is room for now: several names of a namespace
    /// read at once, each asking for the room its observers had, fill one
    /// buffer. A durable identity's held entries are not acknowledged: if
    /// the reader stops first, they come again, marked, on the next run.
    @discardableResult
    func handOutHeld(of reader: StreamReader, to receiver: TransportReceiver) -> Bool {
        guard var held = reader.held else { return true }
        reader.held = nil
        var room = receiver.room(for: reader.name) ?? Int.max
        while room > 0, let (id, fields) = held.entries.first {
            if reader.isStopping { return true }
            held.entries.removeFirst()
            guard var message = decode(fields, of: reader) else {
                if let report = oversized(fields, of: reader) {
                    // Over the center's limit: refused, and said whose it was.
                    counters.add(to: .refusedOversized)
                    receiver.refused(report)
                } else {
                    counters.add(to: .corruptEntriesSkipped)
                }
                acknowledgements?.acknowledge(id, key: reader.key)
                continue
            }
            message.isRedelivery = held.isRedelivery
            if let acknowledgements {
                let key = reader.key
                // Not acknowledged when every observer holding it ended
                // without handling it, nor when a buffer dropped it: it
                // stays pending and comes again, marked.
                message.receipt = DeliveryReceipt.unlessAbandonedOrDropped {
                    acknowledgements.acknowledge(id, key: key)
                }
            }
            counters.add(to: .delivered)
            receiver.receive(message)
            room -= 1
        }
        guard !held.entries.isEmpty else { return true }
        reader.held = held
        return false
    }

    /// The loop's one decoder (its caches take 20 KB, too much per name of
    /// a namespace over thousands), refusing what the reader's center would.
    func decoder(for reader: StreamReader) -> EnvelopeDecoderBox {
        let box = decoders.value
        let limit = reader.receiver?.maximumPayloadSize ?? NotificationEnvelope.payloadSizeHardLimit
        if box.decoder.maximumPayloadSize != limit { box.decoder = EnvelopeDecoder(maximumPayloadSize: limit) }
        return box
    }

    /// The bytes of an entry's one field, `e`: where a post puts its
    /// envelope. `nil` for an entry with any other field, or more.
    func envelopeBytes(_ fields: [RESPValue]?) -> [UInt8]? {
        guard let fields, fields.count == 2, case .bulkString(let field?) = fields[0], field == [UInt8(ascii: "e")],
            case .bulkString(let value?) = fields[1]
        else { return nil }
        return value
    }

    /// The envelope in an entry's fields, if it is a valid one of the reader's name.
    func decode(_ fields: [RESPValue]?, of reader: StreamReader) -> TransportMessage? {
        guard let value = envelopeBytes(fields),
            let message = try? decoder(for: reader).decode(value), message.name == reader.name
        else {
            return nil
        }
        return message
    }

    /// What an entry whose envelope is over the center's payload limit says
    /// of itself, if it is one of the reader's name. An entry always holds
    /// its whole value, so, as for a datagram the socket transport received
    /// whole, the length is believed only with every byte there and the
    /// checksum holding: an entry whose header only claims a large payload
    /// is corrupt, and nothing was missed.
    func oversized(_ fields: [RESPValue]?, of reader: StreamReader) -> MissedNotifications? {
        guard let value = envelopeBytes(fields) else { return nil }
        let report = value.withUnsafeBytes { decoder(for: reader).oversized($0) }
        guard let report, report.lastSequence != nil, report.name == reader.name else { return nil }
        return report
    }

    /// A reader could not connect: counted, and its error in
    /// ``readerErrors`` until it reads again.
    func reportFailedConnect(_ error: TypedNotificationError, of reader: StreamReader) {
        counters.add(to: .failedReconnects)
        state.withLock { state in
            if state.shared.isCurrent(reader) { state.shared.readerErrors[reader.name] = error }
        }
        readerErrorsMayHaveChanged()
    }

    /// Drops the reader's connection and makes a new one after a backoff
    /// (at once after a redirection), on the loop. With a reason (the
    /// connection failed, not a redirection), the reader's entry in
    /// ``readerErrors`` says so at once, until it reads again.
    func reconnect(_ reader: StreamReader, redirected: Bool = false, because reason: String? = nil) {
        // Reads again what this process was handed but has not acknowledged.
        reader.dropConnection()
        guard !reader.isCancelled else { return }
        if let reason {
            let error = TypedNotificationError(code: .unreachable, message: "reading again: \(reason)")
            state.withLock { state in
                if state.shared.isCurrent(reader) { state.shared.readerErrors[reader.name] = error }
            }
            readerErrorsMayHaveChanged()
        }
        // The first redirection in a row is followed at once; more of them
        // back off (two nodes that send a name to each other).
        let backoff = reader.backoff.nextDelay()
        let delay = redirected && reader.backoff.failures == 1 ? 0 : backoff
        loop.schedule(after: delay) { [weak self, weak reader] in
            guard let self, let reader, !reader.isCancelled, let receiver = reader.receiver else { return }
            do throws(TypedNotificationError) {
                let key = String(decoding: reader.key, as: UTF8.self)
                if let identity {
                    // Redis's counter, unless this reader counted further
                    // and has not raised it yet.
                    let last = reader.machine.lastDelivered
                    let resuming = last == .zero ? nil : (id: last, entriesRead: reader.machine.accounted)
                    if let counted = try createGroup(identity, key: key, resumingAfter: resuming) {
                        reader.machine.groupReady(entriesRead: counted)
                    }
                }
                var node = reader.machine.askedNode.map(router.options(for:)) ?? router.options(forKey: reader.key)
                // The loop serves every reader: a node that takes connections
                // but does not answer (a stopped process) holds it at most 1 s.
                node.commandTimeout = min(node.commandTimeout, .seconds(1))
                let connection = try RedisConnection.connect(
                    node, clientName: "tn-reader", identifying: identity != nil)
                // Not read from when the reader is being stopped.
                guard reader.adopt(connection) else { return }
                reader.connection = connection
                counters.add(to: .reconnects)
                state.withLock { _ = $0.shared.readerErrors.removeValue(forKey: reader.name) }
                readerErrorsMayHaveChanged()
                startReading(reader, receiver: receiver)
            } catch {
                // Said, not kept silent: a statistic and the reader's error
                // until it reads again. In a cluster, the slot map is asked
                // for again: a node that died sends no `MOVED`, and its
                // slots go to a replica the cluster promotes.
                reportFailedConnect(error, of: reader)
                router.refresh(now: SystemClock.monotonicNanoseconds())
                reconnect(reader)
            }
        }
    }
}
