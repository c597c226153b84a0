import Dispatch
import NotificationPlatform

/// Limits and policies of a ``SocketTransport``.
public struct SocketTransportConfiguration: Sendable {
    /// Who besides the owner may use the directory. Default: ``DirectorySharing/ownerOnly``.
    public var sharing: DirectorySharing
    /// How many bytes of notifications a poster spools for one endpoint whose
    /// socket cannot take more (a suspended or slow process), counting what
    /// other posters already spooled there when it starts. Default 16 MiB:
    /// about 150,000 notifications with small payloads. Past it, posts to that
    /// endpoint throw ``TypedNotificationError/Code/undelivered`` and the
    /// endpoint is told how many it missed. The spool is a file in the shared
    /// directory, so what it holds outlives the poster.
    public var spoolLimitPerEndpoint: Int
    /// How long a post waits, at most, for endpoints whose socket is full
    /// before it writes to their spool instead. Default 1 ms.
    ///
    /// A running endpoint drains its socket within microseconds, so a short
    /// wait lets a burst to live observers go through their sockets, which
    /// costs less than writing it to files. A suspended endpoint makes one post
    /// wait this long; every later post to it is spooled at once, without
    /// waiting, until the endpoint has read the spool. The wait is one for all
    /// full endpoints of a post, not one each. `.zero` spools at once.
    public var fullSocketWait: Duration
    /// Whether a post also reaches observers of this same transport. Default `true`.
    public var deliversToSelf: Bool

    /// Creates a configuration.
    public init(
        sharing: DirectorySharing = .ownerOnly,
        spoolLimitPerEndpoint: Int = 16 * 1024 * 1024,
        fullSocketWait: Duration = .milliseconds(1),
        deliversToSelf: Bool = true
    ) {
        self.sharing = sharing
        self.spoolLimitPerEndpoint = spoolLimitPerEndpoint
        self.fullSocketWait = fullSocketWait
        self.deliversToSelf = deliversToSelf
    }

    /// ``fullSocketWait`` in nanoseconds, at least 0 and at most a second.
    var fullSocketWaitNanoseconds: UInt64 {
        let (seconds, attoseconds) = fullSocketWait.components
        guard seconds >= 0, attoseconds >= 0 else { return 0 }
        guard seconds < 1 else { return 1_000_000_000 }
        return UInt64(attoseconds / 1_000_000_000)
    }
}

/// Counters of a ``SocketTransport``: what it sent, held back, dropped,
/// refused and cleaned up.
public struct SocketTransportStatistics: Hashable, Sendable {
    /// Datagrams sent to endpoints, including this transport's own.
    public var sent: Int
    /// Notifications written to an endpoint's spool because its socket could
    /// not take more at once.
    public var spooled: Int
    /// Posts that found an endpoint's socket full, with nothing spooled for
    /// it, and waited for it (at most
    /// ``SocketTransportConfiguration/fullSocketWait``) before sending or
    /// spooling.
    public var fullSocketWaits: Int
    /// Notifications an endpoint did not take: its spool was over the limit
    /// (the endpoint is told how many) or could not be written.
    public var dropped: Int
    /// Envelopes received and handed to the center, from the socket and from
    /// this endpoint's spool.
    public var received: Int
    /// Of ``received``, those read from this endpoint's spool.
    public var receivedFromSpool: Int
    /// Endpoints never sent to because their socket file was not a socket of
    /// this directory: a symbolic link, another owner's file, or a socket
    /// that turned out to be bound elsewhere.
    public var refusedEndpoints: Int
    /// Datagrams refused because they came from a user who may not post here,
    /// or claimed to come from another user than they did.
    public var refusedForeignSender: Int
    /// Datagrams refused because they were not a valid envelope.
    public var refusedMalformed: Int
    /// Registry entries of dead endpoints this transport removed.
    public var reapedEndpoints: Int
    /// Files in the registry that were not valid entries (wrong name, a
    /// symbolic link, another owner) and were ignored.
    public var ignoredRegistryFiles: Int
    /// Sends and spool writes that failed for a reason other than a full or
    /// dead endpoint.
    public var failedSends: Int
    /// The `errno` of the last such failure, or 0.
    package var lastSendError: Int32
    /// Times a name's registry directory was read. Posting reads it once per
    /// name and again only after it changed, never once per post.
    public var registryScans: Int
    /// Endpoints this transport holds a socket to now.
    public var connectedEndpoints: Int
}

