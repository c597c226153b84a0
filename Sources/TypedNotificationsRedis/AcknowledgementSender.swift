@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Sends a durable identity's acknowledgements: receipts queue them from any
/// thread, and jobs on the transport's event loop send them together, one
/// `XACK` per stream, on connections of their own (one per cluster node).
///
/// Apart from the transport, so a receipt released late (after the
/// transport was closed, or while it is being deinitialized) holds this and
/// not the transport.
final class AcknowledgementSender: Sendable {
    private let identity: String
    private let router: ClusterRouter
    private let counters: Counters<RedisStreamsStatistics>
    private let loop: EventLoop
    private let queue = Locked(Queue())
    // Used only by jobs of the loop, which run one at a time: on its
    // thread, and after it stopped on the thread that drains its jobs.
    private let connections = Locked<[RedisConnectionOptions: RedisConnection]>([:])

    private struct Queue {
        var pending: [([UInt8], StreamEntryID)] = []
        var flushQueued = false
        // Set by `close()`: what is released after it is not acknowledged.
        var closed = false
    }

    init(identity: String, router: ClusterRouter, counters: Counters<RedisStreamsStatistics>, loop: EventLoop) {
        self.identity = identity
        self.router = router
        self.counters = counters
        self.loop = loop
    }

    /// Queues the acknowledgement of entry `id` of stream `key`; the loop
    /// sends what is queued together. Once closed, does nothing: the entry
    /// stays pending and comes again, marked, on the identity's next run.
    func acknowledge(_ id: StreamEntryID, key: [UInt8]) {
        let first = queue.withLock { queue -> Bool in
            guard !queue.closed else { return false }
            queue.pending.append((key, id))
            defer { queue.flushQueued = true }
            return !queue.flushQueued
        }
        if first { loop.execute { [self] in flush() } }
    }

    /// The transport is closing, on the loop: refuses acknowledgements from
    /// now on, sends what is queued, and closes the connection.
    func finish() {
        queue.withLock { $0.closed = true }
        flush()
        connections.withLock { $0 = [:] }
    }

    /// Sends the queued acknowledgements. On the loop. What fails stays
    /// queued and is tried again in a second, unless closed: a broken
    /// connection, and an error reply other than a missing group (a slot
    /// whose nodes still disagree on its owner and send the command back and
    /// forth past the redirection limit, `TRYAGAIN`, `LOADING`). Where the
    /// group or stream is gone there is nothing left to acknowledge.
    func flush() {
        let pending = queue.withLock { queue in
            defer {
                queue.pending.removeAll()
                queue.flushQueued = false
            }
            return queue.pending
        }
        guard !pending.isEmpty else { return }
        var byKey: [[UInt8]: [StreamEntryID]] = [:]
        for (key, id) in pending { byKey[key, default: []].append(id) }
        let batches = Array(byKey)
        let commands = batches.map { key, ids in
            RoutedCommand(
                key: key, [Array("XACK".utf8), key, Array(identity.utf8)] + ids.map { Array($0.description.utf8) })
        }
        let routed = router.run(commands, connection: liveConnection(to:), release: { _ in })
        if routed.redirections > 0 { counters.add(routed.redirections, to: .redirections) }
        var again: [([UInt8], StreamEntryID)] = []
        for (index, (key, ids)) in batches.enumerated() {
            switch index < routed.replies.count ? routed.replies[index] : nil {
            case .integer(let count):
                counters.add(Int(count), to: .acknowledged)
            case .error(let text) where text.hasPrefix("NOGROUP") || text.hasPrefix("WRONGTYPE"):
                continue
            default:
                // No reply (those acknowledged already are acknowledged
                // again: harmless), or an error reply.
                again += ids.map { (key, $0) }
            }
        }
        if routed.failure != nil { connections.withLock { $0 = $0.filter { !$0.value.isBroken } } }
        guard !again.isEmpty else { return }
        let retry = queue.withLock { queue -> Bool in
            guard !queue.closed else { return false }
            queue.pending = again + queue.pending
            defer { queue.flushQueued = true }
            return !queue.flushQueued
        }
        if retry { loop.schedule(after: 1_000_000_000) { [self] in flush() } }
    }

    /// Runs `commands` now on this sender's connections and returns their
    /// replies. On the loop. For a durable reader's group-counter raise,
    /// which must not ride on the reader's own connection (see
    /// `RedisStreamsTransport.raiseGroupCounter(of:)`).
    func runNow(_ commands: [RoutedCommand]) -> RoutedReplies {
        let routed = router.run(commands, connection: liveConnection(to:), release: { _ in })
        if routed.redirections > 0 { counters.add(routed.redirections, to: .redirections) }
        if routed.failure != nil { connections.withLock { $0 = $0.filter { !$0.value.isBroken } } }
        return routed
    }

    private func liveConnection(to node: RedisConnectionOptions) throws(TypedNotificationError) -> RedisConnection {
        if let existing = connections.withLock({ $0[node] }), !existing.isBroken { return existing }
        let made = try RedisConnection.connect(node, clientName: "tn-acknowledger")
        connections.withLock { $0[node] = made }
        return made
    }
}
