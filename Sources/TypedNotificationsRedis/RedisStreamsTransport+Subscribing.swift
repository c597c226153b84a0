import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// Subscribing: where a name's reading starts, and its reader's connection.
extension RedisStreamsTransport {
    // MARK: Receiving

    /// Subscribes to what `selector` selects: one name, or every name of a
    /// namespace. Every entry added after this returns is read.
    ///
    /// For a name, records where reading starts (the stream's last ID, or
    /// this identity's consumer group), connects a reading connection for
    /// it, and hands it to the event loop.
    ///
    /// For a namespace, does that for every name announced in it so far,
    /// and reads its announcements (see the type's documentation): a name
    /// first posted later, by any process, is read from its first entry.
    /// Each name has its own reader and connection, whichever way it is
    /// subscribed; a name subscribed both ways is read once.
    ///
    /// - Throws: ``TypedNotifications/TypedNotificationError/Code/unreachable`` when the server
    ///   cannot be reached (in a cluster, after waiting up to
    ///   ``RedisStreamsConfiguration/failoverWait`` for a failover); nothing
    ///   is subscribed then.
    @_spi(TransportAuthoring) public func subscribe(to selector: NotificationSelector) throws(TypedNotificationError) {
        switch selector {
        case .name(let name): try subscribe(name: name)
        case .namespace(let namespace): try subscribe(namespace: namespace)
        }
    }

    /// Subscribes to one name: see `subscribe(to:)`.
    private func subscribe(name: NotificationName) throws(TypedNotificationError) {
        // Already read through a namespace: that reader serves the name too.
        let covered = state.withLock { state in
            guard state.shared.readers[name] != nil, state.shared.isCovered(name) else { return false }
            state.shared.named.insert(name)
            return true
        }
        if covered { return }
        let reader = try makeReader(for: name, failoverDeadline: failoverDeadline())
        let (receiver, replaced) = try state.withLock {
            state throws(TypedNotificationError) -> (TransportReceiver, StreamReader?) in
            let receiver = try state.lifecycle.opened(for: "subscribe")
            state.shared.named.insert(name)
            let replaced = state.shared.readers.updateValue(reader, forKey: name)
            return (receiver, replaced)
        }
        if let replaced { endReads(of: replaced) }
        loop.execute { [weak self] in
            replaced?.cancel()
            self?.releaseCancelledReaders()
            self?.startReading(reader, receiver: receiver)
        }
    }

    /// A reader of `name`, starting where a subscription to it starts (the
    /// stream's end by `firstRead`, or this identity's consumer group;
    /// `fromFirstEntry`: a new group starts at the first entry), on its own
    /// new connection, not started yet.
    /// `announced`: the name was announced to a namespace, so its stream
    /// exists (see ``snapshot(of:newest:failoverDeadline:mayBeMissing:)``).
    func makeReader(
        for name: NotificationName, fromFirstEntry: Bool = false, inNamespace: Bool = false, connecting: Bool = true,
        announced: Bool = false, failoverDeadline deadline: UInt64?
    ) throws(TypedNotificationError) -> StreamReader {
        let key = key(for: name)
        // In a cluster whose slot lost its master, wait for the election as
        // a post does: a watcher started during a failover starts after it.
        let start: StreamEntryID
        let accounted: Int?
        if let identity {
            start = .zero
            accounted = try createGroup(
                identity, key: key, resumingAfter: fromFirstEntry ? (.zero, 0) : nil, failoverDeadline: deadline,
                mayBeMissing: !announced)
        } else {
            (start, accounted) = try startingPoint(of: key, failoverDeadline: deadline, mayBeMissing: !announced)
        }
        let connection = connecting ? try connectReader(toKey: key, failoverDeadline: deadline) : nil
        return StreamReader(
            name: name, key: Array(key.utf8), connection: connection,
            machine: StreamReaderStateMachine(
                position: identity == nil ? .after(start) : .pendingAfter(.zero), accounted: accounted,
                isDurable: identity != nil,
                recentCountLimit: inNamespace
                    ? StreamReaderStateMachine.recentCountLimitInNamespace
                    : StreamReaderStateMachine.recentCountLimitOfName,
                streamMayBeMissing: identity == nil && start == .zero && (accounted ?? 0) == 0),
            loop: loop)
    }

