import Dispatch
import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

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
/// - **Woken by the datagram itself:** on Linux the receiving thread sleeps in
///   its batch receive (`recvmmsg`), not in `epoll`, so the datagram that
///   wakes it is taken by the same call. Its other work reaches it through
///   its socket: a one-byte wake-up datagram of its own (at most one queued),
///   timers as the socket's receive timeout, and an empty datagram from a
///   poster that started spooling for it (see *Design decisions*). Apple
///   platforms wait in `kqueue`.
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
/// - **A slow observer is no different:** the endpoint hands each name's
///   observers no more than their buffers have room for, and keeps the rest
///   of that name, in order, until they have (at most 32 MiB a name: beyond
///   that the oldest go, each counted in `missed`) while its other names go
///   on. Once 128 MiB wait in all it receives nothing more, so the socket's
///   queue fills and posters spool.
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
/// - **Namespaces at the cost of a name:** an observer of a namespace
///   (`com.example.jobs`) registers once, in `namespaces/`; a post looks in
///   its name's directory and in each enclosing namespace's, and caches the
///   union, so in steady state it costs the same whether 0 or 100
///   namespaces are observed elsewhere. A name first posted after the
///   observer registered, by any process, reaches it.
/// - **Dead endpoints are reaped:** a process that died leaves a registry entry,
///   a socket file and perhaps a spool; the next post to it, and every new
///   transport for the sockets of the directory, finds it gone and removes them.
/// - **A removed registration is made again:** an entry of a live endpoint
///   that someone removed or moved (`rm -rf DIR/names/NAME`, `DIR/names`
///   or `DIR/namespaces` removed or moved whole) is found at once and made
///   again, so posts reach it again
///   (``SocketTransportStatistics/repairedEntries``), from new posters and
///   from posters that were running all along; an entry replaced by
///   another file of this user is made a link again. Every entry of an
///   endpoint is a hard link to one registration file, whose link count a
///   change event reports, so the look is one `fstat` whether it observes
///   one name or 10,000; the names are looked at only when the link count
///   says something changed, or the registry's folders moved. Not seen: a
///   removal offset, before the look, by a new link someone else made to
///   that file; a single name's or namespace's folder moved (`mv`) within
///   `names/` or `namespaces/`, or out of them on the same file system
///   (no link goes, and only those folders' own moves are watched); and
///   entries beyond the links a file system allows (65,000 on ext4), which
///   are files of their own. A repair that fails is tried again a second
///   later; an entry that cannot be made again at five looks in a row,
///   over at least four seconds, fails the transport, and its center ends
///   every observation with the error.
/// - **Idle costs nothing:** with nothing posted, the endpoint's thread
///   sleeps with no timeout, and the changes above wake it through the
///   process's path watcher, one thread that sleeps in the system's change
///   queue (see *Design decisions*).
/// - **A payload over the center's limit costs nothing:** receive buffers
///   are sized for the hub's `maximumPayloadSize` (``NotificationHub/init(endpoint:transport:maximumPayloadSize:)``); a
///   longer datagram is cut there by the kernel and refused from its header.
/// - **Safe by default:** the directory is 0700 and sockets 0600; symbolic links
///   and foreign files are refused, in the registry and in `sockets/`, and a
///   poster reaches the very socket file it checked; on Linux every datagram's
///   sender is checked with `SCM_CREDENTIALS` (user and process id) and
///   messages that claim another sender are dropped and counted. On Apple
///   platforms, which attach no credentials to a datagram, a sender is what it
///   claims, guarded by the directory's permissions (an owner-only directory
///   refuses a claim of another user).
/// - **Any directory length:** on Linux any path the file system takes; on
///   Apple platforms a directory of up to 222 bytes, which holds an app group
///   container's (see ``init(directory:configuration:)``).
///
/// Delivery is live: a process that is not running when a notification is
/// posted does not get it. Use the file-plus-signal transport for durability.
public final class SocketTransport: NotificationTransport {
    /// The shared directory, as an absolute path.
    package let directory: String
    /// Limits and policies.
    package let configuration: SocketTransportConfiguration
    /// The largest envelope one datagram carries on this system; a larger post
    /// fails with ``TypedNotificationError/Code/payloadTooLarge`` and nothing is sent.
    package let maximumEnvelopeSize: Int
    // The directory and this endpoint's socket file: if either goes, posters
    // can no longer reach this endpoint, and observers are told.
    let watchedFiles: [RecordedPath]

