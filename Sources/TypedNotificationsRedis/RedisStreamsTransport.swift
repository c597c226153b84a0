import NotificationPlatform
import Synchronization
@_spi(TransportAuthoring) import TypedNotifications

/// Carries notifications through Redis Streams, so centers on many hosts
/// that reach one Redis (or Valkey) server see each other's posts, with the
/// guarantees of ``TypedNotifications/FileSignalTransport`` where the engine allows.
///
/// ```swift
/// let transport = try RedisStreamsTransport(url: "redis://app:secret@cache.internal:6379")
/// let center = try NotificationHub(endpoint: "billing", transport: transport)
/// ```
///
/// - One stream per notification name, key `tn:{<name>}` (see
///   ``RedisStreamsConfiguration/keyPrefix``); each entry holds the complete
///   envelope in its field `e`, so the checksum and the sender's identity
///   travel unchanged. An entry that is not a valid envelope of its stream's
///   name is skipped and counted in ``RedisStreamsStatistics/corruptEntriesSkipped``,
///   never delivered.
/// - Posts: a post returns once Redis acknowledged its `XADD`. Posts that
///   queue up behind one in progress go out pipelined, in one write. While
///   the server is unreachable, a post fails at once with
///   ``TypedNotifications/TypedNotificationError/Code/unreachable``: nothing is buffered, the
///   caller decides. After a failed connection attempt, further posts fail
///   without trying for a backoff (50 ms, doubling to 2 s); the first post
///   after it tries again.
/// - Registration is immediate: `subscribe` records the stream's last ID
///   before it returns, and the reader reads every entry after it.
/// - A plain observer reads with `XREAD` from there; a durable `identity`
///   reads through a consumer group of that name, acknowledging (`XACK`)
///   each entry once every observer has handled it. An entry that every
///   observer holding it abandoned (cancelled, or left its loop, with the
///   entry read but not handled) is not acknowledged: it stays pending and
///   comes again, marked, when the identity next subscribes to the name.
///   After a crash or a restart it resumes with the entries it had read but not acknowledged,
///   marked ``TypedNotifications/NotificationDelivery/isRedelivery``, then what came after:
///   nothing it acknowledged comes again. What Redis itself keeps over a
///   server crash depends on its persistence (`appendonly yes` with
///   `appendfsync always` keeps every acknowledged post).
/// - Each subscribed name has its own reading connection, read by one
///   event-loop thread that also runs the hub's executor. A broken
///   connection is made again with backoff, and reading resumes where it
///   stopped. An observer whose buffer is backed up is not read for: the
///   stream keeps its entries.
/// - Retention: ``RedisStreamsConfiguration/maximumLength`` trims on every
///   post, ``RedisStreamsConfiguration/maximumAge`` at most once a second
///   per name. A reader that fell behind retention is told exactly how many
///   entries were trimmed before it read them, of every sender, in the next
///   delivery's ``TypedNotifications/NotificationDelivery/missed``: each read
///   goes out with an `XINFO STREAM`, which Redis runs just before it, and
///   the stream's counters (entries ever added, entries left) against the
///   reader's own count tell how many it never got. A durable identity's
///   count is its group's entries-read, raised past what was reported, so a
///   later run does not report it again. Entries trimmed before a reader
///   started (before its registration, or before ``firstRead``) are not
///   missed. Needs Redis 7 (or Valkey 7.2) or later; two processes sharing
///   one durable identity make the count inexact, and so does `XDEL` by
///   hand of entries no one has read while older ones remain.
/// - Redis Cluster: point the URL at any node. The transport reads the
///   slot map (`CLUSTER SLOTS`) when it opens and sends each command to the
///   node that owns its name's hash slot; the braces in `tn:{<name>}` make
///   the name the hash tag, so a name's stream stays in one slot and names
///   spread over the nodes. A slot that moves (a reshard, a failover) is
///   followed: `MOVED` updates the map and the command goes again to the new
///   node; `ASK` sends that one command (after `ASKING`) to the node
///   importing the slot. Posts of one name keep their order through a move,
///   readers resume at their position on the new node, and a durable
///   identity's consumer group moves with its stream, so its
///   acknowledgements follow it. A reader waiting on a stream whose key
///   moved while its slot is still migrating learns of it when its read
///   ends (at most ``RedisStreamsConfiguration/blockTimeout``); once the
///   slot is moved, the server redirects it. Redirections are counted in
///   ``RedisStreamsStatistics/redirections``.
public final class RedisStreamsTransport: NotificationTransport {
    /// The server and how to log in.
    public let options: RedisConnectionOptions
    /// The durable identity (a consumer group per name), if any.
    public let identity: String?
    /// Where reading a name starts without a consumer group to resume:
    /// always for a plain observer, on a durable identity's first run.
    public let firstRead: RedisStreamStart
    /// Limits and policies.
    public let configuration: RedisStreamsConfiguration

    let counters: RedisStreamsCounters
    let router: ClusterRouter
    private let state = Locked(RedisTransportState())
    private let loop: EventLoop
    // A durable identity's acknowledgements; nil for a plain observer.
    private let acknowledgements: AcknowledgementSender?

