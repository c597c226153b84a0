import Dispatch
import Foundation
import NotificationPlatform

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Limits and policies of a ``SocketTransport``.
public struct SocketTransportConfiguration: Sendable {
    /// Who besides the owner may use the directory. Default: ``DirectorySharing/ownerOnly``.
    public var sharing: DirectorySharing
    /// How many notifications a poster holds for one endpoint that cannot take
    /// more (a suspended or slow process) before it drops the oldest. Default
    /// 16,384: a burst of that many posts reaches a reader that is slower than
    /// the poster, at a cost of up to that many envelopes in memory per endpoint
    /// (a few MB for small payloads).
    public var pendingLimitPerEndpoint: Int
    /// Whether a post also reaches observers of this same transport. Default `true`.
    public var deliversToSelf: Bool

    /// Creates a configuration.
    public init(
        sharing: DirectorySharing = .ownerOnly,
        pendingLimitPerEndpoint: Int = 16_384,
        deliversToSelf: Bool = true
    ) {
        self.sharing = sharing
        self.pendingLimitPerEndpoint = pendingLimitPerEndpoint
        self.deliversToSelf = deliversToSelf
    }
}

/// Counters of a ``SocketTransport``: what it sent, held back, dropped,
/// refused and cleaned up.
public struct SocketTransportStatistics: Hashable, Sendable {
    /// Datagrams sent to endpoints, including this transport's own.
    public var sent: Int
    /// Notifications held for an endpoint that could not take more at once.
    public var queued: Int
    /// Held notifications dropped because an endpoint's queue was full.
    public var droppedFromQueue: Int
    /// Envelopes received and handed to the center.
    public var received: Int
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
    /// Sends that failed for a reason other than a full or dead endpoint; the
    /// receiver sees the gap in sequence numbers as missed.
    public var failedSends: Int
    /// The `errno` of the last such failure, or 0.
    public var lastSendError: Int32
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
///   on Linux), so a post to N endpoints costs N non-blocking sends.
/// - **Never blocked by a slow reader:** when an endpoint cannot take more (a
///   suspended process), its notifications queue in this process, in order, and
///   go out when it can; beyond ``SocketTransportConfiguration/pendingLimitPerEndpoint``
///   the oldest are dropped, and the receiver learns how many it missed.
/// - **Dead endpoints are reaped:** a process that died leaves a registry entry
///   and a socket file; the next post finds it refused and removes both, once.
/// - **Safe by default:** the directory is 0700 and sockets 0600; symbolic links
///   and foreign files are refused; on Linux every datagram's sender is checked
///   with `SCM_CREDENTIALS` and other users' messages are dropped and counted.
///
/// Delivery is live: a process that is not running when a notification is
/// posted does not get it. Use the file-plus-signal transport for durability.
public final class SocketTransport: NotificationTransport {
    /// The shared directory.
    public let directory: String
    /// Limits and policies.
    public let configuration: SocketTransportConfiguration
    /// The largest envelope one datagram carries on this system; a larger post
    /// fails with ``TypedNotificationError/Code/payloadTooLarge`` and nothing is sent.
    public let maximumEnvelopeSize: Int

    /// This transport's socket, in the directory's `sockets` folder.
    public let socketPath: String

    private let identifier: String
    private let receiveSocket: FileDescriptor
    private let wakePipe: System.Pipe
    private let counters = SocketCounters()
    private let state: Locked<SocketState>
    private let ioFinished = DispatchSemaphore(value: 0)

    /// A directory for this user that survives as long as the login session:
    /// `$XDG_RUNTIME_DIR/typed-notifications`, else `/tmp/typed-notifications-<uid>`.
    public static var defaultDirectory: String {
        if let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") {
            return runtime + "/typed-notifications"
        }
        return "/tmp/typed-notifications-\(SystemProcess.userID)"
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
        let directory = directory.count > 1 && directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        self.directory = directory
        self.configuration = configuration
        identifier = SocketRegistry.makeIdentifier()
        socketPath = SocketRegistry.socketPath(directory, identifier)
        let limit = System.maximumSocketPathLength
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

