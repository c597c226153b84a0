import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// Namespaces: posters announce each name once to every namespace that
// contains it; a namespace observer reads that announcement stream and
// starts a reader per name it finds.
//
// Per namespace `NS` two keys share the hash tag `{NS}`, so one slot holds
// both in a cluster: the set `<prefix>:names:{NS}` of every name ever
// posted in it, and the stream `<prefix>:new:{NS}` with an entry (`n` = the
// name) per name, added before the name joins the set. A poster announces
// a name before its first post of it, and again after
// `announcementCheckNanoseconds` or a new connection: `SISMEMBER`, and for
// a name not in the set yet `XADD` then `SADD`. The stream grows by one
// entry per name (two only when posters race or one crashes between the
// two), never per post, and is never trimmed. A name is not announced to
// the namespace it starts (`a.b` to `a.b`): that namespace's observer
// reads it anyway.
extension RedisStreamsTransport {
    /// How many names a transport remembers having announced; past it, it
    /// forgets them all and announces again (the set makes that harmless).
    static var announcedLimit: Int { 65_536 }

    /// How long a name counts as announced (10 s): a post after that checks
    /// the namespaces' sets again, one round trip, so a name whose
    /// announcement the server lost (a restart without persistence, a
    /// failover to a replica that lacked it) is announced again. A new
    /// connection of the poster (its server restarted, or a failover moved
    /// a slot) forgets every announcement at once.
    static var announcementCheckNanoseconds: UInt64 { 10_000_000_000 }

    /// The set of every name ever posted in `namespace`.
    func namesKey(of namespace: NotificationNamespace) -> String {
        "\(configuration.keyPrefix):names:{\(namespace.rawValue)}"
    }

    /// The stream that announces each name of `namespace` once.
    func discoveryKey(of namespace: NotificationNamespace) -> String {
        "\(configuration.keyPrefix):new:{\(namespace.rawValue)}"
    }

    /// The names read now, by name or through a namespace.
    var namesRead: Set<NotificationName> { state.withLock { Set($0.shared.readers.keys) } }
    /// How many connections wait for quiet names' posts (see `IdleReaders`).
    var idleWatchCount: Int { idleWatches.value.load(ordering: .relaxed) }
    /// The most names of namespaces that read on connections of their own
    /// at once so far (see `IdleReaders`).
    var mostNamesReadingAtOnce: Int { idleMostReading.value.load(ordering: .relaxed) }

    // MARK: Posting

    /// Announces the names of `messages` this transport has not announced
    /// yet to every namespace that contains them, before they are posted
    /// (as many namespaces as the name has labels, less one): on the first
    /// post of a name only, one round trip, and two more where the name is
    /// new to a namespace. Returns why that failed; nothing is posted then.
    func announceNewNames(of messages: some Collection<TransportMessage>) -> TypedNotificationError? {
        let now = SystemClock.monotonicNanoseconds()
        let fresh = state.withLock { state -> [NotificationName] in
            var fresh: [NotificationName] = []
            for message in messages where !fresh.contains(message.name) {
                if let announced = state.shared.announced[message.name],
                    now &- announced < Self.announcementCheckNanoseconds
                {
                    continue
                }
                fresh.append(message.name)
            }
            return fresh
        }
        guard !fresh.isEmpty else { return nil }
        var announcements: [(name: NotificationName, namespace: NotificationNamespace)] = []
        for name in fresh {
            NotificationNamespace.forEach(containing: name) { namespace in
                // A namespace's observer reads its first name anyway.
                if namespace.root != name { announcements.append((name, namespace)) }
            }
        }
        // Three steps, each on the namespaces the last left: which have the
        // name already (`SISMEMBER`); the others get it in the stream
        // (`XADD`), then in the set (`SADD`). A crash in between announces
        // it again (a duplicate, which readers skip), never not at all.
        let deadline = failoverDeadline()
        var routed = run(
            announcements.map {
                let names = namesKey(of: $0.namespace)
                return RoutedCommand(key: names, "SISMEMBER", names, $0.name.rawValue)
            }, failoverDeadline: deadline)
        // The set only after the stream took the name: a refused `XADD`
        // (an ACL, a full server) must not leave the name in the set,
        // where no poster would announce it again.
        for step in 0..<2 where routed.failure == nil && !routed.replies.contains(where: \.isError) {
            let answered = routed.replies.suffix(announcements.count)
            guard answered.count == announcements.count else { break }
            var commands: [RoutedCommand] = []
            var next: [(name: NotificationName, namespace: NotificationNamespace)] = []
            for (announcement, reply) in zip(announcements, answered) where step == 1 || reply != .integer(1) {
                let name = announcement.name.rawValue
                if step == 0 {
                    let stream = discoveryKey(of: announcement.namespace)
                    commands.append(RoutedCommand(key: stream, "XADD", stream, "*", "n", name))
                } else {
                    let names = namesKey(of: announcement.namespace)
                    commands.append(RoutedCommand(key: names, "SADD", names, name))
                }
                next.append(announcement)
            }
            guard !commands.isEmpty else { break }
            announcements = next
            let replies = routed.replies
            routed = run(commands, failoverDeadline: deadline)
            routed.replies = replies + routed.replies
        }
        let refused = routed.replies.lazy.compactMap { reply -> String? in
            if case .error(let text) = reply { return text }
            return nil
        }.first
        if let why = refused ?? routed.failure?.message {
            let code: TypedNotificationError.Code =
                routed.failure?.code ?? (why.hasPrefix("NOPERM") ? .authenticationFailed : .transportFailure)
            return TypedNotificationError(
                code: code,
                message:
                    "could not announce \(fresh[0].rawValue) to namespace observers, so nothing was posted: \(why)",
                cause: routed.failure)
        }
        state.withLock { state in
            if state.shared.announced.count + fresh.count > Self.announcedLimit { state.shared.announced = [:] }
            for name in fresh { state.shared.announced[name] = now }
        }
        return nil
    }