/// Live typed notifications between processes on one host, over Unix-domain
/// datagram sockets, with no daemon.
///
/// Every transport binds its own socket in a shared directory and, for each
/// name its center observes, registers in the directory's registry. A post
/// goes to every endpoint registered for its name, including this process's
/// own when it observes (see ``SocketTransportConfiguration/deliversToSelf``).
///
/// - **Fast posts:** the registry is cached and refreshed when it changes (inotify
///   on Linux), so a post to N endpoints costs N non-blocking sends. In an
///   owner-only directory, every registration and removal also bumps a
///   generation counter in a file all processes map (`names/.generation`),
///   and a post reads the change events only when it moved: otherwise the
///   sends are its only system calls.
/// - **Nothing lost to a suspended observer, whoever posts:** a socket queues
///   only a few datagrams (`net.unix.max_dgram_qlen`, 10 by default). When an
///   endpoint's socket is full, the poster appends to that endpoint's spool, a
///   file in the shared directory that outlives the poster, and keeps doing so,
///   in post order, until the endpoint has read it. A stopped observer receives
///   on resume everything posted while it slept, up to
///   ``SocketTransportConfiguration/spoolLimitPerEndpoint`` (16 MiB, about
///   150,000 small notifications, by default), even if every poster has exited.
///   Beyond it, the post throws ``TypedNotificationError/Code/undelivered``
///   naming the endpoint, and the endpoint is told how many it missed.
/// - **A post waits for a receiver at most 1 ms, and rarely:** sends are
///   non-blocking and spool appends never wait for a lock. Only a post that
///   finds a socket full, with nothing spooled for that endpoint yet, waits
///   for it to drain, at most ``SocketTransportConfiguration/fullSocketWait``
///   (1 ms) for all such endpoints together, and then spools; later posts to
///   that endpoint are spooled at once until it has read the spool. So a
///   burst to running observers goes through their sockets, and a stopped
///   observer costs one post 1 ms and every other post microseconds. Closing
///   takes no longer, because nothing is held in memory for later.
///   ``flush(timeout:)`` waits, when asked, until the endpoints have read what
///   was spooled for them.
/// - **Dead endpoints are reaped:** a process that died leaves a registry entry,
///   a socket file and perhaps a spool; the next post to it, and every new
///   transport for the sockets of the directory, finds it gone and removes them.
/// - **Safe by default:** the directory is 0700 and sockets 0600; symbolic links
///   and foreign files are refused, in the registry and in `sockets/`; on Linux
///   every datagram's sender is checked with `SCM_CREDENTIALS` (user and
///   process id) and messages that claim another sender are dropped and counted.
///
/// Delivery is live: a process that is not running when a notification is
/// posted does not get it. Use the file-plus-signal transport for durability.
public final class SocketTransport: NotificationTransport {
    /// The shared directory, as an absolute path.
    public let directory: String
    /// Limits and policies.
    public let configuration: SocketTransportConfiguration
    /// The largest envelope one datagram carries on this system; a larger post
    /// fails with ``TypedNotificationError/Code/payloadTooLarge`` and nothing is sent.
    public let maximumEnvelopeSize: Int
    // The directory and this endpoint's socket file: if either goes, posters
    // can no longer reach this endpoint, and observers are told.
    private let watchedFiles: [RecordedPath]

    /// This transport's socket, in the directory's `sockets` folder.
    package let socketPath: String

    private let identifier: String
    private let spoolDirectory: String
    private let receiveSocket: FileDescriptor
    private let counters = SocketCounters()
    private let state = Locked(SocketState())
    // The registry cache and the endpoints, for the send in progress.
    private let sending: SocketRoutingSlot
    // Bumped by every registration and removal, so that a post reads the
    // registry's change events only when something registered since: one
    // system call per post fewer. Owner-only directories only (a file others
    // could cut short must not be mapped); `nil` there and where it cannot be
    // made, and then every post reads the change events.
    private let registryGeneration: SharedCounter?
    // Read once: a getuid per datagram showed in profiles.
    private let ownUser = SystemProcess.userID
    private let ownGroup = SystemProcess.groupID
    // Receives, reads the spool and runs the jobs of the hub's executor.
    private let loop: EventLoop

    /// A directory for this user that survives as long as the login session:
    /// `$XDG_RUNTIME_DIR/typed-notifications`, else `/tmp/typed-notifications-<uid>`.
    public static var defaultDirectory: String {
        SystemProcess.runtimeDirectory(named: "typed-notifications")
    }

    /// Creates the directory structure if needed, checks it, and binds this
    /// transport's socket.
    ///
    /// - Throws: ``TypedNotificationError`` with code
    ///   ``TypedNotificationError/Code/insecureDirectory`` for a directory that is
    ///   a symbolic link, belongs to someone else or is open to others;
    ///   ``TypedNotificationError/Code/pathTooLong`` when the socket path would
    ///   not fit in `sun_path` (the message names the path and the limit).
    public init(
        directory: String = SocketTransport.defaultDirectory,
        configuration: SocketTransportConfiguration = SocketTransportConfiguration()
    ) throws(TypedNotificationError) {
        let directory = SharedDirectory.absolute(directory)
        self.directory = directory
        self.configuration = configuration
        identifier = SocketRegistry.makeIdentifier()
        socketPath = SocketRegistry.socketPath(directory, identifier)
        spoolDirectory = Spool.directory(directory, endpoint: identifier)
        let limit = SystemCalls.maximumSocketPathLength
        guard socketPath.utf8.count <= limit else {
            throw TypedNotificationError(
                code: .pathTooLong,
                message:
                    "the socket path \(socketPath) is \(socketPath.utf8.count) bytes; sockets allow at most \(limit). Choose a shorter directory"
            )
        }
        try SharedDirectory.prepare(directory, sharing: configuration.sharing)
        try SharedDirectory.prepare(SocketRegistry.socketsDirectory(directory), sharing: configuration.sharing)
        try SharedDirectory.prepare(SocketRegistry.namesDirectory(directory), sharing: configuration.sharing)
        try SharedDirectory.prepare(Spool.directory(directory), sharing: configuration.sharing)

        let socket: FileDescriptor
        do throws(Errno) {
            socket = try SystemCalls.datagramSocket().get()
        } catch {
            throw SharedDirectory.failure(error, "could not create a socket")
        }
        // The spool directory first: a poster that finds the socket full
        // writes there, so it must exist once the socket does.
        try SharedDirectory.prepare(spoolDirectory, sharing: configuration.sharing)
        if case .failure(let error) = SystemCalls.bindSocket(socket, toSocketPath: socketPath) {
            _ = SystemCalls.removeDirectory(spoolDirectory)
            throw SharedDirectory.failure(error, "could not bind \(socketPath)")
        }
        _ = SystemCalls.changeMode(socketPath, permissions: configuration.sharing.fileMode)
        let spoolDirectory = spoolDirectory
        let socketPath = socketPath
        func undo() {
            _ = SystemCalls.removeFile(socketPath)
            _ = SystemCalls.removeDirectory(spoolDirectory)
        }
        if case .failure(let error) = SystemCalls.enableCredentials(socket) {
            undo()
            throw SharedDirectory.failure(error, "could not ask for sender credentials on \(socketPath)")
        }
        // Large envelopes need a large send buffer; the kernel caps the request.
        _ = SystemCalls.setBufferSize(socket, send: true, bytes: SocketRegistry.largestEnvelope)
        let sendBuffer = (try? SystemCalls.sendBufferSize(socket).get()) ?? 212_992
        maximumEnvelopeSize = min(SocketRegistry.largestEnvelope, max(1024, sendBuffer - 1024))
        receiveSocket = socket
        watchedFiles = [RecordedPath(directory), RecordedPath(socketPath)].compactMap { $0 }

        do throws(Errno) {
            loop = try EventLoop(name: "TypedNotifications.SocketTransport")
        } catch {
            undo()
            throw SharedDirectory.failure(error, "could not create an event loop")
        }
        let monitor: DirectoryMonitor
        do throws(ChangeMonitorError) {
            monitor = try DirectoryMonitor()
        } catch {
            undo()
            throw SharedDirectory.failure(error, "could not watch the registry")
        }
        sending = SocketRoutingSlot(
            monitor: monitor, excludedEndpoint: configuration.deliversToSelf ? nil : identifier)
        registryGeneration =
            configuration.sharing == .ownerOnly
            ? try? SharedCounter(
                path: SocketRegistry.generationPath(directory), permissions: configuration.sharing.fileMode,
                owner: SystemProcess.userID)
            : nil
    }

