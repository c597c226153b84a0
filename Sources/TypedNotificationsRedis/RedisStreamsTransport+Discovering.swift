@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// Namespaces, on the event loop: readers started for the names a
// namespace's announcements name (see RedisStreamsTransport+Namespaces.swift).
extension RedisStreamsTransport {
    /// Starts a reader, from its stream's first entry, for each name a read
    /// of `discoverer`'s announcements found that no reader reads yet. On
    /// the loop. A durable identity's group on the name is made first (at
    /// the first entry), and the announcement acknowledged after: a crash
    /// in between announces the name again on the next run. When the
    /// announcements were trimmed before they were read (by hand: this
    /// transport never trims them), every name in the namespace's set is
    /// looked at instead.
    func discovered(_ batch: StreamReaderStateMachine.Batch, by discoverer: StreamReader) {
        guard let namespace = discoverer.discovers, let receiver = discoverer.receiver else { return }
        var found: [(id: StreamEntryID?, name: NotificationName?)] = batch.entries.map {
            ($0.0, Self.announcedName(in: $0.1, of: namespace))
        }
        if batch.missed > 0 || !batch.missedIsExact, let names = try? namesInSet(of: namespace, failoverDeadline: nil) {
            found += names.map { (nil, $0) }
        }
        for (id, name) in found {
            if let name {
                startDiscovered(name, announcedAt: id, by: discoverer, receiver: receiver)
            } else if let id {
                // Not a name of the namespace: nothing to wait for.
                acknowledgements?.acknowledge(id, key: discoverer.key)
            }
        }
    }

    /// Starts reading `name` from its first entry for `discoverer`, unless
    /// a reader reads it already or the namespace was unsubscribed. On the
    /// loop. A durable identity's group that cannot be made yet is tried
    /// again after a backoff, and the announcement (`id`) acknowledged once
    /// the group exists: a crash before leaves it pending, for the next run.
    /// A name Redis refuses for good (its key is not a stream) is not read,
    /// and said in ``readerErrors``: the rest of the namespace goes on. The
    /// name's reader connects like a reader that lost its connection.
    private func startDiscovered(
        _ name: NotificationName, announcedAt id: StreamEntryID?, by discoverer: StreamReader,
        receiver: TransportReceiver, backoff: UInt64 = 50_000_000
    ) {
        guard let namespace = discoverer.discovers else { return }
        let current = state.withLock { state in
            state.shared.readers[name] == nil && state.shared.namespaces[namespace] === discoverer
        }
        guard current, !discoverer.isCancelled else {
            if let id { acknowledgements?.acknowledge(id, key: discoverer.key) }
            return
        }
        let key = key(for: name)
        var accounted: Int? = 0
        if let identity {
            do throws(TypedNotificationError) {
                accounted = try createGroup(identity, key: key, resumingAfter: (.zero, 0))
            } catch  where error.code == .transportFailure {
                state.withLock { $0.shared.readerErrors[name] = error }
                readerErrorsMayHaveChanged()
                if let id { acknowledgements?.acknowledge(id, key: discoverer.key) }
                return
            } catch {
                counters.add(to: .failedReconnects)
                loop.schedule(after: backoff) { [weak self, weak discoverer] in
                    guard let self, let discoverer, !discoverer.isCancelled else { return }
                    startDiscovered(
                        name, announcedAt: id, by: discoverer, receiver: receiver,
                        backoff: min(backoff * 2, 2_000_000_000))
                }
                return
            }
        }
        if let id { acknowledgements?.acknowledge(id, key: discoverer.key) }
        let reader = StreamReader(
            name: name, key: Array(key.utf8), connection: nil,
            machine: StreamReaderStateMachine(
                position: identity == nil ? .after(.zero) : .pendingAfter(.zero), accounted: accounted,
                isDurable: identity != nil, recentCountLimit: StreamReaderStateMachine.recentCountLimitInNamespace),
            loop: loop)
        reader.receiver = receiver
        let added = state.withLock { state in
            guard state.lifecycle.isOpen, state.shared.readers[name] == nil,
                state.shared.namespaces[namespace] === discoverer
            else { return false }
            state.shared.readers[name] = reader
            return true
        }
        guard added else { return }
        // A new name starts as listed ones do (see `IdleReaders`): a plain
        // observer's quiet, its first entry waking it; a durable identity's
        // reading from its first entry when a connection is free.
        if mayPark(reader) {
            startWaiting([reader], receiver: receiver)
        } else {
            connect(reader)
        }
    }

    /// Connects a reader made without a connection and starts it; when that
    /// fails, it tries again as a reader that lost its connection does.
    func connect(_ reader: StreamReader) {
        guard let receiver = reader.receiver else { return }
        var node = router.options(forKey: reader.key)
        node.commandTimeout = min(node.commandTimeout, .seconds(1))
        do throws(TypedNotificationError) {
            let connection = try RedisConnection.connect(node, clientName: "tn-reader", identifying: identity != nil)
            guard reader.adopt(connection) else { return }
            reader.connection = connection
            startReading(reader, receiver: receiver)
        } catch {
            reconnect(reader, because: error.message)
        }
    }
}