    /// Connects a reader to the node of `key`; in a cluster, asks for the
    /// slot map again and tries again (pausing 50 ms, doubling to 500 ms)
    /// while that node cannot be reached, until `failoverDeadline`.
    func connectReader(
        toKey key: String, failoverDeadline: UInt64?
    ) throws(TypedNotificationError) -> RedisConnection {
        var pause: UInt32 = 50_000
        while true {
            do throws(TypedNotificationError) {
                return try RedisConnection.connect(
                    router.options(forKey: key.utf8), clientName: "tn-reader", identifying: identity != nil)
            } catch {
                let now = SystemClock.monotonicNanoseconds()
                router.refresh(now: now)
                guard error.code == .unreachable, router.isCluster, let failoverDeadline, now < failoverDeadline
                else { throw error }
                SystemProcess.pause(microseconds: pause)
                pause = min(pause * 2, 500_000)
            }
        }
    }

    /// The deadline of a wait for a failover starting now, by
    /// ``RedisStreamsConfiguration/failoverWait``; `nil` for none.
    func failoverDeadline() -> UInt64? {
        let wait = configuration.failoverWait
        return wait > .zero ? SystemClock.monotonicNanoseconds() &+ wait.clampedNanoseconds : nil
    }

    /// Stops reading what `selector` selects. A durable identity's entries read but not yet
    /// handled stay pending in its group and come again, marked as
    /// redeliveries, when it next subscribes. Its reads end at the server
    /// before this returns (a server that does not answer is waited for at
    /// most the connect and command timeouts): an entry posted after that
    /// is left for the identity's next subscription, as a first delivery.
    ///
    /// A namespace's names are read no more unless subscribed otherwise (by
    /// name, or through another namespace); a name that a namespace still
    /// covers goes on being read when it is unsubscribed by name.
    @_spi(TransportAuthoring) public func unsubscribe(from selector: NotificationSelector) {
        let name: NotificationName
        switch selector {
        case .name(let selected): name = selected
        case .namespace(let namespace):
            unsubscribe(namespace: namespace)
            return
        }
        let reader = state.withLock { state -> StreamReader? in
            state.shared.named.remove(name)
            guard !state.shared.isCovered(name) else { return nil }
            state.shared.readerErrors[name] = nil
            return state.shared.readers.removeValue(forKey: name)
        }
        readerErrorsMayHaveChanged()
        guard let reader else { return }
        endReads(of: reader)
        loop.execute { [weak self] in
            reader.cancel()
            self?.releaseCancelledReaders()
        }
    }

    /// Ends a durable reader's reads at the server before this returns, on
    /// a pooled connection: see ``endReads(of:identity:borrowing:giveBack:)``.
    func endReads(of reader: StreamReader) {
        Self.endReads(
            of: reader, identity: identity,
            borrowing: { (try? takeConnection(to: $0)) ?? (try? RedisConnection.connect($0)) },
            giveBack: putBack(_:))
    }