    /// Checks the URL, the identity and the configuration; connects only when opened.
    ///
    /// - Parameters:
    ///   - url: `redis://[user:password@]host[:port][/db]` or `unix:///path`
    ///     (see ``RedisConnectionOptions``).
    ///   - identity: A durable identity such as `"billing"`, following the
    ///     rules of endpoint labels; `nil` for a plain observer.
    ///   - firstRead: Where reading starts for a plain observer, and on a
    ///     durable identity's first run: the stream's end (the default), its
    ///     beginning, or its newest entries.
    ///   - configuration: Limits and policies.
    /// - Throws: ``TypedNotifications/TypedNotificationError/Code/invalidConfiguration`` for a bad
    ///   URL (or a `rediss://` one), ``TypedNotifications/TypedNotificationError/Code/invalidEndpoint``
    ///   for a bad identity.
    public convenience init(
        url: String,
        identity: String? = nil,
        firstRead: RedisStreamStart = .end,
        configuration: RedisStreamsConfiguration = RedisStreamsConfiguration()
    ) throws(TypedNotificationError) {
        try self.init(
            options: try RedisConnectionOptions(url: url), identity: identity, firstRead: firstRead,
            configuration: configuration)
    }

    /// Like ``init(url:identity:firstRead:configuration:)``, with options already made.
    public init(
        options: RedisConnectionOptions,
        identity: String? = nil,
        firstRead: RedisStreamStart = .end,
        configuration: RedisStreamsConfiguration = RedisStreamsConfiguration()
    ) throws(TypedNotificationError) {
        if let identity, let problem = NotificationName.problem(with: identity.utf8, maximumLength: 64) {
            throw TypedNotificationError(
                code: .invalidEndpoint, message: "identity \(TypedNotificationError.quote(identity)) \(problem)")
        }
        if let problem = NotificationName.problem(with: configuration.keyPrefix.utf8, maximumLength: 64) {
            throw TypedNotificationError(
                code: .invalidConfiguration,
                message: "key prefix \(TypedNotificationError.quote(configuration.keyPrefix)) \(problem)")
        }
        guard (configuration.maximumLength ?? 1) >= 1, (1...100_000).contains(configuration.readBatchSize),
            configuration.blockTimeout >= .milliseconds(10), (configuration.maximumAge ?? .seconds(1)) >= .seconds(1)
        else {
            throw TypedNotificationError(
                code: .invalidConfiguration,
                message: "Redis streams configuration out of range: maximumLength ≥ 1, readBatchSize 1-100000, "
                    + "blockTimeout ≥ 10 ms, maximumAge ≥ 1 s")
        }
        self.options = options
        self.identity = identity
        self.firstRead = firstRead
        self.configuration = configuration
        let loop: EventLoop
        do throws(Errno) {
            loop = try EventLoop(name: "TypedNotifications.RedisStreamsTransport")
        } catch {
            throw TypedNotificationError(
                code: .transportFailure, message: "could not start the Redis transport's event loop", cause: error)
        }
        let counters = RedisStreamsCounters()
        let router = ClusterRouter(seed: options)
        self.loop = loop
        self.counters = counters
        self.router = router
        acknowledgements = identity.map {
            AcknowledgementSender(identity: $0, router: router, counters: counters, loop: loop)
        }
    }

    deinit {
        close()
    }

    /// Counters since the transport was created.
    public var statistics: RedisStreamsStatistics { counters.snapshot }

    /// Redis streams carry envelopes.
    public var payloadForm: TransportPayloadForm { .encoded }

    /// `true`: the transport counts the entries trimmed before a reader read
    /// them (of any sender) from the stream's counters and reports them.
    public var reportsEveryMissedNotification: Bool { true }

    /// The event loop that reads the streams; it also runs the hub's executor.
    public var deliveryExecutor: (any TaskExecutor & SerialExecutor)? { loop }

    /// The stream key of `name`: `<prefix>:{<name>}`.
    public func key(for name: NotificationName) -> String {
        "\(configuration.keyPrefix):{\(name.rawValue)}"
    }

    /// Connects, so an unreachable server or a wrong password fails here, and
    /// starts the event loop.
    ///
    /// - Throws: ``TypedNotifications/TypedNotificationError/Code/unreachable`` or
    ///   ``TypedNotifications/TypedNotificationError/Code/authenticationFailed``.
    public func open(as sender: NotificationSender, receiver: TransportReceiver) throws(TypedNotificationError) {
        let connection = try RedisConnection.connect(options, clientName: "tn-\(sender.endpoint)")
        // A cluster answers with its slot map; a standalone server with an error.
        try router.learn(slotsOf: connection)
        let opened = state.withLock { state -> Bool in
            guard case .created = state.phase else { return false }
            state.phase = .open
            state.receiver = receiver
            state.idle[options, default: []].append(connection)
            return true
        }
        guard opened else {
            throw TypedNotificationError(code: .closed, message: "this Redis transport was already opened")
        }
        loop.start()
        loop.execute { [weak self] in self?.watchReaders() }
    }

