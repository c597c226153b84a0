/// One observer's buffer: posters enqueue messages from any thread; a single
/// consumer takes them in order, in batches, and suspends when there are none.
///
/// Runs ``DeliveryQueueStateMachine`` under a mutex and resumes continuations
/// only after the lock is released. Not generic, so the hot path needs no
/// run-time type metadata; the consumer turns messages into typed values.
final class DeliveryQueue: Sendable {
    typealias Entry = DeliveryEntry<TransportMessage>
    typealias Machine = DeliveryQueueStateMachine<TransportMessage, UnsafeContinuation<Entry?, Never>>

    // Guards the buffer, the waiting consumer and the finished flag together, so
    // a message is either handed to the consumer or buffered, never lost between.
    private let machine: Locked<Machine>

    init(policy: NotificationBufferingPolicy) {
        machine = Locked(Machine(policy: policy))
    }

    /// Adds a message. Returns whether the policy had to drop one.
    @discardableResult
    func enqueue(_ message: TransportMessage, missedBefore: Int) -> Bool {
        let action = machine.withLock { $0.enqueue(message, missedBefore: missedBefore) }
        switch action {
        case .resume(let waiter, let entry):
            waiter.resume(returning: entry)
            return false
        case .buffered, .discarded:
            return false
        case .dropped:
            return true
        }
    }

    /// How many messages the buffering policy has dropped.
    var dropped: Int { machine.withLock { $0.dropped } }

    /// Appends every waiting message to `batch`, suspending until there is at
    /// least one. Returns `false` once the queue is finished and drained.
    ///
    /// Runs on the caller's actor, so a delivery loop isolated to an actor does
    /// not hop off it to wait.
    func take(into batch: inout [Entry], isolation actor: isolated (any Actor)? = #isolation) async -> Bool {
        switch machine.withLock({ $0.take(into: &batch, waiter: nil) }) {
        case .taken: return true
        case .finished: return false
        case .suspended: break
        }
        // Slow path: nothing buffered. `batch` cannot be captured across the
        // continuation, so the state machine hands the next entry over directly.
        var handedOver: [Entry] = []
        let entry: Entry? = await withUnsafeContinuation(isolation: actor) { continuation in
            let action = machine.withLock { $0.take(into: &handedOver, waiter: continuation) }
            switch action {
            case .taken: continuation.resume(returning: nil)
            case .finished: continuation.resume(returning: nil)
            case .suspended: break
            }
        }
        if let entry {
            batch.append(entry)
            return true
        }
        if !handedOver.isEmpty {
            batch.append(contentsOf: handedOver)
            return true
        }
        return false
    }

    /// Ends the queue; a suspended consumer gets `nil`.
    func finish(discardingBuffered: Bool) {
        machine.withLock { $0.finish(discardingBuffered: discardingBuffered) }?.resume(returning: nil)
    }
}