    /// Marks a reader as stopping, so that the loop hands out nothing more
    /// it read, not even a reply already on its way; for a durable reader,
    /// also ends its connection at the server (`CLIENT KILL ID`, on another
    /// connection to its node), from the calling thread, whether or not the
    /// loop got to the reader yet.
    ///
    /// Closing the socket is not enough: a blocking `XREADGROUP` that Redis
    /// serves before it notices the close (a busy server, or a loop that
    /// closes the socket late) hands the identity entries posted meanwhile,
    /// and its next run gets them marked as redeliveries though no handler
    /// saw them. Once this returned, no read of the reader takes an entry:
    /// its connection is gone at the server, and a connection the loop makes
    /// again is never read from (``StreamReader/adopt(_:)``). Static, for
    /// `close()`, which may run in `deinit`.
    ///
    /// Returns the node when it did not answer (`nil` otherwise), so that
    /// `close()` waits for a silent node once, not once per reader. A
    /// borrowed connection that fails at once (one the server closed while
    /// it was idle) is replaced by a new one, once.
    @discardableResult
    static func endReads(
        of reader: StreamReader, identity: String?,
        borrowing borrow: (RedisConnectionOptions) -> RedisConnection?, giveBack: (RedisConnection) -> Void
    ) -> RedisConnectionOptions? {
        // Marked for every reader: the loop hands nothing of it out after
        // this, even a reply already on its way (see `deliver`).
        let connection = reader.markStopping()
        guard identity != nil, let (node, clientID) = connection else { return nil }
        let kill = [Array("CLIENT".utf8), Array("KILL".utf8), Array("ID".utf8), Array(String(clientID).utf8)]
        guard let borrowed = borrow(node) else { return node }
        let started = SystemClock.monotonicNanoseconds()
        if (try? borrowed.call(kill)) != nil {
            giveBack(borrowed)
            return nil
        }
        guard SystemClock.monotonicNanoseconds() &- started < 100_000_000,
            let fresh = try? RedisConnection.connect(node), (try? fresh.call(kill)) != nil
        else { return node }
        giveBack(fresh)
        return nil
    }

    /// Where reading starts by `firstRead`, from one snapshot of the
    /// stream: the ID reading starts after, and how many entries were ever
    /// added up to it (`nil` from a server before Redis 7). Entries trimmed
    /// up to there are not missed: nobody was reading them.
    func startingPoint(
        of key: String, failoverDeadline: UInt64? = nil, mayBeMissing: Bool = true
    ) throws(TypedNotificationError) -> (StreamEntryID, Int?) {
        var newest: Int?
        if case .newest(let count) = firstRead.kind { newest = count }
        let (snapshot, ids) = try snapshot(
            of: key, newest: newest, failoverDeadline: failoverDeadline, mayBeMissing: mayBeMissing)
        switch firstRead.kind {
        case .beginning:
            return (.zero, snapshot?.removed)
        case .end:
            return (snapshot?.lastGenerated ?? .zero, snapshot?.added)
        case .newest:
            return (ids.last?.predecessor ?? .zero, snapshot.map { $0.added - ids.count })
        }
    }

    /// `XINFO STREAM` of `key` and, with `newest`, the IDs of its newest
    /// entries (newest first), read together in one pipeline.
    ///
    /// `XINFO` fails on a key that does not exist, and the package sends no
    /// command that fails in the normal course: a key that `mayBeMissing`
    /// (one never announced to a namespace) is asked about with `EXISTS`
    /// first, one round trip, and one that does not exist is the empty
    /// stream it would be.
    func snapshot(
        of key: String, newest: Int?, failoverDeadline: UInt64? = nil, mayBeMissing: Bool = true
    ) throws(TypedNotificationError) -> (StreamSnapshot?, [StreamEntryID]) {
        if mayBeMissing {
            let routed = run([RoutedCommand(key: key, "EXISTS", key)], failoverDeadline: failoverDeadline)
            if let failure = routed.failure { throw failure }
            if case .integer(0) = routed.replies[0] { return (StreamSnapshot(), []) }
        }
        var commands = [RoutedCommand(key: key, "XINFO", "STREAM", key)]
        if let newest { commands.append(RoutedCommand(key: key, "XREVRANGE", key, "+", "-", "COUNT", String(newest))) }
        let routed = run(commands, failoverDeadline: failoverDeadline)
        if let failure = routed.failure { throw failure }
        guard newest != nil else { return (StreamSnapshot(routed.replies[0]), []) }
        switch routed.replies[1] {
        case .array(let entries?):
            let ids = entries.compactMap { entry -> StreamEntryID? in
                guard case .array(let parts?) = entry, case .bulkString(let id?)? = parts.first else { return nil }
                return StreamEntryID(id)
            }
            return (StreamSnapshot(routed.replies[0]), ids)
        case .error(let text):
            throw Self.failure(text, doing: "read the newest entries of \(key)")
        default:
            return (StreamSnapshot(routed.replies[0]), [])
        }
    }

