import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// The send path: encoding before the line, the line's leader, and the transport's batch.
extension NotificationHub {
    /// What the line carries for `notification`: its envelope, encoded and
    /// checksummed before it gets in line, or the value itself.
    func outboundPayload<N: DarwinPayload>(_ notification: N, named name: NotificationName)
        throws(TypedNotificationError) -> OutboundPayload
    {
        guard transport.payloadForm == .encoded else { return .value(notification) }
        return .encoded(
            try PendingEnvelope(
                name: name,
                sender: sender,
                maximumPayloadSize: configuration.maximumPayloadSize,
                payloadSizeHint: notification.payloadSizeHint
            ) { buffer in
                try notification.encodePayload(into: &buffer)
            })
    }

    /// Gets in line behind the post being sent, and blocks until this post
    /// was sent by the leader or until it is this thread's turn to lead.
    func waitInLine(_ payload: consuming OutboundPayload, named name: NotificationName)
        throws(TypedNotificationError)
    {
        // The common case, nobody sending: lead at once, with no waiter made.
        switch outbound.withLock({ $0.post(named: name) }) {
        case .closed:
            throw TypedNotificationError(code: .closed, message: "post of \(name) to a closed center")
        case .send(let sequence):
            return try lead(OutboundStamped(post: consume payload, name: name, sequence: sequence))
        case .busy:
            break
        }
        let waiter = OutboundWaiter()
        switch outbound.withLock({ $0.enqueue(payload, named: name, waiter: waiter) }) {
        case .closed:
            throw TypedNotificationError(code: .closed, message: "post of \(name) to a closed center")
        case .send(let sequence):
            return try lead(OutboundStamped(post: consume payload, name: name, sequence: sequence))
        case .queued:
            // The line holds it now; this copy goes, so the leader's is the only one.
            _ = consume payload
        }
        switch waiter.wait() {
        case .sent:
            return
        case .failed(let error):
            throw error
        case .lead:
            try lead(outbound.withLock { $0.lead() })
        }
    }

    /// Sends the leader's own post, then the batches that queued up
    /// meanwhile, with no lock held while the transport works, and wakes
    /// each waiting poster with its outcome. Returns the leader's own.
    func lead(_ own: consuming OutboundStamped) throws(TypedNotificationError) {
        var outcome = OutboundOutcome.sent
        let sending = message(&own)
        do throws(TypedNotificationError) {
            try transport.send(sending)
        } catch {
            outcome = .failed(error)
        }
        Anatomy.mark(.sent, key: sending.timestamp.monotonicNanoseconds)
        var sent = 1
        if case .failed(let error) = outcome, !error.code.meansSent { sent = 0 }
        // Every post of the batches that follow has a waiter of its own.
        var noneOfOurs: OutboundOutcome?
        drain(outbound.withLock { $0.finished(sent: sent) }, own: &noneOfOurs)
        if case .failed(let error) = outcome { throw error }
    }

    /// The leader's own post came first in `batch`.
    func lead(_ batch: consuming [OutboundStamped]) throws(TypedNotificationError) {
        var batch = batch
        // The leader's own post is the first of its first batch: without its
        // waiter, its outcome comes back here instead.
        if !batch.isEmpty { batch[0].waiter = nil }
        var own: OutboundOutcome?
        drain(.send(batch), own: &own)
        if case .failed(let error) = own { throw error }
    }

