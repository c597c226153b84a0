import NotificationPlatform

/// One observer's buffer: posters enqueue from any thread, a single consumer
/// takes elements in order and suspends when there are none.
///
/// Runs ``DeliveryQueueStateMachine`` under a mutex and resumes continuations
/// only after the lock is released.
final class DeliveryQueue<Element: Sendable>: Sendable {
    typealias Machine = DeliveryQueueStateMachine<Element, UnsafeContinuation<DeliveryEntry<Element>?, Never>>

    // Guards the buffer, the waiting consumer and the finished flag together, so
    // an element is either handed to the consumer or buffered, never lost between.
    private let machine: Locked<Machine>

    init(policy: NotificationBufferingPolicy) {
        machine = Locked(Machine(policy: policy))
    }

    /// Adds an element. Returns whether the policy had to drop one.
    @discardableResult
    func enqueue(_ element: Element, missedBefore: Int) -> Bool {
        let action = machine.withLock { $0.enqueue(element, missedBefore: missedBefore) }
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

    /// Records misses to report with the next element.
    func noteMissed(_ count: Int) {
        machine.withLock { $0.noteMissed(count) }
    }

    /// How many elements the buffering policy has dropped.
    var dropped: Int { machine.withLock { $0.dropped } }

    /// Elements buffered now.
    var count: Int { machine.withLock { $0.count } }

    /// The next element, or `nil` once the queue is finished and drained.
    ///
    /// Runs on the caller's actor, so a delivery loop isolated to an actor does
    /// not hop off it for every element.
    func next(isolation actor: isolated (any Actor)? = #isolation) async -> DeliveryEntry<Element>? {
        switch machine.withLock({ $0.next(waiter: nil) }) {
        case .element(let entry): return entry
        case .finished: return nil
        case .suspended: break
        }
        return await withUnsafeContinuation(isolation: actor) { continuation in
            let action = machine.withLock { $0.next(waiter: continuation) }
            switch action {
            case .element(let entry): continuation.resume(returning: entry)
            case .finished: continuation.resume(returning: nil)
            case .suspended: break
            }
        }
    }

    /// Ends the queue; a suspended consumer gets `nil`.
    func finish(discardingBuffered: Bool) {
        machine.withLock { $0.finish(discardingBuffered: discardingBuffered) }?.resume(returning: nil)
    }
}
