@_spi(TransportAuthoring) import TypedNotificationsPlatform

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

    /// Adds a message. Returns whether the policy had to drop one. A message
    /// that leaves the queue unhandled (dropped, or refused because the queue
    /// is finished) lets go of its `DeliveryReceipt` hold.
    ///
    /// With `inline`, a message the suspended consumer would get next goes
    /// to `inline` instead, called on this thread after the lock, and the
    /// consumer keeps waiting.
    @discardableResult
    func enqueue(
        _ message: TransportMessage, missedBefore: Int, inline: ((Entry) -> Void)? = nil
    ) -> Bool {
        let action = machine.withLock { $0.enqueue(message, missedBefore: missedBefore, inline: inline != nil) }
        Anatomy.mark(.queued, key: message.timestamp.monotonicNanoseconds)
        switch action {
        case .resume(let waiter, let entry):
            waiter.resume(returning: entry)
            return false
        case .inline(let entry):
            inline?(entry)
            return false
        case .buffered:
            return false
        case .discarded:
            message.receipt?.abandon()
            return false
        case .dropped(let lost):
            lost.receipt?.drop()
            return true
        }
    }

    /// Adds misses that no message carries (a poster's drop record) to the
    /// next entry's missed count; not `isExact`: at least `count`.
    func noteMissed(_ count: Int, isExact: Bool, for name: NotificationName) {
        machine.withLock { $0.noteMissed(count, isExact: isExact, for: name) }
    }

    /// Whether a handler loop's slice of messages is waiting (see
    /// ``DeliveryQueueStateMachine/isBackedUp(slice:)``).
    var isBackedUp: Bool { machine.withLock { $0.isBackedUp(slice: HandlerLoopBudget.deliveries) } }

    /// How many more messages fit before the policy drops one; `nil` when unbounded.
    var room: Int? { machine.withLock { $0.room } }

    /// How many messages the buffering policy has dropped.
    var dropped: Int { machine.withLock { $0.dropped } }

    /// What ``take(into:limit:isolation:)`` did.
    enum TakeResult {
        /// Entries were waiting and were taken at once.
        case taken
        /// None were waiting; the consumer suspended until one arrived.
        case tookAfterWaiting
        /// The queue is finished and drained.
        case finished
    }

    /// Appends waiting messages to `batch`, at most `limit` of them, suspending
    /// until there is at least one.
    ///
    /// Runs on the caller's actor, so a delivery loop isolated to an actor does
    /// not hop off it to wait.
    func take(
        into batch: inout [Entry],
        limit: Int = .max,
        isolation actor: isolated (any Actor)? = #isolation
    ) async -> TakeResult {
        switch machine.withLock({ $0.take(into: &batch, limit: limit, waiter: nil) }) {
        case .taken: return .taken
        case .finished: return .finished
        case .suspended: break
        }
        // Slow path: nothing buffered. `batch` cannot be captured across the
        // continuation, so the state machine hands the next entry over directly.
        var handedOver: [Entry] = []
        let entry: Entry? = await withUnsafeContinuation(isolation: actor) { continuation in
            let action = machine.withLock { $0.take(into: &handedOver, limit: limit, waiter: continuation) }
            switch action {
            case .taken: continuation.resume(returning: nil)
            case .finished: continuation.resume(returning: nil)
            case .suspended: break
            }
        }
        if let entry {
            batch.append(entry)
            return .tookAfterWaiting
        }
        if !handedOver.isEmpty {
            batch.append(contentsOf: handedOver)
            return .taken
        }
        return .finished
    }

    /// Ends the queue; a suspended consumer gets `nil`. Returns the entries
    /// discarded, whose receipts the caller lets go of.
    @discardableResult
    func finish(discardingBuffered: Bool) -> [Entry] {
        var discarded: [Entry] = []
        machine.withLock { $0.finish(discardingBuffered: discardingBuffered, discarded: &discarded) }?
            .resume(returning: nil)
        return discarded
    }
}