    /// This transport's socket, in the directory's `sockets` folder.
    package let socketPath: String

    let identifier: String
    let spoolDirectory: String
    /// This endpoint's spool folder, opened once without following a link
    /// at any step: it is listed, read and emptied through this, so a
    /// folder swapped for a link later (by anyone who may write the
    /// directory) leads nowhere else.
    let spoolFolder: FileDescriptor
    let receiveSocket: FileDescriptor
    // Where the loop's thread sleeps in its receive call (Linux): its
    // wake-up, and the receive `open` sets. Nil where it sleeps in the
    // system's event queue (Apple platforms).
    let wake: SocketWake?
    let receiveCall: LoopReceiveCall?
    // Its place among the process's few threads that sleep in their own
    // receive, given back once that thread has finished.
    let receivingThread: ThreadPermit?
    // The thread, the counters, and the lifecycle with what the threads share.
    let core: SocketCore
    // The registry cache and the endpoints, for the send in progress.
    let sending: SocketRoutingSlot
    // Bumped by every registration and removal, so that a post reads the
    // registry's change events only when something registered since: one
    // system call per post fewer. Owner-only directories only (a file others
    // could cut short must not be mapped); `nil` there and where it cannot be
    // made, and then every post reads the change events.
    let registryGeneration: SharedCounter?
    // What tells the loop that the directory, the socket or a registry
    // entry changed (see `watchDirectory`); let go at close.
    let watches = Locked(DirectoryWatches())
    // A look at the directory is queued on the loop (see `lookSoon`).
    let lookQueued = Atomic<Bool>(false)
    // The next look checks every registry entry, not only the link count
    // (see `watchDirectory`).
    let lookAtEveryEntry = Atomic<Bool>(false)
    // Read once: a getuid per datagram showed in profiles.
    let ownUser = SystemProcess.userID
    let ownProcess = SystemProcess.id
    // Datagrams one receive takes, and how many of them say the socket's
    // queue was full (see `receiveWaiting`).
    static let receiveBatch = 8

    /// The process's socket transports whose thread sleeps in its own
    /// receive: the first two; the rest share the loop group.
    static let receivingThreads = ThreadAllowance(limit: 2)

    /// The identifiers of this process's bound sockets: alive as long as
    /// they are here (a socket leaves after its file is unlinked), so a
    /// sweep never probes them. A process opening its thousandth hub
    /// otherwise connects to its own 999 others first.
    static let boundHere = Locked<Set<String>>([])
    let fullQueueSign = SocketTransport.fullQueueSign(batch: SocketTransport.receiveBatch)

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
    ///   ``TypedNotificationError/Code/pathTooLong`` for a directory longer
    ///   than the transport takes here (the message names the directory and
    ///   the limit), before anything is created. On Linux that is 3,871 bytes,
    ///   so that every path it makes below fits in `PATH_MAX` (a socket path
    ///   longer than `sun_path`'s is reached through a descriptor of its
    ///   directory); on Apple platforms 222 bytes, for a socket path of 252
    ///   (an address of `SOCK_MAXADDRLEN`), which holds an app group
    ///   container's.
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
        try SocketRegistry.checkDirectory(directory)
        try SharedDirectory.prepare(directory, sharing: configuration.sharing)
        try SharedDirectory.prepare(SocketRegistry.socketsDirectory(directory), sharing: configuration.sharing)
        // Another process's `rm -rf DIR/names` may remove it as soon as it
        // is made: made again, as registering does.
        try SharedDirectory.prepare(chain: [SocketRegistry.namesDirectory(directory)], sharing: configuration.sharing)
        try SharedDirectory.prepare(Spool.directory(directory), sharing: configuration.sharing)