    deinit {
        close()
    }

    /// Counters since the transport was created.
    public var statistics: SocketTransportStatistics {
        var snapshot = counters.snapshot
        snapshot.connectedEndpoints = state.withLock { $0.peers.count }
        return snapshot
    }

    /// Socket transports carry envelopes.
    public var payloadForm: TransportPayloadForm { .encoded }

    /// Starts receiving on the transport's event-loop thread.
    public func open(as sender: NotificationSender, receiver: TransportReceiver) throws(TypedNotificationError) {
        let spoolMonitor: DirectoryMonitor
        do throws(ChangeMonitorError) {
            spoolMonitor = try DirectoryMonitor()
            _ = try spoolMonitor.watch(spoolDirectory)
        } catch {
            throw SharedDirectory.failure(error, "could not watch the spool \(spoolDirectory)")
        }
        try state.withLock { (state: inout SocketState) throws(TypedNotificationError) in
            guard case .created = state.phase else {
                throw TypedNotificationError(code: .closed, message: "this socket transport was already opened")
            }
            state.phase = .open(sender)
        }
        // Before open returns, so that a transport that is up has reaped the
        // endpoints that were dead when it started, and never reaps later
        // ones behind its caller's back.
        sweepDeadSockets()
        let receiving = SocketReceiving(
            receiver: receiver, spoolMonitor: spoolMonitor, maximumEnvelopeSize: maximumEnvelopeSize,
            watchedFiles: watchedFiles)
        do throws(Errno) {
            try loop.register(receiveSocket.rawValue) { [unowned self] in
                // As many as a handler loop delivers in one slice: a handler on
                // the hub's executor, which runs on this thread too, keeps up
                // with a flood instead of watching its buffer fill (it dropped
                // when this read 4,096 at a time). The loop comes back while
                // datagrams are waiting, and the spool is read in between.
                receiveAll(into: receiving, limit: HandlerLoopBudget.deliveries)
            }.get()
            if let descriptor = spoolMonitor.pollDescriptor {
                // The process's hubs share one change queue: a spool change
                // that another one read comes by this call.
                spoolMonitor.whenChangedElsewhere = { [loop] in loop.markReadable(descriptor) }
                try loop.register(descriptor, exclusive: true) { [unowned self] in lookAtSpool(receiving) }.get()
            } else {
                // Without inotify (Apple platforms) the spool is looked at every 20 ms.
                scheduleSpoolLook(receiving, after: 20_000_000, repeating: true)
            }
        } catch {
            throw SharedDirectory.failure(error, "could not watch \(socketPath)")
        }
        scheduleRemovalLook(receiving)
        loop.start()
    }

    /// The transport's event loop, which also runs the jobs of its hub's
    /// executor, so a notification it receives reaches a handler there
    /// without waking another thread.
    public var deliveryExecutor: (any TaskExecutor & SerialExecutor)? { loop }

    /// Registers this endpoint for `name`: from now on posts of it reach this transport.
    public func subscribe(to name: NotificationName) throws(TypedNotificationError) {
        let sender = try state.withLock { (state: inout SocketState) throws(TypedNotificationError) in
            guard case .open(let sender) = state.phase else {
                throw TypedNotificationError(code: .closed, message: "subscribe on a socket transport that is not open")
            }
            return sender
        }
        // The entry is written with no lock held; the center serializes
        // subscribing and unsubscribing a name.
        try SocketRegistry.register(
            identifier, for: name, in: directory, sender: sender, sharing: configuration.sharing)
        // After the entry exists: a poster that sees the new generation
        // finds the entry's creation among the change events it then reads.
        registryGeneration?.increment()
        let registered = state.withLock { state in
            guard case .open = state.phase else { return false }
            state.subscribed.insert(name)
            return true
        }
        guard registered else {
            // Closed meanwhile: `close` did not know of this entry.
            _ = SystemCalls.removeFile(SocketRegistry.entryPath(directory, name, identifier))
            throw TypedNotificationError(code: .closed, message: "subscribe on a socket transport that closed")
        }
    }

    /// Removes this endpoint's registration for `name`.
    public func unsubscribe(from name: NotificationName) {
        guard state.withLock({ $0.subscribed.remove(name) != nil }) else { return }
        _ = SystemCalls.removeFile(SocketRegistry.entryPath(directory, name, identifier))
        registryGeneration?.increment()
    }