        let socket: FileDescriptor
        do throws(Errno) {
            socket = try System.datagramSocket().get()
        } catch {
            throw SharedDirectory.failure(error, "could not create a socket")
        }
        if case .failure(let error) = System.bindSocket(socket, toSocketPath: socketPath) {
            throw SharedDirectory.failure(error, "could not bind \(socketPath)")
        }
        _ = System.changeMode(socketPath, mode: configuration.sharing.fileMode)
        if case .failure(let error) = System.enableCredentials(socket) {
            _ = System.removeFile(socketPath)
            throw SharedDirectory.failure(error, "could not ask for sender credentials on \(socketPath)")
        }
        // Large envelopes need a large send buffer; the kernel caps the request.
        _ = System.setBufferSize(socket, send: true, bytes: SocketRegistry.largestEnvelope)
        let sendBuffer = (try? System.sendBufferSize(socket).get()) ?? 212_992
        maximumEnvelopeSize = min(SocketRegistry.largestEnvelope, max(1024, sendBuffer - 1024))
        receiveSocket = socket

        do throws(Errno) {
            wakePipe = try System.makePipe().get()
        } catch {
            _ = System.removeFile(socketPath)
            throw SharedDirectory.failure(error, "could not create a wake-up pipe")
        }
        let monitor: DirectoryMonitor
        do {
            monitor = try DirectoryMonitor()
        } catch {
            _ = System.removeFile(socketPath)
            throw SharedDirectory.failure(error, "could not watch the registry")
        }
        state = Locked(SocketState(monitor: monitor))
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

    /// Starts receiving on a thread of the transport's own.
    public func open(as sender: NotificationSender, receiver: TransportReceiver) throws(TypedNotificationError) {
        try state.withLock { (state: inout SocketState) throws(TypedNotificationError) in
            guard case .created = state.phase else {
                throw TypedNotificationError(code: .closed, message: "this socket transport was already opened")
            }
            state.phase = .open(sender)
        }
        let thread = Thread { [self] in
            self.runIO(receiver: receiver)
        }
        thread.name = "TypedNotifications.SocketTransport"
        thread.start()
    }

    /// Registers this endpoint for `name`: from now on posts of it reach this transport.
    public func subscribe(to name: NotificationName) throws(TypedNotificationError) {
        try state.withLock { (state: inout SocketState) throws(TypedNotificationError) in
            guard case .open(let sender) = state.phase else {
                throw TypedNotificationError(code: .closed, message: "subscribe on a socket transport that is not open")
            }
            try SocketRegistry.register(
                identifier,
                for: name,
                in: directory,
                sender: sender,
                sharing: configuration.sharing
            )
            state.subscribed.insert(name)
        }
    }

    /// Removes this endpoint's registration for `name`.
    public func unsubscribe(from name: NotificationName) {
        state.withLock { state in
            guard state.subscribed.remove(name) != nil else { return }
            _ = System.removeFile(SocketRegistry.entryPath(directory, name, identifier))
        }
    }

    /// Sends the envelope to every endpoint registered for its name, without
    /// blocking.
    ///
    /// - Throws: ``TypedNotificationError/Code/payloadTooLarge`` when the envelope
    ///   is larger than one datagram carries (``maximumEnvelopeSize``), before
    ///   anything is sent; ``TypedNotificationError/Code/closed`` after ``close()``.
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
        let mustWake = try state.withLock { (state: inout SocketState) throws(TypedNotificationError) -> Bool in
            guard case .open = state.phase else {
                throw TypedNotificationError(
                    code: .closed, message: "post of \(message.name) to a closed socket transport")
            }
            refreshRoute(for: message.name, in: &state)
            var mustWake = false
            for id in state.routes[message.name] ?? [] {
                guard let peer = state.peers[id] else { continue }
                if deliver(encoded, to: peer, in: &state) { mustWake = true }
            }
            return mustWake
        }
        if mustWake { wakeIO() }
    }

    /// Waits until every notification held for a slow endpoint has been sent
    /// (or its endpoint found dead), or `timeout` passes. Returns whether
    /// nothing is held any more. Call before exiting a process that posted,
    /// so that a suspended observer still gets what was posted while it slept.
    public func flush(timeout: Duration) -> Bool {
        let waiter = DispatchSemaphore(value: 0)
        let empty = state.withLock { state -> Bool in
            if state.peers.values.allSatisfy({ $0.queue.isEmpty }) { return true }
            state.flushWaiters.append(waiter)
            return false
        }
        if empty { return true }
        return waiter.wait(timeout: .now() + .nanoseconds(Int(clamping: timeout.clampedNanoseconds))) == .success
    }