        let socket: FileDescriptor
        do throws(Errno) {
            socket = try SystemCalls.datagramSocket().get()
        } catch {
            throw SharedDirectory.failure(error, "could not create a socket")
        }
        if case .failure(let error) = SystemCalls.bindSocket(socket, toSocketPath: socketPath) {
            throw SharedDirectory.failure(error, "could not bind \(socketPath)")
        }
        // The spool directory after the socket, as close unlinks the socket
        // first: so a spool with no socket beside it is of an endpoint that
        // closed or died, never of one being born, and a sweep removes it
        // (`sweepDeadSockets`). Posters reach an endpoint only through its
        // registry entries, links to a file in its spool directory, so none
        // finds its socket full before that directory exists.
        do throws(TypedNotificationError) {
            try SharedDirectory.prepare(spoolDirectory, sharing: configuration.sharing)
        } catch {
            _ = SystemCalls.removeFile(socketPath)
            throw error
        }
        switch SystemCalls.openFolder(["spool", identifier], under: directory) {
        case .success(let folder): spoolFolder = folder
        case .failure(let error):
            _ = SystemCalls.removeFile(socketPath)
            throw SharedDirectory.failure(error, "could not open the spool \(spoolDirectory)")
        }
        _ = SystemCalls.changeMode(socketPath, permissions: configuration.sharing.fileMode)
        let spoolDirectory = spoolDirectory
        let socketPath = socketPath
        let identifier = identifier
        Self.boundHere.withLock { _ = $0.insert(identifier) }
        func undo() {
            _ = SystemCalls.removeFile(socketPath)
            Self.boundHere.withLock { _ = $0.remove(identifier) }
            _ = SystemCalls.removeDirectory(spoolDirectory)
        }
        if configuration.usesKernelCredentials, case .failure(let error) = SystemCalls.enableCredentials(socket) {
            undo()
            throw SharedDirectory.failure(error, "could not ask for sender credentials on \(socketPath)")
        }
        // Large envelopes need a large send buffer; the kernel caps the request.
        _ = SystemCalls.setBufferSize(socket, send: true, bytes: SocketRegistry.largestEnvelope)
        let sendBuffer = (try? SystemCalls.sendBufferSize(socket).get()) ?? 212_992
        maximumEnvelopeSize = min(SocketRegistry.largestEnvelope, max(1024, sendBuffer - 1024))
        // On Linux the loop's thread sleeps in the receive itself: the
        // socket blocks (receives that must not wait say so), and a wake-up
        // is a datagram of the transport's own. Elsewhere, or should either
        // fail, it sleeps in the system's event queue. Only the process's
        // first few transports have such a thread; the others share a
        // thread of the loop group.
        var wake: SocketWake?
        let permit = configuration.sleepsInReceive ? Self.receivingThreads.take() : nil
        if permit != nil || (configuration.sleepsInReceive && configuration.sleepsInReceiveBeyondLimit),
            SystemCalls.enableWaitingReceives(socket, timeoutMilliseconds: 1_000)
        {
            wake = SocketWake(connectingTo: socketPath)
        }
        if wake == nil { permit?.release() }
        receivingThread = wake == nil ? nil : permit
        receiveSocket = socket
        watchedFiles = [RecordedPath(directory), RecordedPath(socketPath)].compactMap { $0 }

        // Receives, reads the spool and runs the jobs of the hub's executor.
        let loop: EventLoop
        let receiveCall = wake.map { _ in LoopReceiveCall() }
        do throws(TypedNotificationError) {
            if let wake, let receiveCall {
                loop = try SocketCore.makeLoop(
                    named: "TypedNotifications.SocketTransport", for: directory,
                    waiting: .receiving({ receiveCall($0) }, wake: { wake.wake() }))
            } else {
                loop = try SocketCore.sharedLoop(
                    named: "TypedNotifications.SocketTransport", for: directory, in: configuration.loopGroup)
            }
        } catch {
            undo()
            throw error
        }
        self.wake = wake
        self.receiveCall = receiveCall
        core = SocketCore(kind: "socket", loop: loop, shared: SocketState())
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
            ? try? SharedCounter.shared(
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
        snapshot.connectedEndpoints = state.withLock { $0.shared.peers.count }
        return snapshot
    }

    /// Socket transports carry envelopes.
    @_spi(TransportAuthoring) public var payloadForm: TransportPayloadForm { .encoded }