    /// Sends the envelope to every endpoint registered for its name, or to
    /// their spools. Waits only when a socket is full and nothing is spooled
    /// for that endpoint yet: at most
    /// ``SocketTransportConfiguration/fullSocketWait`` for all of them, without
    /// holding the transport's lock.
    ///
    /// - Throws: ``TypedNotificationError/Code/payloadTooLarge`` when the envelope
    ///   is larger than one datagram carries (``maximumEnvelopeSize``), before
    ///   anything is sent; ``TypedNotificationError/Code/closed`` after ``close()``;
    ///   ``TypedNotificationError/Code/undelivered`` when some endpoints did not
    ///   take it (their spool is over the limit or could not be written): every
    ///   other endpoint has it, and the error names those that do not;
    ///   ``TypedNotificationError/Code/transportFailure`` when another send is
    ///   in progress on this transport (its center never does that: it makes
    ///   one send at a time). A send makes its system calls with no lock
    ///   held, so statistics, subscribing and closing never wait for it.
    public func send(_ message: TransportMessage) throws(TypedNotificationError) {
        guard case .encoded(let encoded) = message.payload else {
            throw TypedNotificationError(code: .transportFailure, message: "the socket transport sends envelopes only")
        }
        guard encoded.envelopeRange.count <= maximumEnvelopeSize else {
            throw TypedNotificationError(
                code: .payloadTooLarge,
                message:
                    "\(message.name): a \(encoded.envelopeRange.count)-byte envelope is larger than one datagram carries on this system (\(maximumEnvelopeSize) bytes); nothing was sent. Lower the payload or use the file-plus-signal transport"
            )
        }
        guard isOpen else {
            throw TypedNotificationError(code: .closed, message: "post of \(message.name) to a closed socket transport")
        }
        // Every system call of the send is made with no lock held: the send
        // owns the routing while it runs.
        guard sending.claim() else {
            throw TypedNotificationError(
                code: .transportFailure,
                message:
                    "\(message.name): another send is in progress on this socket transport; a transport takes one send at a time (its center makes them one at a time)"
            )
        }
        defer { endSend() }
        refreshRoute(for: message.name, in: &sending.routing)
        var undelivered: [(id: String, reason: String)] = []
        var full: [FullEndpoint] = []
        for id in sending.routing.machine.route(of: message.name) {
            guard let peer = sending.routing.machine.peer(id) else { continue }
            switch attempt(encoded, of: message, to: peer, in: &sending.routing) {
            case .taken: break
            case .full: full.append(FullEndpoint(id: id, descriptor: peer.descriptor.rawValue))
            case .undelivered(let reason): undelivered.append((id, reason))
            }
        }
        if !full.isEmpty {
            counters.fullSocketWaits.add(1, ordering: .relaxed)
            undelivered += waitThenSpool(encoded, of: message, for: full)
        }
        guard !undelivered.isEmpty else { return }
        let named = undelivered.map { endpointLabel($0.id, of: message.name) }
        let reasons = zip(named, undelivered).map { "\($0) (\($1.reason))" }.joined(separator: ", ")
        var error = TypedNotificationError(
            code: .undelivered,
            message:
                "\(message.name) was posted, but \(undelivered.count == 1 ? "one endpoint" : "\(undelivered.count) endpoints") did not take it: \(reasons); they will see it as missed"
        )
        error.undeliveredEndpoints = named
        throw error
    }

    /// Publishes what the send changed for statistics, flush and error
    /// messages, and lets the routing go; after a close, closes its sockets.
    private func endSend() {
        let changes = sending.routing.machine.takeChanges()
        let isClosed = state.withLock { state in
            if let changes {
                state.peers = changes.peers
                state.routes = changes.routes
            }
            if case .closed = state.phase { return true }
            return false
        }
        sending.release()
        if isClosed { dropRoutingAfterClose() }
    }

    /// Closes the sockets to every endpoint, unless a send holds them: that
    /// send does it when it ends (it looks at the phase after letting them go).
    private func dropRoutingAfterClose() {
        guard sending.claim() else { return }
        // The peers' sockets close as the last references go.
        _ = sending.routing.machine.removeAll()
        sending.release()
    }

    /// Waits until every endpoint has read everything this transport posted
    /// to it, from its socket and from its spool (or was found dead), or
    /// `timeout` passes. Returns whether nothing is left unread. Posting never
    /// needs this: a spool outlives its poster. Call it to know that observers
    /// took everything, for example before reporting success to a person.
    public func flush(timeout: Duration) -> Bool {
        let deadline = SystemClock.monotonicNanoseconds() &+ UInt64(clamping: timeout.clampedNanoseconds)
        var pause: UInt32 = 200
        while true {
            if unreadPeers().isEmpty { return true }
            guard SystemClock.monotonicNanoseconds() < deadline else { return false }
            SystemProcess.pause(microseconds: pause)
            pause = min(pause * 2, 10_000)
        }
    }

    /// The endpoints that have not yet read everything this transport posted
    /// to them (on their socket or in their spool), named as
    /// ``TypedNotificationError/undeliveredEndpoints`` are.
    public var endpointsWithUnreadPosts: [String] {
        unreadPeers().sorted().map { endpointLabel($0, of: nil) }
    }

    /// The identifiers of live endpoints that have not read everything yet.
    /// Decides what to look at under the lock, and makes the calls after it.
    private func unreadPeers() -> [String] {
        let peers = state.withLock { state in state.peers.values.map { (peer: $0, spool: $0.spool.file) } }
        var unread: [String] = []
        for (peer, spool) in peers {
            var waiting = false
            if let spool, case .success(let info) = SystemCalls.fileStatus(spool.descriptor), info.links > 0 {
                waiting = true
            }
            if case .success(let bytes) = SystemCalls.unreadSentBytes(peer.descriptor), bytes > 0 {
                waiting = true
            }
            // An endpoint that died never reads; there is nothing to wait for.
            if waiting && SocketTransport.endpointState(directory, peer.id) != .dead {
                unread.append(peer.id)
            }
        }
        return unread
    }