    // MARK: Posting

    /// Adds the envelope to its name's stream and returns once Redis acknowledged it.
    ///
    /// - Throws: ``TypedNotifications/TypedNotificationError/Code/unreachable`` when the server
    ///   cannot be reached or did not answer (the post may or may not have
    ///   been stored then: the message says), or
    ///   ``TypedNotifications/TypedNotificationError/Code/transportFailure`` for an error reply.
    public func send(_ message: TransportMessage) throws(TypedNotificationError) {
        if let failure = send(batch: [message]).failure { throw failure }
    }

    /// Adds the envelopes to their streams in one pipelined write and waits
    /// for every acknowledgement.
    ///
    /// When the connection breaks on the way, ``TransportBatchResult/sent``
    /// counts the acknowledged posts; those after may or may not have been
    /// stored. A server error reply stops the count at that post, although
    /// Redis went on with the pipelined posts after it.
    public func send(batch messages: [TransportMessage]) -> TransportBatchResult {
        var result = TransportBatchResult()
        guard !messages.isEmpty else { return result }
        var commands: [RoutedCommand] = []
        commands.reserveCapacity(messages.count + 1)
        let now = SystemClock.monotonicNanoseconds()
        var trims: [NotificationName] = []
        for message in messages {
            guard case .encoded(let encoded) = message.payload else {
                result.failure = TypedNotificationError(
                    code: .transportFailure, message: "the Redis transport carries envelopes only")
                break
            }
            let key = Array(key(for: message.name).utf8)
            var command: [[UInt8]] = [Array("XADD".utf8), key]
            if let maximumLength = configuration.maximumLength {
                command += [Array("MAXLEN".utf8), [UInt8(ascii: "~")], Array(String(maximumLength).utf8)]
            }
            command += [[UInt8(ascii: "*")], [UInt8(ascii: "e")], Array(encoded.envelope)]
            commands.append(RoutedCommand(key: key, command))
            if configuration.maximumAge != nil, !trims.contains(message.name) { trims.append(message.name) }
        }
        let posts = commands.count
        if let maximumAge = configuration.maximumAge {
            let due = state.withLock { state in
                trims.filter { name in
                    guard now >= state.nextTrim[name, default: 0] else { return false }
                    state.nextTrim[name] = now &+ 1_000_000_000
                    return true
                }
            }
            let cutoff = SystemClock.wallClockNanoseconds() / 1_000_000 - Int64(maximumAge.clampedMilliseconds)
            for name in due where cutoff > 0 {
                let key = key(for: name)
                commands.append(RoutedCommand(key: key, "XTRIM", key, "MINID", "~", "\(cutoff)-0"))
            }
        }
        guard posts > 0 else { return result }
        let routed = run(commands)
        for reply in routed.replies.prefix(posts) {
            if case .error(let text) = reply {
                result.failure = TypedNotificationError(
                    code: text.hasPrefix("NOPERM") ? .authenticationFailed : .transportFailure,
                    message: "Redis refused a post: \(text)")
                break
            }
            result.sent += 1
        }
        if result.failure == nil, result.sent < posts, let failure = routed.failure {
            let unsure = posts - result.sent
            result.failure =
                routed.mayHaveRun
                ? TypedNotificationError(
                    code: failure.code,
                    message:
                        "\(failure.message); \(unsure) post\(unsure == 1 ? "" : "s") may or may not have been stored",
                    cause: failure)
                : failure
        }
        counters.posted.add(result.sent, ordering: .relaxed)
        counters.failedPosts.add(posts - result.sent, ordering: .relaxed)
        return result
    }

    /// Runs commands on the nodes of their keys (the one server, unless it
    /// is a cluster) on pooled connections, following redirections.
    func run(_ commands: [RoutedCommand]) -> RoutedReplies {
        let routed = router.run(commands, connection: takeConnection(to:), release: putBack(_:))
        if routed.redirections > 0 { counters.redirections.add(routed.redirections, ordering: .relaxed) }
        return routed
    }

    /// Runs one command on the node of its key and returns its reply (an
    /// error reply is returned, not thrown).
    func call(_ command: RoutedCommand) throws(TypedNotificationError) -> RESPValue {
        let routed = run([command])
        guard let reply = routed.replies.first else {
            throw routed.failure
                ?? TypedNotificationError(code: .transportFailure, message: "a Redis command was left without a reply")
        }
        return reply
    }

