import Dispatch
@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// The send path: routing from the registry, datagrams, the full-socket wait and spooling.
extension SocketTransport {
    // MARK: - Posting

    /// An endpoint whose socket was full, and the descriptor to wait on.
    struct FullEndpoint: Sendable {
        var id: String
        var descriptor: CInt
    }

    /// What one attempt to hand a notification to an endpoint came to.
    enum Attempt {
        /// Sent, spooled, or the endpoint is dead (and was reaped).
        case taken
        /// Its socket is full and nothing is spooled for it: wait, then spool.
        case full
        /// It will not get this notification, and why.
        case undelivered(String)
    }

    /// Appends to the endpoint's spool while this poster has one there (so
    /// nothing overtakes it), else sends to its socket.
    func attempt(
        _ encoded: EncodedNotification, of message: TransportMessage, to peer: SocketPeer,
        in routing: inout SocketRouting
    ) -> Attempt {
        if peer.spool.isActive {
            // An endpoint that died while this poster spooled for it never
            // reads the spool, and no send to its socket says so: look
            // every few milliseconds, and before refusing a post for it.
            if peer.spool.livenessCheckIsDue(now: SystemClock.monotonicNanoseconds()),
                Self.endpointState(directory, peer.id) == .dead
            {
                reap(peer.id, in: &routing)
                return .taken
            }
            let appended = peer.spool.append(encoded, of: message)
            peer.nudgeIfSpoolStarted()
            switch appended {
            case .spooled:
                counters.add(to: .spooled)
                return .taken
            case .taken:
                break  // read by the endpoint: send directly again
            case .dropped:
                if Self.endpointState(directory, peer.id) == .dead {
                    reap(peer.id, in: &routing)
                    return .taken
                }
                counters.add(to: .dropped)
                return .undelivered("its spool is full")
            case .failed(let error):
                // Its spool went with it: an endpoint reaped by another
                // process while this poster appended.
                if Self.endpointState(directory, peer.id) == .dead {
                    reap(peer.id, in: &routing)
                    return .taken
                }
                return .undelivered(spoolFailed(error))
            }
        }
        switch peer.send(encoded) {
        case .sent:
            counters.add(to: .sent)
            return .taken
        case .wouldBlock:
            return .full
        case .dead:
            reap(peer.id, in: &routing)
            return .taken
        case .failed(let error):
            counters.add(to: .failedSends)
            counters.set(.lastSendError, to: Int(error.rawValue))
            return .undelivered("send failed: \(error)")
        }
    }