    /// Unregisters every name, unlinks the socket and this endpoint's spool,
    /// and stops the receiving thread. Takes a bounded time: nothing waits to
    /// be sent. Idempotent.
    public func close() {
        enum Before { case alreadyClosed, created, open }
        let (before, names) = state.withLock { state -> (Before, Set<NotificationName>) in
            let before: Before
            switch state.phase {
            case .closed: return (.alreadyClosed, [])
            case .created: before = .created
            case .open: before = .open
            }
            state.phase = .closed
            defer {
                state.subscribed = []
                state.peers = [:]
                state.routes = [:]
            }
            return (before, state.subscribed)
        }
        guard before != .alreadyClosed else { return }
        dropRoutingAfterClose()
        for name in names {
            _ = SystemCalls.removeFile(SocketRegistry.entryPath(directory, name, identifier))
        }
        if !names.isEmpty { registryGeneration?.increment() }
        _ = SystemCalls.removeFile(socketPath)
        loop.stop()
        if before == .open {
            // The loop's thread may itself end up here (a center released
            // while it delivered); it does not wait for itself.
            _ = loop.join(nanoseconds: 10_000_000_000)
        }
        Self.removeSpool(spoolDirectory)
    }

    // MARK: - Posting

    /// An endpoint whose socket was full, and the descriptor to wait on.
    private struct FullEndpoint: Sendable {
        var id: String
        var descriptor: CInt
    }

    /// What one attempt to hand a notification to an endpoint came to.
    private enum Attempt {
        /// Sent, spooled, or the endpoint is dead (and was reaped).
        case taken
        /// Its socket is full and nothing is spooled for it: wait, then spool.
        case full
        /// It will not get this notification, and why.
        case undelivered(String)
    }

    /// Appends to the endpoint's spool while this poster has one there (so
    /// nothing overtakes it), else sends to its socket.
    private func attempt(
        _ encoded: EncodedNotification, of message: TransportMessage, to peer: SocketPeer,
        in routing: inout SocketRouting
    ) -> Attempt {
        if peer.spool.isActive {
            switch peer.spool.append(encoded, of: message) {
            case .spooled:
                counters.spooled.add(1, ordering: .relaxed)
                return .taken
            case .taken:
                break  // read by the endpoint: send directly again
            case .dropped:
                counters.dropped.add(1, ordering: .relaxed)
                return .undelivered("its spool is full")
            case .failed(let error):
                return .undelivered(spoolFailed(error))
            }
        }
        switch peer.send(encoded) {
        case .sent:
            counters.sent.add(1, ordering: .relaxed)
            return .taken
        case .wouldBlock:
            return .full
        case .dead:
            reap(peer.id, in: &routing)
            return .taken
        case .failed(let error):
            counters.failedSends.add(1, ordering: .relaxed)
            counters.lastSendError.store(error.rawValue, ordering: .relaxed)
            return .undelivered("send failed: \(error)")
        }
    }

    /// Starts a spool file for an endpoint whose socket stayed full. Returns
    /// why it did not take the notification, or `nil`.
    private func startSpool(_ encoded: EncodedNotification, of message: TransportMessage, for peer: SocketPeer)
        -> String?
    {
        switch peer.spool.start(with: encoded, of: message) {
        case .spooled:
            counters.spooled.add(1, ordering: .relaxed)
            return nil
        case .dropped:
            counters.dropped.add(1, ordering: .relaxed)
            return "its spool is full"
        case .taken:
            return nil
        case .failed(let error):
            return spoolFailed(error)
        }
    }

    /// Waits up to ``SocketTransportConfiguration/fullSocketWait`` for the
    /// full sockets of `peers` to take the notification, then spools it for
    /// those still full; called by the send that holds the routing, with no
    /// lock held. Returns the endpoints
    /// that did not take it, and why.
    private func waitThenSpool(_ encoded: EncodedNotification, of message: TransportMessage, for full: [FullEndpoint])
        -> [(id: String, reason: String)]
    {
        var wait = FullSocketWait(
            full, deadline: SystemClock.monotonicNanoseconds() &+ configuration.fullSocketWaitNanoseconds)
        var undelivered: [(id: String, reason: String)] = []
        while true {
            let ready: [FullEndpoint]
            let isLast: Bool
            switch wait.next(now: SystemClock.monotonicNanoseconds()) {
            case .done:
                return undelivered
            case .poll(let endpoints, let milliseconds):
                // A descriptor closed meanwhile (the endpoint was reaped) at
                // worst wakes this poll early: the retry below looks the
                // endpoint up again.
                let writable =
                    (try? SystemCalls.waitUntilWritable(endpoints.map(\.descriptor), milliseconds: milliseconds).get())
                    ?? []
                ready = wait.polled(writable: writable)
                isLast = false
            case .lastTry(let endpoints):
                ready = endpoints
                isLast = true
            }
            let open = isOpen
            for endpoint in ready {
                guard open else {
                    undelivered.append((endpoint.id, "the transport closed"))
                    continue
                }
                // Reaped or unsubscribed meanwhile: nothing to deliver.
                guard let peer = sending.routing.machine.peer(endpoint.id) else { continue }
                switch attempt(encoded, of: message, to: peer, in: &sending.routing) {
                case .taken:
                    break
                case .undelivered(let reason):
                    undelivered.append((endpoint.id, reason))
                case .full where isLast:
                    if let reason = startSpool(encoded, of: message, for: peer) {
                        undelivered.append((endpoint.id, reason))
                    }
                case .full:
                    wait.stillFull(FullEndpoint(id: endpoint.id, descriptor: peer.descriptor.rawValue))
                }
            }
        }
    }