    /// An idle connection to `node`, or a new one unless a recent attempt failed.
    private func takeConnection(to node: RedisConnectionOptions) throws(TypedNotificationError) -> RedisConnection {
        let now = SystemClock.monotonicNanoseconds()
        let taken = try state.withLock { state throws(TypedNotificationError) -> RedisConnection? in
            guard case .open = state.phase else {
                throw TypedNotificationError(code: .closed, message: "the Redis transport is not open")
            }
            if let connection = state.idle[node]?.popLast() { return connection }
            if let backoff = state.connectBackoff[node], let retry = backoff.retryAt, now < retry {
                throw TypedNotificationError(
                    code: .unreachable,
                    message: "Redis at \(node.redactedDescription) is unreachable; trying again in "
                        + "\((retry - now) / 1_000_000 + 1) ms (\(backoff.lastError))")
            }
            return nil
        }
        if let taken { return taken }
        do throws(TypedNotificationError) {
            let connection = try RedisConnection.connect(node, clientName: "tn-poster")
            state.withLock { $0.connectBackoff[node] = nil }
            counters.reconnects.add(1, ordering: .relaxed)
            return connection
        } catch {
            state.withLock { $0.connectBackoff[node, default: ConnectBackoff()].failed(at: now, error.message) }
            throw error
        }
    }

    private func putBack(_ connection: RedisConnection) {
        guard !connection.isBroken else { return }
        state.withLock { state in
            guard case .open = state.phase, state.idle[connection.options, default: []].count < 4 else { return }
            state.idle[connection.options, default: []].append(connection)
        }
    }

    // MARK: Receiving

    /// Records where reading `name` starts (the stream's last ID, or this
    /// identity's consumer group), connects a reading connection for it, and
    /// hands it to the event loop. Every entry added after this returns is read.
    ///
    /// - Throws: ``TypedNotifications/TypedNotificationError/Code/unreachable`` when the server
    ///   cannot be reached; nothing is subscribed then.
    public func subscribe(to name: NotificationName) throws(TypedNotificationError) {
        let key = key(for: name)
        let start: StreamEntryID
        let accounted: Int?
        if let identity {
            start = .zero
            accounted = try createGroup(identity, key: key)
        } else {
            (start, accounted) = try startingPoint(of: key)
        }
        let connection = try RedisConnection.connect(
            router.options(forKey: key.utf8), clientName: "tn-reader", identifying: identity != nil)
        let reader = StreamReader(
            name: name, key: Array(key.utf8), connection: connection,
            position: identity == nil ? .after(start) : .pendingAfter(.zero), accounted: accounted)
        let (receiver, replaced) = try state.withLock {
            state throws(TypedNotificationError) -> (TransportReceiver, StreamReader?) in
            guard case .open = state.phase, let receiver = state.receiver else {
                throw TypedNotificationError(code: .closed, message: "subscribe on a Redis transport that is not open")
            }
            let replaced = state.readers.updateValue(reader, forKey: name)
            return (receiver, replaced)
        }
        if let replaced { endReads(of: replaced) }
        loop.execute { [weak self] in
            replaced?.cancel(on: self?.loop)
            self?.startReading(reader, receiver: receiver)
        }
    }

    /// Stops reading `name`. A durable identity's entries read but not yet
    /// handled stay pending in its group and come again, marked as
    /// redeliveries, when it next subscribes. Its reads end at the server
    /// before this returns (a server that does not answer is waited for at
    /// most the connect and command timeouts): an entry posted after that
    /// is left for the identity's next subscription, as a first delivery.
    public func unsubscribe(from name: NotificationName) {
        let reader = state.withLock { $0.readers.removeValue(forKey: name) }
        guard let reader else { return }
        endReads(of: reader)
        loop.execute { [weak self] in reader.cancel(on: self?.loop) }
    }

    /// Ends a durable reader's reads at the server before this returns, on
    /// a pooled connection: see ``endReads(of:identity:borrowing:giveBack:)``.
    private func endReads(of reader: StreamReader) {
        Self.endReads(
            of: reader, identity: identity,
            borrowing: { (try? takeConnection(to: $0)) ?? (try? RedisConnection.connect($0)) },
            giveBack: putBack(_:))
    }