    // MARK: Subscribing

    /// Subscribes to every name of `namespace`: a reader per name announced
    /// so far (each starting as a subscription to that name would), and a
    /// reader of the namespace's announcements, from where they stand now,
    /// which starts a reader per name announced later, from its first entry.
    /// A durable identity reads the announcements through its consumer
    /// group: a name announced while it was away is read from its first
    /// entry on its next run, and an announcement is acknowledged only once
    /// the name's own group exists.
    func subscribe(namespace: NotificationNamespace) throws(TypedNotificationError) {
        if let error = namespace.validationError { throw error }
        let discovery = discoveryKey(of: namespace)
        let deadline = failoverDeadline()
        let machine: StreamReaderStateMachine
        let listedUpTo: StreamEntryID
        if let identity {
            let joined = try joinAnnouncements(identity, key: discovery, failoverDeadline: deadline)
            listedUpTo = joined.position
            machine = StreamReaderStateMachine(
                position: .pendingAfter(.zero), accounted: joined.entriesRead, isDurable: true)
        } else {
            let (snapshot, _) = try snapshot(of: discovery, newest: nil, failoverDeadline: deadline)
            listedUpTo = snapshot?.lastGenerated ?? .zero
            machine = StreamReaderStateMachine(
                position: .after(listedUpTo), accounted: snapshot?.added, isDurable: false,
                streamMayBeMissing: listedUpTo == .zero && (snapshot?.added ?? 0) == 0)
        }
        // The namespace's first name is read as if announced first: it is
        // never announced to its own namespace. Names announced after
        // `listedUpTo` (a durable identity's position), or whose announcement
        // the identity read and did not acknowledge (it stopped before their
        // group was made), are left to the announcements' reader, which
        // reads them from their first entry. Names in the set with no
        // announcement left (trimmed by hand) are listed.
        let announced = try announcedNames(in: namespace, failoverDeadline: deadline)
        // (A name announced twice, on both sides of it, is listed: it is older.)
        let before = Set(announced.filter { $0.id <= listedUpTo }.map(\.name))
        var later = Set(announced.filter { $0.id > listedUpTo && !before.contains($0.name) }.map(\.name))
        if let identity {
            let pending = try pendingAnnouncements(identity, key: discovery, failoverDeadline: deadline)
            later.formUnion(announced.filter { pending.contains($0.id) }.map(\.name))
        }
        let known = Set(announced.map(\.name))
        // A durable identity cannot tell whether a name whose announcement
        // was trimmed appeared while it was away: at least once, it reads
        // such a name without a group of its own from its first entry.
        let unannounced = Set(
            (try namesInSet(of: namespace, failoverDeadline: deadline)).filter { !known.contains($0) })
        let listed =
            [namespace.root]
            + (announced.map(\.name) + unannounced).filter { $0 != namespace.root && !later.contains($0) }
        var unique: Set<NotificationName> = []
        let unread = state.withLock { state in
            listed.filter { state.shared.readers[$0] == nil && unique.insert($0).inserted }
        }
        var made: [StreamReader] = []
        var refused: [NotificationName: TypedNotificationError] = [:]
        // Names start without a connection each (see `IdleReaders`).
        let quiet = !router.isCluster
        for name in unread {
            do throws(TypedNotificationError) {
                made.append(
                    try makeReader(
                        for: name, fromFirstEntry: identity != nil && unannounced.contains(name), inNamespace: true,
                        connecting: !quiet, announced: name != namespace.root, failoverDeadline: deadline))
            } catch  where error.code == .transportFailure && name != namespace.root {
                // Refused for good (its key is not a stream): said, not read.
                refused[name] = error
            }
        }
        let discoverer = StreamReader(
            name: namespace.root, key: Array(discovery.utf8),
            connection: try connectReader(toKey: discovery, failoverDeadline: deadline), machine: machine,
            loop: loop, discovers: namespace)
        let (receiver, started, unused) = try state.withLock {
            state throws(TypedNotificationError) -> (TransportReceiver, [StreamReader], [StreamReader]) in
            let receiver = try state.lifecycle.opened(for: "subscribe")
            state.shared.readerErrors.merge(refused) { $1 }
            var started: [StreamReader] = []
            var unused: [StreamReader] = []
            for reader in made {
                if state.shared.readers[reader.name] == nil {
                    state.shared.readers[reader.name] = reader
                    started.append(reader)
                } else {
                    unused.append(reader)
                }
            }
            if let replaced = state.shared.namespaces.updateValue(discoverer, forKey: namespace) {
                unused.append(replaced)
            }
            return (receiver, started, unused)
        }
        readerErrorsMayHaveChanged()
        for reader in unused { endReads(of: reader) }
        loop.execute { [weak self] in
            for reader in unused { reader.cancel() }
            guard let self else { return }
            releaseCancelledReaders()
            for reader in started + [discoverer] where reader.connection != nil {
                startReading(reader, receiver: receiver)
            }
            startWaiting(started.filter { $0.connection == nil }, receiver: receiver)
        }
    }