    private func spoolFailed(_ error: Errno) -> String {
        counters.dropped.add(1, ordering: .relaxed)
        counters.failedSends.add(1, ordering: .relaxed)
        counters.lastSendError.store(error.rawValue, ordering: .relaxed)
        return "its spool could not be written: \(error)"
    }

    /// `label(pid)` from the endpoint's registry entry for `name` (or any
    /// name this transport routes it for), else its identifier.
    private func endpointLabel(_ id: String, of name: NotificationName?) -> String {
        var names: [NotificationName] = name.map { [$0] } ?? []
        names += state.withLock { state in state.routes.filter { $0.value.contains(id) }.map(\.key) }
        for candidate in names {
            let fields = SocketTransport.entryFields(SocketRegistry.entryPath(directory, candidate, id))
            if fields.processID > 0 { return "\(fields.endpoint)(\(fields.processID)) [\(id)]" }
        }
        return id
    }

    /// Makes sure the cached endpoints of `name` are current: rescans its
    /// registry directory only when it changed since the last look. The
    /// routing machine decides; this performs its actions.
    private func refreshRoute(for name: NotificationName, in routing: inout SocketRouting) {
        guard routing.machine.check(name, generation: registryGeneration?.value) == .readChanges else { return }
        let events: SocketRoutingStateMachine<SocketPeer>.ChangeEvents =
            routing.monitor.changes().map { .changed($0) } ?? .overflowed
        switch routing.machine.changesRead(events, lostWatches: routing.monitor.takeLostWatches(), for: name) {
        case .current:
            return
        case .watch:
            let nameDirectory = SocketRegistry.nameDirectory(directory, name)
            var index: Int?
            if (try? SharedDirectory.prepare(nameDirectory, sharing: configuration.sharing)) != nil {
                index = try? routing.monitor.watch(nameDirectory)
            }
            guard routing.machine.watched(name, as: index) else { return }
        case .list:
            break
        }
        counters.registryScans.add(1, ordering: .relaxed)
        var endpoints: [String] = []
        for entry in SocketRegistry.entries(of: name, in: directory, sharing: configuration.sharing) {
            switch entry {
            case .ignored: counters.ignoredRegistryFiles.add(1, ordering: .relaxed)
            case .endpoint(let id): endpoints.append(id)
            }
        }
        for id in routing.machine.listed(name, endpoints: endpoints) {
            let connection: SocketRoutingStateMachine<SocketPeer>.Connection
            switch SocketPeer.connect(
                id,
                path: SocketRegistry.socketPath(directory, id),
                spoolDirectory: Spool.directory(directory, endpoint: id),
                poster: identifier,
                sharing: configuration.sharing,
                spoolLimit: configuration.spoolLimitPerEndpoint
            ) {
            case .connected(let peer): connection = .connected(peer)
            case .dead: connection = .dead
            case .refused:
                counters.refusedEndpoints.add(1, ordering: .relaxed)
                connection = .refused
            case .unreachable: connection = .unreachable
            }
            if case .removeEntry(let deadName) = routing.machine.connected(id, connection) {
                reapEntry(id, of: deadName)
            }
        }
        // Sockets to endpoints no name routes to any more (they unsubscribed)
        // close, unless they have not read this poster's spool yet: its
        // order must hold until they have.
        _ = routing.machine.finishScan(keeping: { !$0.spool.isTaken })
    }

    /// Removes a dead endpoint: its entries under every name this transport
    /// routes, its socket file and its spool. Each removal is counted only by
    /// the transport whose `unlink` succeeded, so racing posters reap once.
    private func reap(_ id: String, in routing: inout SocketRouting) {
        for name in routing.machine.endpointDied(id) {
            reapEntry(id, of: name)
        }
        _ = SystemCalls.removeFile(SocketRegistry.socketPath(directory, id))
        Self.removeSpool(Spool.directory(directory, endpoint: id))
    }

    private func reapEntry(_ id: String, of name: NotificationName) {
        if case .success = SystemCalls.removeFile(SocketRegistry.entryPath(directory, name, id)) {
            counters.reapedEndpoints.add(1, ordering: .relaxed)
        }
        _ = SystemCalls.removeFile(SocketRegistry.socketPath(directory, id))
        Self.removeSpool(Spool.directory(directory, endpoint: id))
    }

    /// Removes a spool directory and the files in it; never follows a link.
    static func removeSpool(_ path: String) {
        guard case .success(let info) = SystemCalls.linkStatus(path), info.kind == .directory else { return }
        if case .success(let names) = SystemCalls.directoryEntries(path) {
            for name in names { _ = SystemCalls.removeFile(path + "/" + name) }
        }
        _ = SystemCalls.removeDirectory(path)
    }

    // MARK: - The I/O thread

    private var isOpen: Bool {
        state.withLock { state in
            if case .open = state.phase { return true }
            return false
        }
    }

    /// Looks at the spool `after` nanoseconds: again and again without
    /// inotify, else once, when a file was busy or not settled.
    private func scheduleSpoolLook(_ receiving: SocketReceiving, after nanoseconds: UInt64, repeating: Bool) {
        loop.schedule(after: nanoseconds) { [weak self] in
            guard let self, isOpen else { return }
            if repeating {
                _ = receiving.spoolMonitor.changes()
                scheduleSpoolLook(receiving, after: nanoseconds, repeating: true)
            } else {
                receiving.recheckScheduled = false
            }
            takeSpool(receiving)
        }
    }

