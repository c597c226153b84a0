import NotificationPlatform
import Synchronization
@_spi(TransportAuthoring) import TypedNotifications

// The send path: pipelined XADDs on pooled connections, one per node.
extension RedisStreamsTransport {
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
        counters.add(result.sent, to: .posted)
        counters.add(posts - result.sent, to: .failedPosts)
        return result
    }

    /// Runs commands on the nodes of their keys (the one server, unless it
    /// is a cluster) on pooled connections, following redirections.
    func run(_ commands: [RoutedCommand]) -> RoutedReplies {
        let routed = router.run(commands, connection: takeConnection(to:), release: putBack(_:))
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
            counters.add(to: .reconnects)
            return connection
        } catch {
            state.withLock { $0.connectBackoff[node, default: ConnectBackoff()].failed(at: now, error.message) }
            throw error
        }
    }

    func putBack(_ connection: RedisConnection) {
        guard !connection.isBroken else { return }
        state.withLock { state in
            guard state.lifecycle.isOpen, state.idle[connection.options, default: []].count < 4 else { return }
            state.idle[connection.options, default: []].append(connection)
        }
    }
}