    /// Unregisters every name, unlinks the socket, and stops the receiving
    /// thread. Idempotent.
    public func close() {
        enum Before { case alreadyClosed, created, open }
        let before = state.withLock { state -> Before in
            let before: Before
            switch state.phase {
            case .closed: return .alreadyClosed
            case .created: before = .created
            case .open: before = .open
            }
            state.phase = .closed
            for name in state.subscribed {
                _ = System.removeFile(SocketRegistry.entryPath(directory, name, identifier))
            }
            state.subscribed = []
            state.peers = [:]
            for waiter in state.flushWaiters { waiter.signal() }
            state.flushWaiters = []
            return before
        }
        guard before != .alreadyClosed else { return }
        _ = System.removeFile(socketPath)
        guard before == .open else { return }
        wakeIO()
        // The receiving thread may itself end up here (a center released while
        // it delivered); it must not wait for itself.
        if state.withLock({ $0.ioThread })?.isCurrent != true {
            ioFinished.wait()
        }
    }

    // MARK: - Posting

    /// Sends to one endpoint or queues for it. Returns whether the I/O thread
    /// must start watching it for writability.
    private func deliver(_ encoded: EncodedNotification, to peer: SocketPeer, in state: inout SocketState) -> Bool {
        switch peer.queue.post(encoded) {
        case .queued:
            counters.queued.add(1, ordering: .relaxed)
            return false
        case .queuedDroppingOldest:
            counters.queued.add(1, ordering: .relaxed)
            counters.droppedFromQueue.add(1, ordering: .relaxed)
            return false
        case .sendNow:
            break
        }
        switch peer.send(encoded) {
        case .sent:
            counters.sent.add(1, ordering: .relaxed)
            return false
        case .wouldBlock:
            counters.queued.add(1, ordering: .relaxed)
            return peer.queue.blocked(encoded)
        case .dead:
            reap(peer.id, in: &state)
            return false
        case .failed(let error):
            counters.failedSends.add(1, ordering: .relaxed)
            counters.lastSendError.store(error.rawValue, ordering: .relaxed)
            return false
        }
    }

    /// Makes sure the cached endpoints of `name` are current: rescans its
    /// registry directory only when it changed since the last look.
    private func refreshRoute(for name: NotificationName, in state: inout SocketState) {
        if let changed = state.monitor.changes() {
            for index in changed {
                if let changedName = state.watchedNames[index] { state.routes[changedName] = nil }
            }
        } else {
            state.routes = [:]
        }
        guard state.routes[name] == nil else { return }
        let nameDirectory = SocketRegistry.nameDirectory(directory, name)
        if state.watchIndex[name] == nil {
            // Watch before scanning, so a change during the scan is not missed.
            guard (try? SharedDirectory.prepare(nameDirectory, sharing: configuration.sharing)) != nil,
                let index = try? state.monitor.watch(nameDirectory)
            else {
                state.routes[name] = []
                return
            }
            state.watchIndex[name] = index
            state.watchedNames[index] = name
        }
        var ids: [String] = []
        counters.registryScans.add(1, ordering: .relaxed)
        for entry in SocketRegistry.entries(of: name, in: directory, sharing: configuration.sharing) {
            switch entry {
            case .ignored:
                counters.ignoredRegistryFiles.add(1, ordering: .relaxed)
            case .endpoint(let id):
                if id == identifier && !configuration.deliversToSelf { continue }
                if state.peers[id] == nil {
                    switch SocketPeer.connect(
                        id, path: SocketRegistry.socketPath(directory, id), limit: configuration.pendingLimitPerEndpoint
                    ) {
                    case .connected(let peer): state.peers[id] = peer
                    case .dead:
                        reapEntry(id, of: name)
                        continue
                    case .unreachable:
                        continue
                    }
                }
                ids.append(id)
            }
        }
        state.routes[name] = ids
        // Close sockets to endpoints no name routes to any more (they
        // unsubscribed), unless notifications still wait for them.
        let routed = Set(state.routes.values.joined())
        for (id, peer) in state.peers where !routed.contains(id) && peer.queue.isEmpty {
            state.peers[id] = nil
        }
    }

    /// Removes a dead endpoint: its entries under every name this transport
    /// routes, and its socket file. Each removal is counted only by the
    /// transport whose `unlink` succeeded, so racing posters reap once.
    private func reap(_ id: String, in state: inout SocketState) {
        state.peers[id] = nil
        for (name, ids) in state.routes where ids.contains(id) {
            state.routes[name] = ids.filter { $0 != id }
            reapEntry(id, of: name)
        }
        _ = System.removeFile(SocketRegistry.socketPath(directory, id))
    }