    /// Once a second: is the directory, or this endpoint's socket, gone?
    private func scheduleRemovalLook(_ receiving: SocketReceiving) {
        loop.schedule(after: 1_000_000_000) { [weak self] in
            guard let self, isOpen else { return }
            if let removal = receiving.removalWatch.removal() {
                receiving.receiver.fail(removal)
                return
            }
            scheduleRemovalLook(receiving)
        }
    }

    /// Reads the spool's change events, then takes what the spool holds.
    private func lookAtSpool(_ receiving: SocketReceiving) {
        _ = receiving.spoolMonitor.changes()
        takeSpool(receiving)
    }

    private func takeSpool(_ receiving: SocketReceiving) {
        let pending = takeSpool(
            buffer: receiving.buffer, decoder: &receiving.decoder, receiver: receiving.receiver,
            firstSeen: &receiving.firstSeen, lastTake: &receiving.lastTake)
        if pending, !receiving.recheckScheduled, receiving.spoolMonitor.pollDescriptor != nil {
            receiving.recheckScheduled = true
            scheduleSpoolLook(receiving, after: 1_000_000, repeating: false)
        }
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
    private func takeSpool(
        buffer: LazyBuffer, decoder: inout EnvelopeDecoder, receiver: TransportReceiver,
        firstSeen: inout [String: UInt64], lastTake: inout UInt64
    ) -> Bool {
        guard case .success(let names) = SystemCalls.directoryEntries(spoolDirectory) else { return false }
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
                counters.refusedMalformed.add(1, ordering: .relaxed)
                _ = SystemCalls.removeFile(spoolDirectory + "/" + name)
                continue
            }
            byPoster[parsed.poster, default: []].append((parsed.generation, name))
        }
        // Each poster's generations in order; posters by their oldest file.
        var posters: [(started: Int64, files: [String])] = byPoster.values.map { files in
            let ordered = files.sorted { $0.generation < $1.generation }.map { spoolDirectory + "/" + $0.file }
            var started = Int64.max
            if let first = ordered.first, case .success(let info) = SystemCalls.linkStatus(first) {
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
            files: for path in poster.files {
                switch lockSpoolFile(path) {
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
                deliverSpoolBatch(batch, buffer: buffer, decoder: &decoder, receiver: receiver)
                batch = []
                lockedFiles = 0
            }
        }
        if !batch.isEmpty { deliverSpoolBatch(batch, buffer: buffer, decoder: &decoder, receiver: receiver) }
        if lockedAny { lastTake = now }
        return busy || unsettled
    }

    private enum SpoolFileOutcome {
        case locked(SpoolFileLock)
        /// Not a file this endpoint reads (removed and counted).
        case refused
        /// A poster holds it: try again shortly.
        case busy
    }

    /// Opens and locks one spool file, refusing anything but a regular file
    /// of an allowed owner; never blocks (a FIFO planted here included).
    private func lockSpoolFile(_ path: String) -> SpoolFileOutcome {
        guard case .success(let file) = SystemCalls.openFile(path, .readOnly, options: [.noFollow, .nonBlocking]) else {
            counters.refusedMalformed.add(1, ordering: .relaxed)
            _ = SystemCalls.removeFile(path)
            return .refused
        }
        guard case .success(let info) = SystemCalls.fileStatus(file), info.kind == .regular else {
            counters.refusedMalformed.add(1, ordering: .relaxed)
            _ = SystemCalls.removeFile(path)
            return .refused
        }
        guard configuration.sharing == .group || info.owner == SystemProcess.userID else {
            counters.refusedForeignSender.add(1, ordering: .relaxed)
            _ = SystemCalls.removeFile(path)
            return .refused
        }
        // A poster holds the lock only for one append (microseconds): look
        // again a few times, briefly, before leaving the file for the next pass.
        for attempt in 0..<Spool.lockAttempts {
            if case .success(true) = SystemCalls.tryLockFile(file) {
                return .locked(SpoolFileLock(path: path, descriptor: file, owner: info.owner))
            }
            if attempt + 1 < Spool.lockAttempts { SystemProcess.pause(microseconds: 20) }
        }
        return .busy
    }

    /// Drains the socket, reads every locked file, hands their records over
    /// merged by post time, then unlinks the files (only then: an empty spool
    /// means everything in it reached the center) and unlocks them.
    private func deliverSpoolBatch(
        _ posters: [[SpoolFileLock]], buffer: LazyBuffer, decoder: inout EnvelopeDecoder, receiver: TransportReceiver
    ) {
        // Datagrams already queued were sent before these files were started:
        // they go first, so each poster's order holds.
        receiveAll(into: buffer, decoder: &decoder, receiver: receiver, limit: Spool.socketDrainLimit)
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
                if malformed { counters.refusedMalformed.add(1, ordering: .relaxed) }
                for record in records {
                    // The file's owner is who wrote it; a record may not claim another user.
                    guard record.message.sender.userID == file.owner else {
                        counters.refusedForeignSender.add(1, ordering: .relaxed)
                        continue
                    }
                    key = max(key, record.message.timestamp.monotonicNanoseconds)
                    merged.append((key, posterIndex, merged.count, record))
                }
            }
        }
        merged.sort { ($0.key, $0.poster, $0.index) < ($1.key, $1.poster, $1.index) }
        for entry in merged {
            switch entry.record {
            case .envelope(let message):
                counters.received.add(1, ordering: .relaxed)
                counters.receivedFromSpool.add(1, ordering: .relaxed)
                receiver.receive(message)
            case .dropped:
                if let report = entry.record.report { receiver.missed(report) }
            }
        }
        for files in posters {
            for file in files { _ = SystemCalls.removeFile(file.path) }
        }
    }

    /// Removes the sockets (and spools) in the directory that nobody is bound
    /// to any more: processes that ended without closing, by SIGTERM or
    /// SIGKILL. Their registry entries go on the next post that routes to them.
    private func sweepDeadSockets() {
        guard case .success(let names) = SystemCalls.directoryEntries(SocketRegistry.socketsDirectory(directory)) else {
            return
        }
        for name in names where name.hasSuffix(".sock") {
            guard isOpen else { return }
            let id = String(name.dropLast(5))
            guard id != identifier, SocketRegistry.isIdentifier(id) else { continue }
            if SocketTransport.endpointState(directory, id) == .dead {
                _ = SystemCalls.removeFile(SocketRegistry.socketPath(directory, id))
                Self.removeSpool(Spool.directory(directory, endpoint: id))
            }
        }
    }

    private func receiveAll(into receiving: SocketReceiving, limit: Int) {
        receiveAll(into: receiving.buffer, decoder: &receiving.decoder, receiver: receiving.receiver, limit: limit)
    }

    private func receiveAll(
        into buffer: LazyBuffer, decoder: inout EnvelopeDecoder, receiver: TransportReceiver, limit: Int
    ) {
        var taken = 0
        while taken < limit {
            taken += 1
            let result = SystemCalls.receiveDatagram(receiveSocket, into: buffer.bytes)
            guard case .success(let datagram) = result else { return }
            // Once it is decoded: its pages above the first 64 KiB go back.
            defer { buffer.shrink(after: datagram.length) }
            guard !datagram.truncated else {
                counters.refusedMalformed.add(1, ordering: .relaxed)
                continue
            }
            if let user = datagram.senderUserID {
                let allowed =
                    user == ownUser
                    || (configuration.sharing == .group && datagram.senderGroupID == ownGroup)
                guard allowed else {
                    counters.refusedForeignSender.add(1, ordering: .relaxed)
                    continue
                }
            } else if SystemCalls.credentialsSupported {
                counters.refusedForeignSender.add(1, ordering: .relaxed)
                continue
            }
            let message: TransportMessage
            do {
                message = try decoder.decode(Array(UnsafeRawBufferPointer(rebasing: buffer.bytes[..<datagram.length])))
            } catch {
                counters.refusedMalformed.add(1, ordering: .relaxed)
                continue
            }
            // The envelope may not claim another user or process than the
            // one the kernel says sent it.
            if let user = datagram.senderUserID, message.sender.userID != user {
                counters.refusedForeignSender.add(1, ordering: .relaxed)
                continue
            }
            if let process = datagram.senderProcessID, message.sender.processID != process {
                counters.refusedForeignSender.add(1, ordering: .relaxed)
                continue
            }
            counters.received.add(1, ordering: .relaxed)
            receiver.receive(message)
        }
    }
}