    /// Sends batches until the machine says the leader is done, then hands
    /// the lead on if it says so.
    func drain(
        _ first: OutboundStateMachine<OutboundPayload, OutboundWaiter>.Next, own: inout OutboundOutcome?
    ) {
        var next = first
        while true {
            var batch: [OutboundStamped]
            switch next {
            case .idle:
                return
            case .handOff(let waiter):
                waiter.wake(.lead)
                return
            case .send(let stamped):
                batch = stamped
            }
            // The batch's only owner is now `batch`, so each envelope's buffer
            // has one owner too and grows in place when stamped.
            next = .idle
            var messages: [TransportMessage] = []
            messages.reserveCapacity(batch.count)
            for index in batch.indices { messages.append(message(&batch[index])) }
            let result = transport.send(batch: messages)
            if Anatomy.isOn {
                for message in messages { Anatomy.mark(.sent, key: message.timestamp.monotonicNanoseconds) }
            }
            let sent = min(max(result.sent, 0), batch.count)
            var outcomes = [OutboundOutcome](repeating: .sent, count: sent)
            for (index, error) in result.undelivered where index < sent {
                outcomes[index] = .failed(error)
            }
            var unsent: [OutboundStateMachine<OutboundPayload, OutboundWaiter>.Waiting] = []
            if sent < batch.count {
                outcomes.append(
                    .failed(
                        result.failure
                            ?? TypedNotificationError(
                                code: .transportFailure,
                                message:
                                    "the transport sent \(sent) of a batch of \(batch.count) without saying why")
                    ))
                // Those after the failed one were not sent: they go back
                // in line, to be numbered again.
                for (stamped, message) in zip(batch, messages).dropFirst(sent + 1) {
                    guard let waiter = stamped.waiter else { continue }
                    unsent.append(.init(post: message.unfinished, name: stamped.name, waiter: waiter))
                }
            }
            next = outbound.withLock { $0.finished(sent: sent, unsent: unsent) }
            for (stamped, outcome) in zip(batch, outcomes) {
                if let waiter = stamped.waiter {
                    waiter.wake(outcome)
                } else {
                    own = outcome
                }
            }
        }
    }

    /// Stamps a numbered post's envelope with its number and the time,
    /// taking the payload out of `stamped` so that the envelope's buffer has
    /// one owner and grows in place (a second one would make it a copy).
    func message(_ stamped: inout OutboundStamped) -> TransportMessage {
        let timestamp = NotificationTimestamp(
            wallClockNanoseconds: SystemClock.wallClockNanoseconds(),
            monotonicNanoseconds: SystemClock.monotonicNanoseconds()
        )
        var envelope: PendingEnvelope?
        var value: (any DarwinPayload)?
        switch stamped.post {
        case .encoded(let pending): envelope = pending
        case .value(let posted): value = posted
        case .taken: break
        }
        stamped.post = .taken
        let payload: TransportPayload
        if let pending = envelope.take() {
            payload = .encoded(pending.finish(sequence: stamped.sequence, timestamp: timestamp))
        } else if let value {
            payload = .value(value)
        } else {
            // Unreachable: each numbered post becomes a message once. An
            // empty envelope would be refused by every receiver, never trap.
            payload = .encoded(EncodedNotification(storage: [], envelopeRange: 0..<0, payloadRange: 0..<0))
        }
        Anatomy.made(key: timestamp.monotonicNanoseconds)
        return TransportMessage(
            name: stamped.name, sender: sender, sequence: stamped.sequence, timestamp: timestamp, payload: payload)
    }
}

/// A post's payload before its sequence number is known.
enum OutboundPayload: Sendable {
    case encoded(PendingEnvelope)
    case value(any DarwinPayload)
    /// Moved out into the message being sent.
    case taken
}

typealias OutboundStamped = OutboundStateMachine<OutboundPayload, OutboundWaiter>.Stamped

/// What a post waiting in line is woken with.
enum OutboundOutcome: Sendable {
    /// Sent to everyone the transport reaches.
    case sent
    /// Not sent, or (code `undelivered`) sent but not to everyone.
    case failed(TypedNotificationError)
    /// Not sent yet: the woken thread leads and sends it.
    case lead
}

/// Blocks a post's thread until the leader wakes it with its outcome. The
/// leader's send takes microseconds, so a queued post watches for 20 µs
/// before it blocks (see ``Handoff``).
typealias OutboundWaiter = Handoff<OutboundOutcome>

extension OutboundWaiter {
    convenience init() {
        self.init(placeholder: .lead, spinningFor: 20_000)
    }
}

/// Blocks a registration's thread until the subscription change ahead of it
/// settles. Subscribing makes system calls, so it blocks at once.
typealias SubscriptionWaiter = Handoff<RegistrationOutcome>

extension TransportMessage {
    /// The payload of a message the hub numbered, ready to be numbered again.
    fileprivate var unfinished: OutboundPayload {
        switch payload {
        case .encoded(let encoded): .encoded(PendingEnvelope(unfinishing: encoded))
        case .value(let value): .value(value)
        }
    }
}

/// The hub's observer table: its observation sinks per name, and registrations
/// waiting for a name's subscription to settle.
typealias HubObserverTable = ObserverTableStateMachine<any ObservationSink, SubscriptionWaiter>