    private func reapEntry(_ id: String, of name: NotificationName) {
        if case .success = System.removeFile(SocketRegistry.entryPath(directory, name, id)) {
            counters.reapedEndpoints.add(1, ordering: .relaxed)
        }
        _ = System.removeFile(SocketRegistry.socketPath(directory, id))
    }

    // MARK: - The I/O thread

    private func wakeIO() {
        var byte: UInt8 = 1
        _ = withUnsafeBytes(of: &byte) { System.writeAll(wakePipe.writeEnd, $0) }
    }

    private func runIO(receiver: TransportReceiver) {
        state.withLock { $0.ioThread = ThreadIdentity.current }
        defer { ioFinished.signal() }
        var decoder = EnvelopeDecoder(maximumPayloadSize: maximumEnvelopeSize)
        var buffer = [UInt8](repeating: 0, count: maximumEnvelopeSize + 1)
        var scratch = [UInt8](repeating: 0, count: 64)
        while true {
            let watched = state.withLock { state -> [(id: String, descriptor: CInt)]? in
                guard case .open = state.phase else { return nil }
                return state.peers.values.filter { !$0.queue.isEmpty }.map { ($0.id, $0.descriptor.rawValue) }
            }
            guard let watched else { return }
            var descriptors = [
                pollfd(fd: receiveSocket.rawValue, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wakePipe.readEnd.rawValue, events: Int16(POLLIN), revents: 0),
            ]
            descriptors += watched.map { pollfd(fd: $0.descriptor, events: Int16(POLLOUT), revents: 0) }
            guard case .success = System.pollDescriptors(&descriptors, timeout: -1) else { continue }
            if descriptors[1].revents != 0 {
                _ = scratch.withUnsafeMutableBytes { System.readBytes(wakePipe.readEnd, into: $0) }
            }
            if descriptors[0].revents != 0 {
                receiveAll(into: &buffer, decoder: &decoder, receiver: receiver)
            }
            let ready = zip(watched, descriptors.dropFirst(2)).filter { $0.1.revents != 0 }.map(\.0.id)
            if !ready.isEmpty {
                state.withLock { state in
                    for id in ready { drain(id, in: &state) }
                    if state.peers.values.allSatisfy({ $0.queue.isEmpty }) {
                        for waiter in state.flushWaiters { waiter.signal() }
                        state.flushWaiters = []
                    }
                }
            }
        }
    }

    /// Sends what is held for an endpoint until it would block again.
    private func drain(_ id: String, in state: inout SocketState) {
        guard let peer = state.peers[id] else { return }
        while let next = peer.queue.next {
            switch peer.send(next) {
            case .sent:
                counters.sent.add(1, ordering: .relaxed)
                peer.queue.removeNext()
            case .wouldBlock:
                return
            case .dead:
                reap(id, in: &state)
                return
            case .failed(let error):
                counters.failedSends.add(1, ordering: .relaxed)
                counters.lastSendError.store(error.rawValue, ordering: .relaxed)
                peer.queue.removeNext()
            }
        }
    }

    private func receiveAll(into buffer: inout [UInt8], decoder: inout EnvelopeDecoder, receiver: TransportReceiver) {
        let ownUser = SystemProcess.userID
        while true {
            let result = buffer.withUnsafeMutableBytes { System.receiveDatagram(receiveSocket, into: $0) }
            guard case .success(let datagram) = result else { return }
            guard !datagram.truncated else {
                counters.refusedMalformed.add(1, ordering: .relaxed)
                continue
            }
            if let user = datagram.senderUserID {
                let allowed =
                    user == ownUser
                    || (configuration.sharing == .group && datagram.senderGroupID == SystemProcess.groupID)
                guard allowed else {
                    counters.refusedForeignSender.add(1, ordering: .relaxed)
                    continue
                }
            } else if System.credentialsSupported {
                counters.refusedForeignSender.add(1, ordering: .relaxed)
                continue
            }
            let message: TransportMessage
            do {
                message = try decoder.decode(Array(buffer[..<datagram.length]))
            } catch {
                counters.refusedMalformed.add(1, ordering: .relaxed)
                continue
            }
            if let user = datagram.senderUserID, message.sender.userID != user {
                // The envelope claims another user than the one who sent it.
                counters.refusedForeignSender.add(1, ordering: .relaxed)
                continue
            }
            counters.received.add(1, ordering: .relaxed)
            receiver.receive(message)
        }
    }
}