/// A spool file the endpoint has open and locked; closing the descriptor
/// (when this is released) unlocks it.
private final class SpoolFileLock {
    let path: String
    let descriptor: FileDescriptor
    /// The file's owner: the only user its records may claim.
    let owner: UInt32

    init(path: String, descriptor: consuming FileDescriptor, owner: UInt32) {
        self.path = path
        self.descriptor = descriptor
        self.owner = owner
    }

    /// The whole file, or as much of it as could be read.
    /// The file's records, read a megabyte at a time, up to the first that
    /// is not valid (then `malformed`): what follows it is never read.
    func readRecords(decoder: inout EnvelopeDecoder) -> (records: [Spool.Record], malformed: Bool) {
        guard case .success(let info) = SystemCalls.fileStatus(descriptor), info.size > 0 else { return ([], false) }
        let chunk = 1024 * 1024
        var records: [Spool.Record] = []
        // Bytes read and not parsed yet (a record that goes on into the next
        // chunk), and the file offset after them.
        var pending: [UInt8] = []
        var offset = 0
        var startingFile = true
        while true {
            let count = min(chunk, info.size - offset)
            var got = 0
            if count > 0 {
                let old = pending.count
                pending += repeatElement(0, count: count)
                let read = pending.withUnsafeMutableBytes { raw in
                    SystemCalls.readBytes(
                        descriptor, into: UnsafeMutableRawBufferPointer(rebasing: raw[old...]), at: offset)
                }
                if case .success(let read) = read { got = read }
                pending.removeSubrange((old + got)...)
                offset += got
            }
            let isWhole = got == 0 || offset >= info.size
            let parsed = Spool.parse(pending, startingFile: startingFile, decoder: &decoder, isWhole: isWhole)
            records += parsed.records
            if parsed.malformed { return (records, true) }
            if isWhole { return (records, false) }
            if parsed.next > 0 {
                pending.removeSubrange(..<parsed.next)
                startingFile = false
            }
        }
    }
}

/// What the receiving side keeps between events.
private final class SocketReceiving: @unchecked Sendable {
    // Sendable: after `open` hands it to the event loop, only the loop's
    // handlers and timers touch it, and they run on its thread one at a time.
    let receiver: TransportReceiver
    let spoolMonitor: DirectoryMonitor
    var decoder: EnvelopeDecoder
    // Sized for the largest datagram, resident only as far as datagrams reach.
    let buffer: LazyBuffer
    // When this endpoint first saw each spool file, and when it last took
    // one (see takeSpool).
    var firstSeen: [String: UInt64] = [:]
    var lastTake: UInt64 = 0
    // A look at a busy or unsettled spool file is scheduled.
    var recheckScheduled = false
    var removalWatch: RemovalWatch

    init(
        receiver: TransportReceiver, spoolMonitor: DirectoryMonitor, maximumEnvelopeSize: Int,
        watchedFiles: [RecordedPath]
    ) {
        self.receiver = receiver
        self.spoolMonitor = spoolMonitor
        self.decoder = EnvelopeDecoder(maximumPayloadSize: maximumEnvelopeSize)
        self.buffer = LazyBuffer(count: maximumEnvelopeSize + 1)
        self.removalWatch = RemovalWatch(watchedFiles)
    }
}