    /// Creates this identity's group on `key` at the first-read position, if
    /// it does not exist yet (the group then remembers where it is), and
    /// returns the group's entries-read: how many entries were ever added up
    /// to its position. A new group's counter starts where reading starts,
    /// from the same snapshot, so entries trimmed before it are not missed.
    func createGroup(
        _ group: String, key: String, resumingAfter last: (id: StreamEntryID, entriesRead: Int?)? = nil,
        failoverDeadline: UInt64? = nil, mayBeMissing: Bool = true
    ) throws(TypedNotificationError) -> Int? {
        // The group is made only where it is not there, so that no command
        // fails in the normal course (`XGROUP CREATE` of a group that exists
        // fails with `BUSYGROUP`, and a reader looks on every reconnect).
        if let existing = try existingGroup(
            group, key: key, failoverDeadline: failoverDeadline, mayBeMissing: mayBeMissing)
        {
            return existing
        }
        // A group made again (deleted while this reader read, by XGROUP
        // DESTROY or a server that lost it) starts after what this reader
        // was handed, not where a new identity starts: what was posted
        // while it was gone is read, not skipped unreported.
        let start: StreamEntryID
        let accounted: Int?
        if let last {
            (start, accounted) = (last.id, last.entriesRead)
        } else {
            (start, accounted) = try startingPoint(of: key, mayBeMissing: mayBeMissing)
        }
        var arguments = ["XGROUP", "CREATE", key, group, start.description, "MKSTREAM"]
        if let accounted { arguments += ["ENTRIESREAD", String(accounted)] }
        let create = RoutedCommand(key: Array(key.utf8), arguments.map { Array($0.utf8) })
        let routed = run([create, RoutedCommand(key: key, "XINFO", "GROUPS", key)], failoverDeadline: failoverDeadline)
        if let failure = routed.failure { throw failure }
        if case .error(let text) = routed.replies[0], !text.hasPrefix("BUSYGROUP") {
            throw Self.failure(text, doing: "create the consumer group \(group) on \(key)")
        }
        guard case .array(let groups?) = routed.replies[1] else { return nil }
        for case .array(let fields?) in groups {
            let identity = Self.identity(from: fields)
            if identity.name == group { return identity.entriesRead }
        }
        return nil
    }

    /// The entries-read of `group` on `key` (`.some(nil)`: not known, a
    /// server before Redis 7) when the group exists; `nil` when it does
    /// not, or the key does not. A key that `mayBeMissing` is asked about
    /// with `EXISTS` first: `XINFO GROUPS` fails on a key that is not there.
    private func existingGroup(
        _ group: String, key: String, failoverDeadline: UInt64?, mayBeMissing: Bool
    ) throws(TypedNotificationError) -> Int?? {
        if mayBeMissing {
            let routed = run([RoutedCommand(key: key, "EXISTS", key)], failoverDeadline: failoverDeadline)
            if let failure = routed.failure { throw failure }
            if case .integer(0) = routed.replies[0] { return nil }
        }
        let routed = run([RoutedCommand(key: key, "XINFO", "GROUPS", key)], failoverDeadline: failoverDeadline)
        if let failure = routed.failure { throw failure }
        guard case .array(let groups?) = routed.replies[0] else { return nil }
        for case .array(let fields?) in groups {
            let identity = Self.identity(from: fields)
            if identity.name == group { return .some(identity.entriesRead) }
        }
        return nil
    }

    /// The error for an error reply Redis gave while doing `what`.
    static func failure(_ text: String, doing what: String) -> TypedNotificationError {
        TypedNotificationError(
            code: text.hasPrefix("NOPERM") || text.hasPrefix("NOAUTH") ? .authenticationFailed : .transportFailure,
            message: "Redis refused to \(what): \(text)")
    }
}
