import Dispatch
import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

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
///   a standalone server is unreachable, a post fails at once with
///   ``TypedNotifications/TypedNotificationError/Code/unreachable``: nothing is buffered, the
///   caller decides. After a failed connection attempt, further posts fail
///   without trying for a backoff (50 ms, doubling to 2 s); the first post
///   after it tries again. In a cluster, a post whose slot has no reachable
///   master waits up to ``RedisStreamsConfiguration/failoverWait`` for one
///   (see below).
/// - Registration is immediate: `subscribe` records the stream's last ID
///   before it returns, and the reader reads every entry after it.
/// - Namespaces: before its first post of a name, a poster announces it
///   to every namespace that contains it, in a set `tn:names:{NS}` and a
///   stream `tn:new:{NS}` per namespace (one entry per name, never per
///   post). A namespace observer reads every name announced so far, and
///   each name announced later from its first entry; a durable identity
///   reads the announcements through its consumer group, so names that
///   appeared while it was away are read on its next run. A namespace's
///   names that go quiet (a read finds nothing) give up their connection
///   and wait together, 1,000 to a connection, for a post that wakes them;
///   at most 256 read at once. The first post to a quiet name costs one
///   round trip more. On a cluster each name keeps its own reader and
///   connection, as when observed by name.
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
/// - Each name subscribed by name has its own reading connection, read by
///   one event-loop thread that also runs the hub's executor. A broken
///   connection is made again with backoff, and reading resumes where it
///   stopped. A read unanswered for the block timeout plus the command
///   timeout counts as a broken connection; one timer, at the earliest
///   such deadline, which moves on with each read, catches it, so it wakes
///   nobody while the server answers. An observer whose buffer is backed
///   up is not read for: the stream keeps its entries.
/// - Retention: `RedisStreamsConfiguration.maximumLength` trims on every
///   post, ``RedisStreamsConfiguration/maximumAge`` at most once a second
///   per name. A reader that fell behind retention is told exactly how many
///   entries were trimmed before it read them, of every sender, in the next
///   delivery's ``TypedNotifications/NotificationDelivery/missed``: a read
///   goes out with an `XINFO STREAM`, which Redis runs just before it, and
///   the stream's counters (entries ever added, entries left) against the
///   reader's own count tell how many it never got. A read that follows
///   one that found nothing goes alone, and should it find entries, their
///   counters are asked for just after it, one round trip before its
///   entries are handed out, and count the same. A reader whose read came
///   back empty goes quiet: on a standalone server it gives up its
///   connection, and the transport's quiet names wait together in one
///   `XREAD` over up to 1,000 keys (on a cluster each keeps its own). So
///   an idle transport sends one command per connection each
///   ``RedisStreamsConfiguration/blockTimeout`` (10 s by
///   default), wakes only for its answer, and sends none that fails: a
///   connection is used once the server has loaded its data, a
///   new connection asks `EXISTS` before it asks a stream's counters
///   (`XINFO` fails on a key that is not there: a server restarted without
///   persistence lost it), and a durable identity's group is made only
///   where `XINFO GROUPS` does not list it. A durable identity's
///   count is its group's entries-read, raised past what was reported, so a
///   later run does not report it again. Entries trimmed before a reader
///   started (before its registration, or before `firstRead`) are not
///   missed. Needs Redis 7 (or Valkey 7.2) or later; two processes sharing
///   one durable identity make the count inexact, and so do `XDEL` by hand
///   of entries no one has read while older ones remain, and `DEL` by hand
///   of a stream a plain reader reads (a stream made again under the key
///   that has reached the old one's count of entries ever added is taken
///   for it).
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
/// - Failover: a master that dies sends no `MOVED`. Whoever cannot reach a
///   slot's node asks the cluster for its slot map again, the URL's node
///   first, then every node, master or replica, a slot map named, so the
///   replica the cluster promotes is found even when the URL names the node
///   that died. Readers keep trying, with backoff to 2 s, and resume where
///   they stood (a plain reader after its last entry ID, a durable identity
///   through its group); while they cannot, ``readerErrors`` says why and
///   ``RedisStreamsStatistics/failedReconnects`` counts the tries. A post
///   waits for the election up to ``RedisStreamsConfiguration/failoverWait``.
public final class RedisStreamsTransport: KeepsLatest {
    /// The server and how to log in.
    package let options: RedisConnectionOptions
    /// The durable identity (a consumer group per name), if any.
    package let identity: String?
    /// Where reading a name starts without a consumer group to resume:
    /// always for a plain observer, on a durable identity's first run.
    package let firstRead: ReadStart
    /// Limits and policies.
    package let configuration: RedisStreamsConfiguration

