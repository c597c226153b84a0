import Synchronization

/// Notifications of one type with their delivery metadata, as an async
/// sequence of ``DeliveredNotification``: each value with who sent it, its
/// name, sequence number, when, and how many were missed before it.
/// Iteration never fails; it ends when cancelled or when the center closes.
///
/// The observer is registered when the sequence is created, not when
/// iteration starts: nothing posted after ``TypedNotificationCenter/deliveries(_:from:bufferingPolicy:)``
/// returned is missed. Until iterated, notifications wait in the buffer under
/// the sequence's ``NotificationBufferingPolicy``.
///
/// Single pass: iterate it once; a second iterator ends at once. The observer
/// is removed when iteration ends:
/// by leaving a `for await` loop, cancelling the iterating task, or releasing
/// the iterator; or when the sequence is released without being iterated.
public struct DeliverySequence<Notification: DarwinPayload>: AsyncSequence, Sendable {

    let registration: SequenceRegistration<Notification>

    init(observation: ObserverRecord<Notification>) {
        registration = SequenceRegistration(observation)
    }

    /// How many notifications this sequence's buffer has dropped so far.
    public var dropped: Int { registration.observation.queue.dropped }

    /// Starts the single iteration. Any later iterator ends at once.
    public func makeAsyncIterator() -> AsyncIterator {
        guard registration.claimIteration() else { return AsyncIterator(iteration: nil) }
        return AsyncIterator(iteration: SequenceIteration(registration))
    }

    /// Takes deliveries in post order (per poster and name).
    public struct AsyncIterator: AsyncIteratorProtocol {
        // Nil for every iterator but the first: a queue has one consumer.
        let iteration: SequenceIteration<Notification>?

        /// The next delivery, or `nil` once the observation has ended.
        public mutating func next(isolation actor: isolated (any Actor)?) async -> DeliveredNotification<Notification>?
        {
            guard let iteration else { return nil }
            // Asking for more means the body has run for the delivery in
            // hand: handled, even under a cancel. Let go of it before the
            // cancellation handler, which for a task already cancelled runs
            // at once and removes the observer; a durable transport forgets
            // what is still in hand when a name's last observer goes, and
            // would give a handled delivery again.
            iteration.cursor.releaseHandedOut()
            let observation = iteration.registration.observation
            return await withTaskCancellationHandler(
                operation: { await iteration.cursor.next(isolation: actor) },
                onCancel: { observation.cancel(waitingForRun: false) },
                isolation: actor
            )
        }

        /// The next delivery, or `nil` once the observation has ended.
        public mutating func next() async -> DeliveredNotification<Notification>? {
            await next(isolation: nil)
        }
    }
}

/// Notifications of one type, as an async sequence of values. Iteration
/// never fails; it ends when cancelled or when the center closes.
///
/// The same as ``DeliverySequence`` without the metadata: registered when
/// created, single pass, removed when iteration ends. Use
/// ``DeliverySequence`` to see ``NotificationDelivery/missed``.
public struct NotificationSequence<Notification: DarwinPayload>: AsyncSequence, Sendable {

    private let deliveries: DeliverySequence<Notification>

    init(_ deliveries: DeliverySequence<Notification>) {
        self.deliveries = deliveries
    }

    /// How many notifications this sequence's buffer has dropped so far.
    public var dropped: Int { deliveries.dropped }

    /// Starts the single iteration.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: deliveries.makeAsyncIterator())
    }

    /// Takes notifications in post order (per poster and name).
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: DeliverySequence<Notification>.AsyncIterator

        /// The next notification, or `nil` once the observation has ended.
        public mutating func next(isolation actor: isolated (any Actor)?) async -> Notification? {
            await base.next(isolation: actor)?.notification
        }

        /// The next notification, or `nil` once the observation has ended.
        public mutating func next() async -> Notification? {
            await next(isolation: nil)
        }
    }
}

@available(*, unavailable)
extension DeliverySequence.AsyncIterator: Sendable {}

@available(*, unavailable)
extension NotificationSequence.AsyncIterator: Sendable {}

/// Owned by a sequence and its iterator; the observer lives while either does.
final class SequenceRegistration<N: DarwinPayload>: Sendable {
    let observation: ObserverRecord<N>
    // Set by the first makeAsyncIterator: a delivery queue has one consumer.
    private let iterated = Atomic<Bool>(false)

    /// Whether the caller is the first to iterate.
    func claimIteration() -> Bool {
        !iterated.exchange(true, ordering: .acquiringAndReleasing)
    }

    init(_ observation: ObserverRecord<N>) {
        self.observation = observation
    }

    deinit {
        observation.cancel(waitingForRun: false)
    }
}

/// Owned by an iterator alone, so that ending iteration removes the observer
/// even while the sequence value is still around, and then lets go of the
/// receipts of what it took (see ``ObservationCursor/end()``).
///
/// Not `Sendable`: like the iterator that owns it, it is used by one task at a
/// time.
final class SequenceIteration<N: DarwinPayload> {
    let registration: SequenceRegistration<N>
    var cursor: ObservationCursor<N>

    init(_ registration: SequenceRegistration<N>) {
        self.registration = registration
        self.cursor = ObservationCursor(registration.observation)
    }

    deinit {
        // Leaving the loop finished the body for the last delivery: handled,
        // before the observer goes (and, if it was the last, its name with it).
        cursor.releaseHandedOut()
        registration.observation.cancel(waitingForRun: false)
        cursor.end()
    }
}