    /// The lifecycle and what the threads share, under the core's lock.
    var state: Locked<SocketCore.State> { core.state }

    /// Starts receiving on the transport's event-loop thread.
    @_spi(TransportAuthoring) public func open(as sender: NotificationSender, receiver: TransportReceiver)
        throws(TypedNotificationError)
    {
        try core.checkOpenable()
        // A thread that sleeps in its receive learns of the spool from
        // posters (see `receiveWaiting`); one that sleeps in the event
        // queue watches it, with inotify where there is one.
        var spoolMonitor: DirectoryMonitor?
        if receiveCall == nil {
            do throws(ChangeMonitorError) {
                let monitor = try DirectoryMonitor()
                _ = try monitor.watch(spoolDirectory)
                spoolMonitor = monitor
            } catch {
                throw SharedDirectory.failure(error, "could not watch the spool \(spoolDirectory)")
            }
        }
        let registration = try SocketRegistry.makeRegistration(
            in: spoolFolder, path: SocketRegistry.registrationPath(directory, identifier), sender: sender,
            sharing: configuration.sharing)
        do throws(TypedNotificationError) {
            guard case .success(let info) = SystemCalls.fileStatus(registration) else {
                throw TypedNotificationError(
                    code: .transportFailure, message: "could not inspect its registration file")
            }
            try core.open(sender) { $0.registration = info.identity }
        } catch {
            _ = SystemCalls.removeFile(SocketRegistry.registrationName, in: spoolFolder)
            throw error
        }
        // Before open returns, so that a transport that is up has reaped the
        // endpoints that were dead when it started, and never reaps later
        // ones behind its caller's back.
        sweepDeadSockets()
        if let spoolMonitor, let descriptor = spoolMonitor.pollDescriptor {
            // The process's hubs share one change queue: a spool change
            // that another one read comes by this call.
            spoolMonitor.whenChangedElsewhere = { [loop] in loop.markReadable(descriptor) }
        }
        let receiving = core.onThread(
            SocketReceiving(
                receiver: receiver, spoolMonitor: spoolMonitor, maximumEnvelopeSize: maximumEnvelopeSize,
                heldBytesPerName: configuration.heldBytesPerName, watchedFiles: watchedFiles,
                registration: registration, loop: loop))
        if let receiveCall {
            receiveCall.set { [weak self] timeout in self?.receiveWaiting(receiving, timeoutMilliseconds: timeout) }
        } else {
            do throws(Errno) {
                try registerReceive(receiving)
                // Without inotify (Apple platforms) the spool is watched
                // with the directory (see `watchDirectory`).
                if let spoolMonitor, let descriptor = spoolMonitor.pollDescriptor {
                    try loop.register(descriptor, exclusive: true) { [weak self] in self?.lookAtSpool(receiving) }.get()
                }
            } catch {
                throw SharedDirectory.failure(error, "could not watch \(socketPath)")
            }
        }
        try watchDirectory(receiving, spool: watchesSpool(besides: spoolMonitor))
        loop.start()
    }

    /// The transport's event loop, which also runs the jobs of its hub's
    /// executor, so a notification it receives reaches a handler there
    /// without waking another thread.
    @_spi(TransportAuthoring) public var deliveryExecutor: (any TaskExecutor & SerialExecutor)? { loop }