    // The thread that reads the streams and runs the hub's executor, the
    // counters, and the lifecycle with the connections and readers.
    let core: RedisCore
    let router: ClusterRouter
    // The quiet readers of namespaces' names, waiting together, and how
    // many connections they wait on (see `IdleReaders`).
    let idleReaders: LoopBound<IdleReaders>
    let idleWatches: IdleReaders.Gauge
    let idleMostReading: IdleReaders.Gauge
    // When each read in flight counts as unanswered (see `ReadDeadlines`).
    let readDeadlines: LoopBound<ReadDeadlines>
    // The loop's envelope decoder, shared by its readers.
    let decoders: LoopBound<EnvelopeDecoderBox>
    // A durable identity's acknowledgements; nil for a plain observer.
    let acknowledgements: AcknowledgementSender?
    // `WAIT`, encoded, to follow each post on its connection when replicas
    // must confirm it; nil otherwise.
    let confirmation: [UInt8]?

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
        firstRead: ReadStart = .end,
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
        firstRead: ReadStart = .end,
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
            configuration.blockTimeout >= .milliseconds(10), (configuration.maximumAge ?? .seconds(1)) >= .seconds(1),
            configuration.failoverWait >= .zero, configuration.acknowledgement.isValid
        else {
            throw TypedNotificationError(
                code: .invalidConfiguration,
                message: "Redis streams configuration out of range: maximumLength ≥ 1, readBatchSize 1-100000, "
                    + "blockTimeout ≥ 10 ms, maximumAge ≥ 1 s, failoverWait ≥ 0, "
                    + "acknowledgement replicas 1-1000 within at least 1 ms")
        }
        self.options = options
        self.identity = identity
        self.firstRead = firstRead
        self.configuration = configuration
        let core = RedisCore(
            kind: "Redis",
            loop: try RedisCore.makeLoop(named: "TypedNotifications.RedisStreamsTransport", for: "Redis"),
            shared: RedisTransportState())
        let (loop, counters) = (core.loop, core.counters)
        let router = ClusterRouter(seed: options)
        self.core = core
        self.router = router
        let idle = IdleReaders()
        idleWatches = idle.watchCount
        idleMostReading = idle.mostReading
        idleReaders = LoopBound(idle, on: loop)
        readDeadlines = LoopBound(ReadDeadlines(), on: loop)
        decoders = LoopBound(EnvelopeDecoderBox(), on: loop)
        acknowledgements = identity.map {
            AcknowledgementSender(identity: $0, router: router, counters: counters, loop: loop)
        }
        if case .replicas(let count, let timeout) = configuration.acknowledgement {
            confirmation = RESPWriter.command("WAIT", String(count), String(timeout.clampedMilliseconds))
        } else {
            confirmation = nil
        }
    }

    deinit {
        close()
    }

    /// Counters since the transport was created.
    public var statistics: RedisStreamsStatistics { counters.snapshot }

    /// The names whose reader cannot reach Redis now, each with the last
    /// error: the reader keeps trying (with backoff, to 2 s between tries;
    /// in a cluster, asking every node it knows for the slot's master) and
    /// reads from where it stood once it reaches it, when its entry here is
    /// removed. A namespace's reader of announcements (see
    /// `subscribe(to:)`) is listed under the namespace's first name.
    /// Empty while every reader reads. Each failed try is counted
    /// in ``RedisStreamsStatistics/failedReconnects``.
    public var readerErrors: [NotificationName: TypedNotificationError] {
        state.withLock { $0.shared.readerErrors }
    }

    /// ``readerErrors`` as it changes: first as it is now, then again each
    /// time a name's reader loses its server, fails another try, or reads
    /// again. Pushed by the transport as it happens, so a tool that says
    /// when reading stops and resumes need not ask again and again (nothing
    /// wakes while nothing changes). A slow consumer gets the newest map,
    /// not each one between. The sequence ends when the transport closes.
    public func readerErrorUpdates() -> AsyncStream<[NotificationName: TypedNotificationError]> {
        typealias Errors = [NotificationName: TypedNotificationError]
        let (stream, continuation) = AsyncStream.makeStream(of: Errors.self, bufferingPolicy: .bufferingNewest(1))
        let number = state.withLock { state -> Int? in
            guard state.lifecycle.isOpen else { return nil }
            let number = state.shared.nextReaderErrorWatcher
            state.shared.nextReaderErrorWatcher += 1
            state.shared.readerErrorWatchers[number] = continuation
            // Under the lock, so no later change is told before it. Nobody
            // iterates the stream yet: the yield only buffers.
            continuation.yield(state.shared.readerErrors)
            return number
        }
        guard let number else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { _ = $0.shared.readerErrorWatchers.removeValue(forKey: number) }
        }
        return stream
    }

    /// Has ``readerErrorUpdates()``'s watchers told of a change to
    /// ``readerErrors`` just made: at once on the loop, else by the loop.
    func readerErrorsMayHaveChanged() {
        if loop.isCurrent {
            tellReaderErrors()
        } else {
            loop.execute { [weak self] in self?.tellReaderErrors() }
        }
    }

    /// Tells ``readerErrorUpdates()``'s watchers the errors as they are, if
    /// they changed since last told. Only on the loop, so that what each
    /// watcher is told last is the newest; a change made elsewhere asks the
    /// loop to tell.
    func tellReaderErrors() {
        typealias Watcher = AsyncStream<[NotificationName: TypedNotificationError]>.Continuation
        let told = state.withLock { state -> ([NotificationName: TypedNotificationError], [(Int, Watcher)])? in
            guard state.shared.readerErrorsChanged else { return nil }
            state.shared.readerErrorsChanged = false
            guard !state.shared.readerErrorWatchers.isEmpty else { return nil }
            return (state.shared.readerErrors, state.shared.readerErrorWatchers.map { ($0.key, $0.value) })
        }
        guard let (errors, watchers) = told else { return }
        var ended: [Int] = []
        for (number, watcher) in watchers {
            if case .terminated = watcher.yield(errors) { ended.append(number) }
        }
        // One that ended before its end could be heard of is let go here.
        if !ended.isEmpty {
            state.withLock { state in for number in ended { state.shared.readerErrorWatchers[number] = nil } }
        }
    }

    /// Redis streams carry envelopes.
    @_spi(TransportAuthoring) public var payloadForm: TransportPayloadForm { .encoded }

    /// The lifecycle, connections and readers, under the core's lock.
    var state: Locked<RedisCore.State> { core.state }

    /// `true`: the transport counts the entries trimmed before a reader read
    /// them (of any sender) from the stream's counters and reports them.
    @_spi(TransportAuthoring) public var reportsEveryMissedNotification: Bool { true }

    /// The event loop that reads the streams; it also runs the hub's executor.
    @_spi(TransportAuthoring) public var deliveryExecutor: (any TaskExecutor & SerialExecutor)? { loop }

    /// The stream key of `name`: `<prefix>:{<name>}`.
    public func key(for name: NotificationName) -> String {
        "\(configuration.keyPrefix):{\(name.rawValue)}"
    }

    /// Connects, so an unreachable server or a wrong password fails here, and
    /// starts the event loop.
    ///
    /// - Throws: ``TypedNotifications/TypedNotificationError/Code/unreachable`` or
    ///   ``TypedNotifications/TypedNotificationError/Code/authenticationFailed``.
    @_spi(TransportAuthoring) public func open(as sender: NotificationSender, receiver: TransportReceiver)
        throws(TypedNotificationError)
    {
        try core.checkOpenable()
        let connection = try RedisConnection.connect(options, clientName: "tn-\(sender.endpoint)")
        // A cluster answers with its slot map; a standalone server with an error.
        try router.learn(slotsOf: connection)
        try core.open(receiver) { $0.idle[options, default: []].append(connection) }
        loop.start()
    }

    /// Stops reading, and starts what must follow without waiting for it:
    /// a durable identity's reads are ended at the server (a node that does
    /// not answer is waited for once, at most its connect and command
    /// timeouts, on a thread of the system's pool), then the acknowledgements
    /// still queued are sent and every connection closed, on the event
    /// loop, which then stops. `NotificationTransport.whenClosed(_:)` calls back once all of
    /// that is done. Idempotent.
    ///
    /// No reader hands out anything once this returns. The last
    /// acknowledgements cover what the identity's observers handled before
    /// this was called; a delivery handled after it (a handler still working
    /// through its buffer, a loop that was still holding one) may not be
    /// acknowledged: it stays pending in the group and comes again, marked
    /// as a redelivery, on the next run. Nothing is lost. Its reads end at
    /// the server before the close is done, so an entry posted after that
    /// goes to the next run as a first delivery; one posted while it closes
    /// may be read and left pending, and come again marked.
    @_spi(TransportAuthoring) public func close() {
        let (closing, (readers, idle, watchers)) = core.close { shared in
            defer {
                shared.readers = [:]
                shared.namespaces = [:]
                shared.named = []
                shared.idle = [:]
                shared.readerErrorWatchers = [:]
            }
            return (
                Array(shared.readers.values) + Array(shared.namespaces.values), shared.idle,
                Array(shared.readerErrorWatchers.values)
            )
        }
        for watcher in watchers { watcher.finish() }
        let (loop, core) = (loop, core)
        guard closing.wasOpen else {
            closing.end(loop) { core.finishClosing() }
            return
        }
        // From now on the loop hands nothing of any reader out, even a reply
        // already on its way (see `deliver`).
        for reader in readers { _ = reader.markStopping() }
        let ending = ClosingReads(
            readers: readers, idle: idle, identity: identity, acknowledgements: acknowledgements,
            idleReaders: idleReaders)
        DispatchQueue.global().async { ending.run(on: loop, core: core) }
    }

    /// The newest valid envelope in `name`'s stream, without observing it.
    @_spi(TransportAuthoring) public func latestMessage(of name: NotificationName) throws(TypedNotificationError)
        -> TransportMessage?
    {
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

/// The skeleton of a ``RedisStreamsTransport``: open, it keeps the center's receiver.
typealias RedisCore = TransportCore<
    TransportReceiver, RedisTransportState, RedisStreamsStatistics
>

/// What the transport's threads share, under its core's lock beside the lifecycle.
struct RedisTransportState {
    // Per node (the one server, unless it is a cluster).
    var idle: [RedisConnectionOptions: [RedisConnection]] = [:]
    var readers: [NotificationName: StreamReader] = [:]
    /// The names subscribed by name, not only through a namespace.
    var named: Set<NotificationName> = []
    /// Per subscribed namespace, the reader of its announcements.
    var namespaces: [NotificationNamespace: StreamReader] = [:]
    /// The names this transport announced to namespace observers, each
    /// with when (at most ``RedisStreamsTransport/announcedLimit``).
    var announced: [NotificationName: UInt64] = [:]
    /// Counts the times ``announced`` was forgotten for a new connection.
    var announcementsForgotten = 0
    var connectBackoff: [RedisConnectionOptions: ConnectBackoff] = [:]
    var nextTrim: [NotificationName: UInt64] = [:]
    /// Per subscribed name whose reader cannot reach its node now, the last
    /// error; removed once it reads again.
    var readerErrors: [NotificationName: TypedNotificationError] = [:] {
        didSet { readerErrorsChanged = true }
    }
    /// ``readerErrors`` changed since its watchers were last told.
    var readerErrorsChanged = false
    /// The sequences of ``RedisStreamsTransport/readerErrorUpdates()`` still
    /// iterated, by a number of their own.
    var readerErrorWatchers: [Int: AsyncStream<[NotificationName: TypedNotificationError]>.Continuation] = [:]
    var nextReaderErrorWatcher = 0
}

/// Built on the transport skeleton: see ``TransportCore``.
extension RedisStreamsTransport {
    /// Runs `body` once what `close()` started is done.
    @_spi(TransportAuthoring) public func whenClosed(_ body: @escaping @Sendable () -> Void) {
        core.whenClosed(body)
    }

    /// The transport's thread.
    var loop: EventLoop { core.loop }

    /// Whether it is open now.
    var isOpen: Bool { core.isOpen }

    /// The live counters.
    var counters: Counters<RedisStreamsStatistics> { core.counters }
}

/// The part of a Redis transport's close that waits for servers, run on a
/// thread of the system's pool so that `close()` never waits.
private struct ClosingReads: @unchecked Sendable {
    // Sendable: made by `close()` from the state it took under the core's
    // lock, which no longer holds any of it; only the one pool thread that
    // runs `run(on:core:)` uses the connections, one at a time, then the
    // loop's last job the readers and acknowledgements, which are made to
    // be used from there.
    let readers: [StreamReader]
    let idle: [RedisConnectionOptions: [RedisConnection]]
    let identity: String?
    let acknowledgements: AcknowledgementSender?
    let idleReaders: LoopBound<IdleReaders>

    /// Ends durable reads at their servers (the idle connections first,
    /// which close after), then, on the loop, cancels the readers, closes
    /// the idle watches and sends the last acknowledgements, and stops the
    /// loop; once its thread has finished, the close is done.
    func run(on loop: EventLoop, core: RedisCore) {
        var spare = idle
        var silent: Set<RedisConnectionOptions> = []
        for reader in readers {
            let unanswered = RedisStreamsTransport.endReads(
                of: reader, identity: identity,
                borrowing: { node in
                    silent.contains(node) ? nil : spare[node]?.popLast() ?? (try? RedisConnection.connect(node))
                },
                giveBack: { spare[$0.options, default: []].append($0) })
            if let unanswered { silent.insert(unanswered) }
        }
        withExtendedLifetime(spare) {}
        // The last acknowledgements go out on the loop, after the delivery
        // in progress there: the center lets go of a receipt once it handed
        // the message out.
        let (readers, acknowledgements, idleReaders) = (readers, acknowledgements, idleReaders)
        loop.execute {
            for reader in readers { reader.cancel() }
            RedisStreamsTransport.closeIdleReaders(idleReaders)
            acknowledgements?.finish()
            loop.stop()
        }
        loop.whenFinished { core.finishClosing() }
    }
}
