import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// The send path: pipelined XADDs on pooled connections, one per node.
extension RedisStreamsTransport {
    // MARK: Posting

    /// Adds the envelope to its name's stream and returns once Redis acknowledged it.
    ///
    /// - Throws: ``TypedNotifications/TypedNotificationError/Code/unreachable`` when the server
    ///   cannot be reached or did not answer (the post may or may not have
    ///   been stored then: the message says), or
    ///   ``TypedNotifications/TypedNotificationError/Code/transportFailure`` for an error reply.
    @_spi(TransportAuthoring) public func send(_ message: TransportMessage) throws(TypedNotificationError) {
        let result = post(CollectionOfOne(message))
        if let failure = result.failure ?? result.undelivered.first?.error { throw failure }
    }

    /// Adds the envelopes to their streams in one pipelined write and waits
    /// for every acknowledgement.
    ///
    /// When the connection breaks on the way, `TransportBatchResult/sent`
    /// counts the acknowledged posts; those after may or may not have been
    /// stored. A server error reply stops the count at that post, although
    /// Redis went on with the pipelined posts after it.
    @_spi(TransportAuthoring) public func send(batch messages: [TransportMessage]) -> TransportBatchResult {
        post(messages)
    }

    /// What `send(batch:)` does, for any collection: one post makes no
    /// array of its own.
    private func post(_ messages: some Collection<TransportMessage>) -> TransportBatchResult {
        var result = TransportBatchResult()
        guard !messages.isEmpty else { return result }
        let forgotten = state.withLock { $0.shared.announcementsForgotten }
        if let failure = announceNewNames(of: messages) {
            result.failure = failure
            counters.add(messages.count, to: .failedPosts)
            return result
        }
        // A post that needed a new connection may have reached a server
        // that lost its announcements: they are made again after it (a
        // name found later is read from its first entry, this post too).
        defer {
            if state.withLock({ $0.shared.announcementsForgotten }) != forgotten { _ = announceNewNames(of: messages) }
        }
        var commands: [RoutedCommand] = []
        commands.reserveCapacity(messages.count + 1)
        let now = SystemClock.monotonicNanoseconds()
        var trims: [NotificationName] = []
        for message in messages {
            let encoded: EncodedNotification
            do throws(TypedNotificationError) {
                encoded = try core.envelope(of: message, kind: "Redis")
            } catch {
                result.failure = error
                break
            }
            commands.append(
                encoded.withUnsafeEnvelope { envelope in
                    RoutedCommand.post(
                        prefix: configuration.keyPrefix, name: message.name.rawValue,
                        maximumLength: configuration.maximumLength, envelope: envelope, trailer: confirmation)
                })
            if configuration.maximumAge != nil, !trims.contains(message.name) { trims.append(message.name) }
        }
        let posts = commands.count
        if let maximumAge = configuration.maximumAge {
            let due = state.withLock { state in
                trims.filter { name in
                    guard now >= state.shared.nextTrim[name, default: 0] else { return false }
                    state.shared.nextTrim[name] = now &+ 1_000_000_000
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
        let wait = configuration.failoverWait
        let routed = run(commands, failoverDeadline: failoverDeadline())
        let waited = routed.waitedForFailover ? " after waiting \(wait) for a failover (failoverWait)" : ""
        for (reply, confirmed) in zip(routed.replies.prefix(posts), routed.trailers) {
            if case .error(let text) = reply {
                let unavailable = ClusterRouter.isRefusedForNow(text)
                result.failure = TypedNotificationError(
                    code: text.hasPrefix("NOPERM")
                        ? .authenticationFailed : unavailable ? .unreachable : .transportFailure,
                    message: "Redis refused a post: \(text)\(unavailable ? waited : "")")
                break
            }
            if let problem = unconfirmed(confirmed) { result.undelivered.append((result.sent, problem)) }
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
                : waited.isEmpty
                    ? failure
                    : TypedNotificationError(
                        code: failure.code, message: "\(failure.message)\(waited): no master took over its slot",
                        cause: failure)
        }
        counters.add(result.sent, to: .posted)
        counters.add(posts - result.sent, to: .failedPosts)
        if !result.undelivered.isEmpty { counters.add(result.undelivered.count, to: .unconfirmedPosts) }
        return result
    }

    /// Why a stored post does not count as confirmed, given its `WAIT`
    /// reply; `nil` when it does (or no confirmation was asked for).
    private func unconfirmed(_ reply: RESPValue?) -> TypedNotificationError? {
        guard case .replicas(let count, let timeout) = configuration.acknowledgement else { return nil }
        let stored = "the post was stored by the master but"
        let after = "it may be lost if the master fails over; it is not sent again"
        switch reply {
        case .integer(let confirmed) where confirmed >= Int64(count):
            return nil
        case .integer(let confirmed):
            return TypedNotificationError(
                code: .notReplicated,
                message:
                    "\(stored) \(confirmed) of the \(count) replicas asked for confirmed it within \(timeout); \(after)"
            )
        case .error(let text):
            return TypedNotificationError(
                code: .notReplicated, message: "\(stored) Redis refused to wait for its replicas (\(text)); \(after)")
        default:
            return TypedNotificationError(
                code: .notReplicated, message: "\(stored) no replica confirmation came back; \(after)")
        }
    }

    /// Runs commands on the nodes of their keys (the one server, unless it
    /// is a cluster) on pooled connections, following redirections.
    func run(_ commands: [RoutedCommand], failoverDeadline: UInt64? = nil) -> RoutedReplies {
        let routed = router.run(
            commands, connection: takeConnection(to:), release: putBack(_:), failoverDeadline: failoverDeadline)
        if routed.redirections > 0 { counters.add(routed.redirections, to: .redirections) }
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
    func takeConnection(to node: RedisConnectionOptions) throws(TypedNotificationError) -> RedisConnection {
        let now = SystemClock.monotonicNanoseconds()
        let taken = try state.withLock { state throws(TypedNotificationError) -> RedisConnection? in
            _ = try state.lifecycle.opened(for: "post")
            if let connection = state.shared.idle[node]?.popLast() { return connection }
            if let backoff = state.shared.connectBackoff[node], let retry = backoff.retryAt, now < retry {
                throw TypedNotificationError(
                    code: .unreachable,
                    message: "Redis at \(node.redactedDescription) is unreachable; trying again in "
                        + "\((retry - now) / 1_000_000 + 1) ms (\(backoff.lastError))")
            }
            return nil
        }
        // One idle a while is checked first (one receive that does not
        // wait): its server may have died or closed it meanwhile.
        if let taken, now &- taken.idleSince < Self.idleCheckNanoseconds || taken.isOpenWhileIdle() { return taken }
        do throws(TypedNotificationError) {
            let connection = try RedisConnection.connect(node, clientName: "tn-poster")
            // A server that restarted, or a replica that took over, may
            // have lost announcements: every name is announced again.
            state.withLock { state in
                state.shared.connectBackoff[node] = nil
                state.shared.announced = [:]
                state.shared.announcementsForgotten += 1
            }
            counters.add(to: .reconnects)
            return connection
        } catch {
            state.withLock { $0.shared.connectBackoff[node, default: ConnectBackoff()].failed(at: now, error.message) }
            throw error
        }
    }

    /// How long a pooled connection may have been idle before it is checked
    /// for a close by its server before it is used (1 ms): posts in a burst
    /// pay nothing, and a post after a pause learns of a dead node without
    /// writing to it.
    static var idleCheckNanoseconds: UInt64 { 1_000_000 }

    func putBack(_ connection: RedisConnection) {
        guard !connection.isBroken else { return }
        connection.idleSince = SystemClock.monotonicNanoseconds()
        state.withLock { state in
            guard state.lifecycle.isOpen, state.shared.idle[connection.options, default: []].count < 4 else { return }
            state.shared.idle[connection.options, default: []].append(connection)
        }
    }
}