    /// Stops reading `namespace`'s announcements and every name's stream
    /// that no other subscription (by name, or another namespace) covers.
    func unsubscribe(namespace: NotificationNamespace) {
        let stopped = state.withLock { state -> [StreamReader] in
            guard let discoverer = state.shared.namespaces.removeValue(forKey: namespace) else { return [] }
            var stopped = [discoverer]
            for (name, reader) in state.shared.readers
            where namespace.contains(name) && !state.shared.isCovered(name) {
                state.shared.readers[name] = nil
                state.shared.readerErrors[name] = nil
                stopped.append(reader)
            }
            return stopped
        }
        readerErrorsMayHaveChanged()
        for reader in stopped { endReads(of: reader) }
        loop.execute { [weak self] in
            for reader in stopped { reader.cancel() }
            self?.releaseCancelledReaders()
        }
    }

    /// This identity's consumer group on an announcement stream, made at
    /// its end if it is new: its position (every name announced up to it
    /// was known to the identity, or there before it first observed the
    /// namespace) and entries-read.
    private func joinAnnouncements(
        _ group: String, key: String, failoverDeadline: UInt64?
    ) throws(TypedNotificationError) -> (position: StreamEntryID, entriesRead: Int?) {
        let routed = run(
            [
                RoutedCommand(key: key, "XGROUP", "CREATE", key, group, "$", "MKSTREAM"),
                RoutedCommand(key: key, "XINFO", "GROUPS", key),
            ], failoverDeadline: failoverDeadline)
        if let failure = routed.failure { throw failure }
        if case .error(let text) = routed.replies[0], !text.hasPrefix("BUSYGROUP") {
            throw Self.failure(text, doing: "create the consumer group \(group) on \(key)")
        }
        if case .error(let text) = routed.replies[1] { throw Self.failure(text, doing: "read the groups of \(key)") }
        if case .array(let groups?) = routed.replies[1] {
            for case .array(let fields?) in groups {
                let found = Self.identity(from: fields)
                if found.name == group { return (Self.lastDelivered(in: fields), found.entriesRead) }
            }
        }
        throw TypedNotificationError(
            code: .transportFailure, message: "Redis did not list the consumer group \(group) it made on \(key)")
    }