    /// Registers this endpoint for the name or namespace `selector` says:
    /// from now on posts of it (of every name in it) reach this transport,
    /// from every poster, running or new. A namespace is registered as one
    /// entry, in `namespaces/NS`, which a post of a name finds among the
    /// directories of its enclosing namespaces.
    ///
    /// - Throws: ``TypedNotificationError/Code/invalidName`` for a namespace
    ///   longer than 195 bytes (which holds only names of 196 bytes and more);
    ///   ``TypedNotificationError/Code/closed`` when the transport is not
    ///   open; a registry error when the entry cannot be made.
    @_spi(TransportAuthoring) public func subscribe(to selector: NotificationSelector) throws(TypedNotificationError) {
        let name = selector
        if case .namespace(let namespace) = selector, namespace.rawValue.utf8.count > SocketRegistry.longestNamespace {
            throw TypedNotificationError(
                code: .invalidName,
                message:
                    "the namespace \(namespace) is \(namespace.rawValue.utf8.count) bytes; the socket transport observes namespaces of up to \(SocketRegistry.longestNamespace) bytes: observe the name instead"
            )
        }
        let (sender, registration) = try state.withLock {
            (state: inout SocketCore.State) throws(TypedNotificationError) in
            (try state.lifecycle.opened(for: "subscribe"), state.shared.registration)
        }
        // The entry is made with no lock held; the center serializes
        // subscribing and unsubscribing a name. Linked before the name is
        // recorded (and, unsubscribing, unlinked after it is forgotten), so
        // the registration file never has fewer links than recorded names
        // unless someone removed an entry (see `checkRegistrations`).
        guard let registration else {
            throw TypedNotificationError(code: .closed, message: "subscribe on a socket transport that is not open")
        }
        let made = try SocketRegistry.register(
            identifier, for: name, in: directory, spool: spoolFolder, registration: registration, sender: sender,
            sharing: configuration.sharing)
        // After the entry exists: a poster that sees the new generation
        // finds the entry's creation among the change events it then reads.
        registryGeneration?.increment()
        let registered = state.withLock { state in
            guard state.lifecycle.isOpen else { return false }
            state.shared.subscribed.insert(name)
            if made == .unlinked { state.shared.unlinkedEntries.insert(name) }
            return true
        }
        guard registered else {
            // Closed meanwhile: `close` did not know of this entry.
            SocketRegistry.removeEntry(directory, name, identifier)
            throw TypedNotificationError(code: .closed, message: "subscribe on a socket transport that closed")
        }
    }

    /// Removes this endpoint's registration for the name or namespace
    /// `selector` says.
    @_spi(TransportAuthoring) public func unsubscribe(from selector: NotificationSelector) {
        let name = selector
        let removed = state.withLock { state in
            state.shared.unlinkedEntries.remove(name)
            return state.shared.subscribed.remove(name) != nil
        }
        guard removed else { return }
        SocketRegistry.removeEntry(directory, name, identifier)
        registryGeneration?.increment()
    }

    /// Unregisters every name, unlinks the socket, and stops the receiving
    /// thread without waiting for it: once that thread has finished (a
    /// handler running there returned), this endpoint's spool is removed
    /// and `NotificationTransport.whenClosed(_:)` calls back. Nothing waits to be sent.
    /// Idempotent.
    @_spi(TransportAuthoring) public func close() {
        let (closing, names) = core.close { shared in
            defer {
                shared.subscribed = []
                shared.peers = [:]
                shared.listedIn = [:]
            }
            return shared.subscribed
        }
        if case .alreadyClosed = closing { return }
        for watch in watches.withLock({ $0.close() }) { watch.cancel() }
        dropRoutingAfterClose()
        for name in names {
            SocketRegistry.removeEntry(directory, name, identifier)
        }
        if !names.isEmpty { registryGeneration?.increment() }
        SocketRegistry.removeSocket(directory, identifier)
        Self.boundHere.withLock { [identifier] in _ = $0.remove(identifier) }
        // Nothing waits for the loop's thread (it may be this one: a center
        // released while it delivered). Once it has finished: the loop
        // holds the receive call, which holds what receives (its socket's
        // reader, the registration file, the hub's receiver), so let go, or
        // a closed transport is never released; then the spool goes.
        let (receiveCall, receivingThread, directory, identifier, core) = (
            receiveCall, receivingThread, directory, identifier, core
        )
        closing.end(loop) {
            receiveCall?.clear()
            receivingThread?.release()
            SocketRegistry.removeSpool(directory, identifier)
            core.finishClosing()
        }
    }
}

/// Built on the transport skeleton: see ``TransportCore``.
extension SocketTransport {
    /// Runs `body` once what `close()` started is done.
    @_spi(TransportAuthoring) public func whenClosed(_ body: @escaping @Sendable () -> Void) {
        core.whenClosed(body)
    }

    /// The transport's thread.
    var loop: EventLoop { core.loop }

    /// Whether it is open now.
    var isOpen: Bool { core.isOpen }

    /// The live counters.
    var counters: Counters<SocketTransportStatistics> { core.counters }
}