    /// Starts a spool file for an endpoint whose socket stayed full. Returns
    /// why it did not take the notification, or `nil`.
    func startSpool(_ encoded: EncodedNotification, of message: TransportMessage, for peer: SocketPeer)
        -> String?
    {
        let started = peer.spool.start(with: encoded, of: message)
        peer.nudgeIfSpoolStarted()
        switch started {
        case .spooled:
            counters.add(to: .spooled)
            return nil
        case .dropped:
            counters.add(to: .dropped)
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
    func waitThenSpool(_ encoded: EncodedNotification, of message: TransportMessage, for full: [FullEndpoint])
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
                        // Died while this poster waited: nothing to deliver.
                        if Self.endpointState(directory, peer.id) == .dead {
                            reap(peer.id, in: &sending.routing)
                        } else {
                            undelivered.append((endpoint.id, reason))
                        }
                    }
                case .full:
                    wait.stillFull(FullEndpoint(id: endpoint.id, descriptor: peer.descriptor.rawValue))
                }
            }
        }
    }

    func spoolFailed(_ error: Errno) -> String {
        counters.add(to: .dropped)
        counters.add(to: .failedSends)
        counters.set(.lastSendError, to: Int(error.rawValue))
        return "its spool could not be written: \(error)"
    }

    /// `label(pid)` from the endpoint's registry entry for `name` (or any
    /// directory this transport routes it for), else its identifier.
    func endpointLabel(_ id: String, of name: NotificationName?) -> String {
        let endpoint = undeliveredEndpoint(id, of: name)
        return endpoint.processID > 0 ? "\(endpoint.endpoint)(\(endpoint.processID)) [\(id)]" : id
    }

    /// The endpoint `id` as its registry entry names it: label and process,
    /// or only its socket's identifier when no entry names it any more.
    func undeliveredEndpoint(_ id: String, of name: NotificationName?) -> TypedNotificationError.UndeliveredEndpoint {
        var names: [NotificationSelector] = name.map { [.name($0)] } ?? []
        if let listed = state.withLock({ $0.shared.listedIn[id] }) { names.append(listed) }
        for candidate in names {
            let fields = SocketTransport.entryFields(SocketRegistry.entryPath(directory, candidate, id))
            if fields.processID > 0 { return .init(endpoint: fields.endpoint, processID: fields.processID) }
        }
        return .init(endpoint: id, processID: 0)
    }

    /// Makes sure the cached endpoints of `name` are current: rescans a
    /// registry directory it looks in (its own, its namespaces') only when
    /// that directory changed since the last look. The routing machine
    /// decides; this performs its actions.
    func refreshRoute(for name: NotificationName, in routing: inout SocketRouting) {
        guard routing.machine.check(name, generation: registryGeneration?.value) == .readChanges else { return }
        let events: SocketRoutingStateMachine<SocketPeer>.ChangeEvents =
            routing.monitor.changes().map { .changed($0) } ?? .overflowed
        routing.machine.changesRead(events, lostWatches: routing.monitor.takeLostWatches(), for: name)
        while let (selector, action) = routing.machine.nextScan(for: name) {
            switch action {
            case .watchRegistry:
                let registry = SocketRegistry.namespacesDirectory(directory)
                var index: Int?
                if (try? SharedDirectory.prepare(registry, sharing: configuration.sharing)) != nil {
                    index = try? routing.monitor.watch(registry)
                }
                routing.machine.watchedRegistry(as: index, for: selector)
            case .watch: scan(selector, watching: true, in: &routing)
            case .list: scan(selector, watching: false, in: &routing)
            }
        }
    }

    /// Lists one registry directory, watching it first when `watching`,
    /// and connects to the endpoints new in it.
    private func scan(_ selector: NotificationSelector, watching: Bool, in routing: inout SocketRouting) {
        if watching {
            let nameDirectory = SocketRegistry.nameDirectory(directory, selector)
            var index: Int?
            switch selector {
            case .name:
                if (try? SharedDirectory.prepare(nameDirectory, sharing: configuration.sharing)) != nil {
                    index = try? routing.monitor.watch(nameDirectory)
                }
            case .namespace:
                // Made by its observers only: one not there yet is looked for
                // again when `namespaces/` changes.
                index = try? routing.monitor.watch(nameDirectory)
            }
            routing.machine.watched(selector, as: index)
        }
        counters.add(to: .registryScans)
        var endpoints: [String] = []
        for entry in SocketRegistry.entries(of: selector, in: directory, sharing: configuration.sharing) {
            switch entry {
            case .ignored: counters.add(to: .ignoredRegistryFiles)
            case .endpoint(let id): endpoints.append(id)
            }
        }
        for id in routing.machine.listed(selector, endpoints: endpoints) {
            let connection: SocketRoutingStateMachine<SocketPeer>.Connection
            switch SocketPeer.connect(
                id,
                path: SocketRegistry.socketPath(directory, id),
                directory: directory,
                poster: identifier,
                sharing: configuration.sharing,
                spoolLimit: configuration.spoolLimitPerEndpoint
            ) {
            case .connected(let peer): connection = .connected(peer)
            case .dead: connection = .dead
            case .refused:
                counters.add(to: .refusedEndpoints)
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
    func reap(_ id: String, in routing: inout SocketRouting) {
        for name in routing.machine.endpointDied(id) {
            reapEntry(id, of: name)
        }
        SocketRegistry.removeSocket(directory, id)
        SocketRegistry.removeSpool(directory, id)
    }

    func reapEntry(_ id: String, of name: NotificationSelector) {
        if case .success = SocketRegistry.removeEntry(directory, name, id) {
            counters.add(to: .reapedEndpoints)
            // A removal, as an unsubscribe is: posters that cached the
            // dead endpoint's route read the registry's changes again.
            registryGeneration?.increment()
        }
        SocketRegistry.removeSocket(directory, id)
        SocketRegistry.removeSpool(directory, id)
    }

    /// Sends the envelope to every endpoint registered for its name, or to
    /// their spools. Waits only when a socket is full and nothing is spooled
    /// for that endpoint yet: at most
    /// ``SocketTransportConfiguration/fullSocketWait`` for all of them, without
    /// holding the transport's lock.
    ///
    /// - Throws: ``TypedNotificationError/Code/payloadTooLarge`` when the envelope
    ///   is larger than one datagram carries (`maximumEnvelopeSize`), before
    ///   anything is sent; ``TypedNotificationError/Code/closed`` after `close()`;
    ///   ``TypedNotificationError/Code/undelivered`` when some endpoints did not
    ///   take it (their spool is over the limit or could not be written): every
    ///   other endpoint has it, and the error names those that do not;
    ///   ``TypedNotificationError/Code/transportFailure`` when another send is
    ///   in progress on this transport (its center never does that: it makes
    ///   one send at a time). A send makes its system calls with no lock
    ///   held, so statistics, subscribing and closing never wait for it.
    @_spi(TransportAuthoring) public func send(_ message: TransportMessage) throws(TypedNotificationError) {
        let encoded = try core.envelope(of: message, kind: "socket")
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
            counters.add(to: .fullSocketWaits)
            undelivered += waitThenSpool(encoded, of: message, for: full)
        }
        guard !undelivered.isEmpty else { return }
        let endpoints = undelivered.map { undeliveredEndpoint($0.id, of: message.name) }
        let named = zip(endpoints, undelivered).map { endpoint, entry in
            endpoint.processID > 0 ? "\(endpoint.endpoint)(\(endpoint.processID)) [\(entry.id)]" : entry.id
        }
        let reasons = zip(named, undelivered).map { "\($0) (\($1.reason))" }.joined(separator: ", ")
        var error = TypedNotificationError(
            code: .undelivered,
            message:
                "\(message.name) was posted, but \(undelivered.count == 1 ? "one endpoint" : "\(undelivered.count) endpoints") did not take it: \(reasons); they will see it as missed"
        )
        error.undeliveredEndpoints = endpoints
        throw error
    }

    /// Publishes what the send changed for statistics, flush and error
    /// messages, and lets the routing go; after a close, closes its sockets.
    private func endSend() {
        let changes = sending.routing.machine.takeChanges()
        let isClosed = state.withLock { state in
            if let changes {
                state.shared.peers = changes.peers
                state.shared.listedIn = changes.listedIn
            }
            return state.lifecycle.isClosed
        }
        sending.release()
        if isClosed { dropRoutingAfterClose() }
    }

    /// Closes the sockets to every endpoint, unless a send holds them: that
    /// send does it when it ends (it looks at the phase after letting them go).
    func dropRoutingAfterClose() {
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
        let peers = state.withLock { state in state.shared.peers.values.map { (peer: $0, spool: $0.spool.file) } }
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
}