    /// A group's `last-delivered-id` from its `XINFO GROUPS` fields.
    private static func lastDelivered(in fields: [RESPValue]) -> StreamEntryID {
        var index = 0
        while index + 1 < fields.count {
            defer { index += 2 }
            if case .bulkString(let field?) = fields[index], field == Array("last-delivered-id".utf8),
                case .bulkString(let id?) = fields[index + 1]
            {
                return StreamEntryID(id) ?? .zero
            }
        }
        return .zero
    }

    /// The names announced in `namespace`, oldest first, each with its
    /// announcement's ID; an entry that is not a valid name of it is skipped.
    private func announcedNames(
        in namespace: NotificationNamespace, failoverDeadline: UInt64?
    ) throws(TypedNotificationError) -> [(id: StreamEntryID, name: NotificationName)] {
        let key = discoveryKey(of: namespace)
        let routed = run([RoutedCommand(key: key, "XRANGE", key, "-", "+")], failoverDeadline: failoverDeadline)
        if let failure = routed.failure { throw failure }
        if case .error(let text) = routed.replies[0] { throw Self.failure(text, doing: "list the names of \(key)") }
        return StreamReaderStateMachine.entries(in: .array([.array([.bulkString([]), routed.replies[0]])])).compactMap {
            entry in Self.announcedName(in: entry.1, of: namespace).map { (entry.0, $0) }
        }
    }

    /// The IDs of the announcements this identity read and has not acknowledged.
    private func pendingAnnouncements(
        _ group: String, key: String, failoverDeadline: UInt64?
    ) throws(TypedNotificationError) -> Set<StreamEntryID> {
        let routed = run(
            [RoutedCommand(key: key, "XPENDING", key, group, "-", "+", "1000000")], failoverDeadline: failoverDeadline)
        if let failure = routed.failure { throw failure }
        guard case .array(let entries?) = routed.replies[0] else {
            if case .error(let text) = routed.replies[0] {
                throw Self.failure(text, doing: "read the pending entries of \(key)")
            }
            return []
        }
        var pending: Set<StreamEntryID> = []
        for case .array(let fields?) in entries {
            if case .bulkString(let id?)? = fields.first, let parsed = StreamEntryID(id) { pending.insert(parsed) }
        }
        return pending
    }

    /// The valid names of `namespace` in its set of names.
    func namesInSet(
        of namespace: NotificationNamespace, failoverDeadline: UInt64?
    ) throws(TypedNotificationError) -> [NotificationName] {
        let key = namesKey(of: namespace)
        let routed = run([RoutedCommand(key: key, "SMEMBERS", key)], failoverDeadline: failoverDeadline)
        if let failure = routed.failure { throw failure }
        guard case .array(let members?) = routed.replies[0] else {
            if case .error(let text) = routed.replies[0] { throw Self.failure(text, doing: "list the names of \(key)") }
            return []
        }
        return members.compactMap { Self.name(in: $0, of: namespace) }
    }

    /// The name an announcement's fields hold, if it is a valid one of `namespace`.
    static func announcedName(in fields: [RESPValue]?, of namespace: NotificationNamespace) -> NotificationName? {
        guard let fields, fields.count == 2, case .bulkString(let field?) = fields[0], field == [UInt8(ascii: "n")]
        else { return nil }
        return name(in: fields[1], of: namespace)
    }

    /// The name a bulk string holds, if it is a valid one of `namespace`:
    /// what anyone may have written to the announcements or the set.
    private static func name(in value: RESPValue, of namespace: NotificationNamespace) -> NotificationName? {
        guard case .bulkString(let bytes?) = value,
            let name = try? NotificationName(validating: String(decoding: bytes, as: UTF8.self)),
            namespace.contains(name)
        else { return nil }
        return name
    }
}

extension RESPValue {
    /// Whether this is an error reply.
    var isError: Bool {
        if case .error = self { return true }
        return false
    }
}

extension RedisTransportState {
    /// Whether `reader` is the one subscribed for its name or, reading
    /// announcements, for its namespace. A namespace's reader reports its
    /// errors in ``RedisStreamsTransport/readerErrors`` under the
    /// namespace's first name.
    func isCurrent(_ reader: StreamReader) -> Bool {
        if let namespace = reader.discovers { return namespaces[namespace] === reader }
        return readers[reader.name] === reader
    }

    /// Whether `name` is subscribed by name or through a namespace.
    func isCovered(_ name: NotificationName) -> Bool {
        if named.contains(name) { return true }
        var covered = false
        NotificationNamespace.forEach(containing: name) { namespace in
            if namespaces[namespace] != nil { covered = true }
        }
        return covered
    }
}