    /// Marks a durable reader as stopping and ends its connection at the
    /// server (`CLIENT KILL ID`, on another connection to its node), from
    /// the calling thread, whether or not the loop got to the reader yet.
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
    private static func endReads(
        of reader: StreamReader, identity: String?,
        borrowing borrow: (RedisConnectionOptions) -> RedisConnection?, giveBack: (RedisConnection) -> Void
    ) -> RedisConnectionOptions? {
        guard identity != nil, let (node, clientID) = reader.markStopping() else { return nil }
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

    /// Where reading starts by ``firstRead``, from one snapshot of the
    /// stream: the ID reading starts after, and how many entries were ever
    /// added up to it (`nil` from a server before Redis 7). Entries trimmed
    /// up to there are not missed: nobody was reading them.
    private func startingPoint(of key: String) throws(TypedNotificationError) -> (StreamEntryID, Int?) {
        var newest: Int?
        if case .newest(let count) = firstRead.kind { newest = count }
        let (snapshot, ids) = try snapshot(of: key, newest: newest)
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
    private func snapshot(
        of key: String, newest: Int?
    ) throws(TypedNotificationError) -> (StreamSnapshot?, [StreamEntryID]) {
        var commands = [RoutedCommand(key: key, "XINFO", "STREAM", key)]
        if let newest { commands.append(RoutedCommand(key: key, "XREVRANGE", key, "+", "-", "COUNT", String(newest))) }
        let routed = run(commands)
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
    private func createGroup(_ group: String, key: String) throws(TypedNotificationError) -> Int? {
        let (start, accounted) = try startingPoint(of: key)
        var create = RoutedCommand(key: key, "XGROUP", "CREATE", key, group, start.description, "MKSTREAM")
        if let accounted { create.arguments += [Array("ENTRIESREAD".utf8), Array(String(accounted).utf8)] }
        let routed = run([create, RoutedCommand(key: key, "XINFO", "GROUPS", key)])
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

    /// Whether an error reply to a read passes once the cluster settles: a
    /// slot being resharded or a failover (`TRYAGAIN`, `CLUSTERDOWN`), a
    /// server loading its data (`LOADING`), a stream moved away while a read
    /// waited on it (`UNBLOCKED`). The reader connects again with backoff.
    static func isTransient(_ text: String) -> Bool {
        ["TRYAGAIN", "CLUSTERDOWN", "LOADING", "UNBLOCKED", "MASTERDOWN"].contains { text.hasPrefix($0) }
    }

    static func failure(_ text: String, doing what: String) -> TypedNotificationError {
        TypedNotificationError(
            code: text.hasPrefix("NOPERM") || text.hasPrefix("NOAUTH") ? .authenticationFailed : .transportFailure,
            message: "Redis refused to \(what): \(text)")
    }

    // MARK: The event loop

    /// Watches the reader's connection and asks for its first entries. On the loop.
    private func startReading(_ reader: StreamReader, receiver: TransportReceiver) {
        guard !reader.isCancelled else { return }
        reader.receiver = receiver
        guard let descriptor = reader.connection?.descriptor else { return }
        let registered = loop.register(descriptor) { [weak self, weak reader] in
            guard let self, let reader else { return }
            readReplies(of: reader)
        }
        if case .failure = registered {
            reconnect(reader)
            return
        }
        requestEntries(of: reader)
    }

    /// Sends the reader's next blocking read, unless its observers are backed up.
    private func requestEntries(of reader: StreamReader) {
        guard !reader.isCancelled, !reader.awaitingReply, let connection = reader.connection,
            let receiver = reader.receiver
        else { return }
        if receiver.isBackedUp(reader.name) {
            loop.schedule(after: 5_000_000) { [weak self, weak reader] in
                guard let self, let reader else { return }
                requestEntries(of: reader)
            }
            return
        }
        let block = String(configuration.blockTimeout.clampedMilliseconds)
        let count = String(configuration.readBatchSize)
        func send(_ command: [[UInt8]], _ reply: StreamReader.Reply) {
            enqueue(command, expecting: reply, on: connection, of: reader)
        }
        if case .pendingAfter = reader.position {
        } else {
            // The stream's counters just before the read, which Redis runs
            // right after, with nothing between: how many entries were
            // trimmed before this reader got to them.
            send([Array("XINFO".utf8), Array("STREAM".utf8), reader.key], .streamInfo)
        }
        enqueueGroupCounterRaise(of: reader, on: connection)
        switch reader.position {
        case .after(let id):
            send(
                ["XREAD", "COUNT", count, "BLOCK", block, "STREAMS"].map { Array($0.utf8) }
                    + [reader.key, Array(id.description.utf8)], .read)
        case .pendingAfter(let id):
            send(
                ["XREADGROUP", "GROUP", identity ?? "", identity ?? "", "COUNT", count, "STREAMS"].map {
                    Array($0.utf8)
                } + [reader.key, Array(id.description.utf8)], .read)
        case .new:
            send(
                ["XREADGROUP", "GROUP", identity ?? "", identity ?? "", "COUNT", count, "BLOCK", block, "STREAMS"].map {
                    Array($0.utf8)
                } + [reader.key, [UInt8(ascii: ">")]], .read)
        }
        do throws(TypedNotificationError) {
            try connection.flush()
        } catch {
            reconnect(reader)
            return
        }
        reader.awaitingReply = true
        reader.requestedAt = SystemClock.monotonicNanoseconds()
    }

    /// Queues a command of the reader's on its connection, and what its
    /// reply answers. A command sent to a node importing the name's slot
    /// (after an `ASK`) says it was asked there.
    private func enqueue(
        _ command: [[UInt8]], expecting reply: StreamReader.Reply, on connection: RedisConnection,
        of reader: StreamReader
    ) {
        if reader.askedNode != nil {
            connection.enqueue([Array("ASKING".utf8)])
            reader.expected.append(.asking)
        }
        connection.enqueue(command)
        reader.expected.append(reply)
    }

    /// Queues the raise of a durable group's entries-read past the entries
    /// this reader counted as trimmed, if one is due, so a later run is not
    /// told of them again.
    private func enqueueGroupCounterRaise(of reader: StreamReader, on connection: RedisConnection) {
        guard let identity, reader.groupCounterBehind, let position = reader.groupPosition,
            let accounted = reader.accounted
        else { return }
        enqueue(
            ["XGROUP", "SETID"].map { Array($0.utf8) } + [reader.key]
                + [identity, position.description, "ENTRIESREAD", String(accounted)].map { Array($0.utf8) },
            expecting: .counterRaise, on: connection, of: reader)
        reader.groupCounterBehind = false
    }

    /// Raises the group's counter now, if due, and waits for Redis to take
    /// it, before the entries whose read counted the trim are handed out:
    /// once an observer was told of a loss, a later run is not told again,
    /// even when the hub closes right after (not with the next read, which
    /// a closed hub never sends). On the acknowledgements' connection, not
    /// the reader's, which `close()` may end at the server at any moment;
    /// no read is in flight meanwhile, so the group's position it sets is
    /// where the group is. When it fails, the raise goes with the next read.
    private func raiseGroupCounter(of reader: StreamReader) {
        guard reader.groupCounterBehind, let identity, let acknowledgements, let position = reader.groupPosition,
            let accounted = reader.accounted
        else { return }
        let raise = RoutedCommand(
            key: reader.key,
            ["XGROUP", "SETID"].map { Array($0.utf8) } + [reader.key]
                + [identity, position.description, "ENTRIESREAD", String(accounted)].map { Array($0.utf8) })
        let routed = acknowledgements.runNow([raise])
        if routed.failure == nil, case .simpleString? = routed.replies.first { reader.groupCounterBehind = false }
    }

    /// How long a read may go unanswered before its connection counts as broken.
    private var patience: UInt64 {
        configuration.blockTimeout.clampedNanoseconds &+ options.commandTimeout.clampedNanoseconds
    }

    /// Every quarter of the patience, on the loop: a reader whose read went
    /// unanswered that long has lost its server, or the path to it, and
    /// connects again. One timer for all readers, not one per read: reads
    /// come thousands of times a second, and the loop scans its timers.
    private func watchReaders() {
        let readers = state.withLock { state -> [StreamReader]? in
            guard case .open = state.phase else { return nil }
            return Array(state.readers.values)
        }
        guard let readers else { return }
        let now = SystemClock.monotonicNanoseconds()
        for reader in readers where reader.awaitingReply && now &- reader.requestedAt > patience {
            reconnect(reader)
        }
        loop.schedule(after: max(10_000_000, patience / 4)) { [weak self] in self?.watchReaders() }
    }

    /// Reads what arrived on the reader's connection and delivers its entries.
    private func readReplies(of reader: StreamReader) {
        guard !reader.isCancelled, let connection = reader.connection else { return }
        let replies: [RESPValue]
        do throws(TypedNotificationError) {
            replies = try connection.readAvailable()
        } catch {
            reconnect(reader)
            return
        }
        for reply in replies {
            switch reader.expected.isEmpty ? .read : reader.expected.removeFirst() {
            case .asking, .counterRaise:
                continue
            case .streamInfo:
                reader.removedBeforeRead = StreamSnapshot(reply)?.removed
                continue
            case .read:
                break
            }
            reader.awaitingReply = false
            if case .error(let text) = reply {
                if text.hasPrefix("NOGROUP") {
                    // The group was deleted (or the server lost it): make it
                    // again where this reader was, then go on.
                    reader.position = .pendingAfter(.zero)
                    reconnect(reader)
                    return
                }
                if let redirection = Redirection(text, fallbackHost: connection.options.host) {
                    // The name's slot moved (`MOVED`: read from its new
                    // node) or is moving (`ASK`: read from the importing
                    // node until it owns the slot), from where reading was.
                    router.learn(redirection)
                    reader.askedNode = redirection.isPermanent ? nil : redirection.node
                    counters.redirections.add(1, ordering: .relaxed)
                    reconnect(reader, redirected: true)
                    return
                }
                if Self.isTransient(text) {
                    reconnect(reader)
                    return
                }
                reader.receiver?.fail(Self.failure(text, doing: "read \(String(decoding: reader.key, as: UTF8.self))"))
                reader.cancel(on: loop)
                return
            }
            reader.backoff.reset()
            deliver(reply, of: reader)
        }
        // The next read goes out after the jobs the deliveries queued on this
        // loop (handlers on the hub's executor), so its system call is not
        // between an entry's arrival and its handler.
        loop.execute { [weak self, weak reader] in
            guard let self, let reader else { return }
            requestEntries(of: reader)
        }
    }

    /// Passes the entries of one read reply to the center.
    private func deliver(_ reply: RESPValue, of reader: StreamReader) {
        guard let receiver = reader.receiver else { return }
        let entries = Self.entries(in: reply)
        if case .pendingAfter = reader.position {
            // Every pending entry was delivered again: now the new ones.
            if entries.isEmpty { reader.position = .new }
        } else {
            countTrimmed(before: entries.count, of: reader)
            if case .new = reader.position, let last = entries.last?.0 { reader.groupPosition = last }
            raiseGroupCounter(of: reader)
        }
        let redelivering: Bool
        if case .pendingAfter = reader.position { redelivering = true } else { redelivering = false }
        for (id, fields) in entries {
            switch reader.position {
            case .after: reader.position = .after(id)
            case .pendingAfter: reader.position = .pendingAfter(id)
            case .new: break
            }
            reader.lastDelivered = max(reader.lastDelivered, id)
            guard var message = decode(fields, of: reader) else {
                counters.corruptEntriesSkipped.add(1, ordering: .relaxed)
                acknowledgements?.acknowledge(id, key: reader.key)
                continue
            }
            message.isRedelivery = redelivering
            if let acknowledgements {
                let key = reader.key
                // Not acknowledged when every observer holding it ended
                // without handling it: it stays pending and comes again.
                message.receipt = DeliveryReceipt.unlessAbandoned { acknowledgements.acknowledge(id, key: key) }
            }
            counters.delivered.add(1, ordering: .relaxed)
            receiver.receive(message)
        }
    }

    /// Reports the entries trimmed after the reader's position before it
    /// read them, as missed, and moves its count past them and the `read`
    /// entries of this reply (which start at the first entry left).
    private func countTrimmed(before read: Int, of reader: StreamReader) {
        let removed = reader.removedBeforeRead
        reader.removedBeforeRead = nil
        guard let removed else {
            // No counters with this read (an error reply to XINFO): count on.
            if let accounted = reader.accounted { reader.accounted = accounted + read }
            return
        }
        let accounted = reader.accounted ?? removed
        let trimmed = removed - accounted
        reader.accounted = max(accounted, removed) + read
        guard trimmed > 0 else { return }
        counters.trimmedUnread.add(trimmed, ordering: .relaxed)
        reader.receiver?.missed(MissedNotifications(count: trimmed, name: reader.name))
        if identity != nil { reader.groupCounterBehind = true }
    }

    /// The envelope in an entry's fields, if it is a valid one of the reader's name.
    private func decode(_ fields: [RESPValue]?, of reader: StreamReader) -> TransportMessage? {
        guard let fields, fields.count == 2, case .bulkString(let field?) = fields[0], field == [UInt8(ascii: "e")],
            case .bulkString(let value?) = fields[1]
        else { return nil }
        guard let message = try? reader.decoder.decode(value), message.name == reader.name else { return nil }
        return message
    }

    /// The `(id, fields)` of each entry of a read reply; fields are `nil` for
    /// a pending entry that was deleted from the stream.
    static func entries(in reply: RESPValue) -> [(StreamEntryID, [RESPValue]?)] {
        guard case .array(let streams?) = reply else { return [] }
        var result: [(StreamEntryID, [RESPValue]?)] = []
        for stream in streams {
            guard case .array(let pair?) = stream, pair.count == 2, case .array(let entries?) = pair[1] else {
                continue
            }
            for entry in entries {
                guard case .array(let parts?) = entry, parts.count == 2, case .bulkString(let idBytes?) = parts[0],
                    let id = StreamEntryID(idBytes)
                else { continue }
                if case .array(let fields) = parts[1] {
                    result.append((id, fields))
                } else {
                    result.append((id, nil))
                }
            }
        }
        return result
    }

    /// Drops the reader's connection and makes a new one after a backoff
    /// (at once after a redirection), on the loop.
    private func reconnect(_ reader: StreamReader, redirected: Bool = false) {
        reader.dropConnection(on: loop)
        reader.awaitingReply = false
        guard !reader.isCancelled else { return }
        if case .new = reader.position {
            // Read again what this process was handed but has not acknowledged.
            reader.position = .pendingAfter(reader.lastDelivered)
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
                    if let counted = try createGroup(identity, key: key) {
                        reader.accounted = max(reader.accounted ?? counted, counted)
                    }
                }
                let node = reader.askedNode.map(router.options(for:)) ?? router.options(forKey: reader.key)
                let connection = try RedisConnection.connect(
                    node, clientName: "tn-reader", identifying: identity != nil)
                // Not read from when the reader is being stopped.
                guard reader.adopt(connection) else { return }
                reader.connection = connection
                counters.reconnects.add(1, ordering: .relaxed)
                startReading(reader, receiver: receiver)
            } catch {
                reconnect(reader)
            }
        }
    }

    /// Stops reading, sends the acknowledgements still queued, and closes
    /// every connection. Waits for the event loop, at most 2 seconds, after
    /// a durable identity's reads are ended at the server: a node that does
    /// not answer that is waited for once, at most its connect and command
    /// timeouts. Idempotent.
    ///
    /// A durable identity's deliveries handled after this returned (a loop
    /// that was still holding one) are not acknowledged: they stay pending in
    /// its group and come again, marked as redeliveries, on its next run.
    /// Its reads end at the server before this returns, so an entry posted
    /// after it returned goes to the next run as a first delivery; one
    /// posted while it closes may be read and left pending, and come again
    /// marked.
    public func close() {
        let (wasOpen, readers, idle) = state.withLock {
            state -> (Bool, [StreamReader], [RedisConnectionOptions: [RedisConnection]]) in
            defer {
                state.phase = .closed
                state.readers = [:]
                state.idle = [:]
            }
            if case .open = state.phase { return (true, Array(state.readers.values), state.idle) }
            return (false, [], [:])
        }
        guard wasOpen else {
            loop.stop()
            return
        }
        // Durable readers' connections are ended at the server first, on the
        // idle connections, which close after.
        var spare = idle
        var silent: Set<RedisConnectionOptions> = []
        for reader in readers {
            let unanswered = Self.endReads(
                of: reader, identity: identity,
                borrowing: { node in
                    silent.contains(node) ? nil : spare[node]?.popLast() ?? (try? RedisConnection.connect(node))
                },
                giveBack: { spare[$0.options, default: []].append($0) })
            if let unanswered { silent.insert(unanswered) }
        }
        // One deadline for the last acknowledgements and the loop's end.
        let deadline = SystemClock.monotonicNanoseconds() &+ 2_000_000_000
        // The last acknowledgements go out before the loop stops: once
        // stopped, its queued jobs run on another thread after `join`
        // returned, too late for a process that exits after `close()`. On
        // the loop, after the delivery in progress there: the center lets go
        // of a receipt once it handed the message out.
        let (loop, acknowledgements) = (loop, acknowledgements)
        let finalFlush: @Sendable () -> Void = {
            for reader in readers { reader.cancel(on: loop) }
            acknowledgements?.finish()
        }
        if loop.isCurrent {
            finalFlush()
        } else {
            let flushed = OneShotEvent()
            loop.execute {
                finalFlush()
                flushed.signal()
            }
            _ = flushed.wait(nanoseconds: Self.nanoseconds(until: deadline))
        }
        loop.stop()
        _ = loop.join(nanoseconds: Self.nanoseconds(until: deadline))
    }

    /// What is left of the time until `deadline`, on the monotonic clock.
    private static func nanoseconds(until deadline: UInt64) -> UInt64 {
        let now = SystemClock.monotonicNanoseconds()
        return deadline > now ? deadline - now : 0
    }

    /// The newest valid envelope in `name`'s stream, without observing it.
    package func latestMessage(of name: NotificationName) throws(TypedNotificationError) -> TransportMessage? {
        let key = key(for: name)
        let reply = try call(RoutedCommand(key: key, "XREVRANGE", key, "+", "-", "COUNT", "16"))
        if case .error(let text) = reply { throw Self.failure(text, doing: "read the newest entry of \(key)") }
        var decoder = EnvelopeDecoder()
        guard case .array(let entries?) = reply else { return nil }
        for entry in entries {
            guard case .array(let parts?) = entry, parts.count == 2, case .array(let fields?) = parts[1],
                fields.count == 2, case .bulkString(let value?) = fields[1],
                let message = try? decoder.decode(value), message.name == name
            else { continue }
            return message
        }
        return nil
    }
}

extension NotificationHub where Transport == RedisStreamsTransport {
    /// The newest notification of type `N` in its stream, with its metadata,
    /// without observing; `nil` if there is none or it does not decode as `N`.
    ///
    /// - Throws: ``TypedNotifications/TypedNotificationError/Code/unreachable`` when the server cannot be reached.
    public func latest<N: TypedNotification>(of type: N.Type) throws(TypedNotificationError)
        -> DeliveredNotification<N>?
    {
        try latest(of: type, named: try N.name.validated(declaredBy: N.self))
    }

    /// The newest value posted under `name`, chosen at run time, decoded as
    /// `type`, with its metadata, without observing; `nil` if there is none
    /// or it does not decode as `type`.
    public func latest<Payload: DarwinPayload>(of type: Payload.Type, named name: NotificationName)
        throws(TypedNotificationError) -> DeliveredNotification<Payload>?
    {
        guard let message = try transport.latestMessage(of: try name.validated()) else { return nil }
        return DeliveredNotification(decoding: message, missed: 0)
    }
}

/// The transport's shared state, under its lock.
struct RedisTransportState {
    enum Phase { case created, open, closed }
    var phase = Phase.created
    var receiver: TransportReceiver?
    // Per node (the one server, unless it is a cluster).
    var idle: [RedisConnectionOptions: [RedisConnection]] = [:]
    var readers: [NotificationName: StreamReader] = [:]
    var connectBackoff: [RedisConnectionOptions: ConnectBackoff] = [:]
    var nextTrim: [NotificationName: UInt64] = [:]
}

/// When to try connecting again after failures: 50 ms, doubling to 2 s.
struct ConnectBackoff {
    private(set) var failures = 0
    private(set) var retryAt: UInt64?
    private(set) var lastError = ""

    mutating func failed(at now: UInt64, _ error: String) {
        failures += 1
        lastError = error
        retryAt = now &+ nextDelay(after: failures)
    }

    mutating func succeeded() {
        failures = 0
        retryAt = nil
    }

    func nextDelay(after failures: Int) -> UInt64 {
        let milliseconds = min(2_000, 50 << min(failures - 1, 6))
        return UInt64(milliseconds) * 1_000_000
    }

    /// For a reader: the delay before its next attempt, counting this one.
    mutating func nextDelay() -> UInt64 {
        failures += 1
        return nextDelay(after: failures)
    }

    mutating func reset() {
        failures = 0
    }
}
