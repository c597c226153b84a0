@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// How a handler loop shares its actor: it gives the actor up after this many
/// deliveries, or once it has held it this long, whichever comes first, so
/// other work on that actor (the main actor's UI, another observer on the same
/// executor) runs in between, even under a flood.
package enum HandlerLoopBudget {
    /// Deliveries before the loop gives its actor up.
    package static let deliveries = 256
    /// Nanoseconds a loop may hold its actor before giving it up: 1 ms.
    static let nanoseconds: UInt64 = 1_000_000
}

/// Starts the loop that runs a handler on `actor`, one notification at a
/// time, in order, and returns the token that controls it.
///
/// The loop holds a user's actor weakly while it waits, so an actor that
/// observes on itself and stores its own token is released when the last
/// other reference goes, and its observation ends with it. The main actor and
/// a center's executor live for good or belong to the center, so a loop on
/// them keeps them and waits on them, which saves a thread hop per wake-up.
func startHandler<N: DarwinPayload, A: Actor>(
    for observation: ObserverRecord<N>,
    on actor: A,
    handler: @escaping @Sendable (isolated A, N, NotificationDelivery) -> Void
) -> ObservationToken {
    let loop: Task<Void, Never>
    if actor is NotificationExecutor || actor is MainActor {
        // A center's executor on a transport's thread is preferred as task
        // executor too: a resumed wait is enqueued there (by the thread that
        // received, so nobody is woken), and the hop to the actor that
        // follows costs nothing. `nil` (the main actor, the pool): no preference.
        let preference = (actor as? NotificationExecutor)?.taskExecutor
        if let loop = (actor as? NotificationExecutor)?.loop {
            // On a transport's loop, a notification the waiting loop would
            // be resumed with is handled by the receiving thread instead.
            observation.setInlineHandler(
                ObserverRecord<N>.InlineHandler(loop: loop) { entry in
                    loop.runInline {
                        actor.assumeIsolated { actor in
                            deliverInline(entry, of: observation, on: actor, to: handler)
                        }
                    }
                })
        }
        loop = Task(executorPreference: preference) {
            await runPinnedHandlerLoop(observation, on: actor, handler: handler)
        }
    } else {
        let reference = WeakActorReference(actor)
        loop = Task { await runWeakHandlerLoop(observation, on: reference, handler: handler) }
    }
    return ObservationToken(control: observation, loop: loop)
}

/// The loop for an actor it may keep: waits isolated to it, and yields it
/// whenever it has used a budget without waiting.
private func runPinnedHandlerLoop<N: DarwinPayload, A: Actor>(
    _ observation: ObserverRecord<N>,
    on actor: isolated A,
    handler: @Sendable (isolated A, N, NotificationDelivery) -> Void
) async {
    var run = HandlerRun<N>(observation)
    while await run.refill(isolation: actor) {
        switch run.deliver(on: actor, to: handler) {
        case .ended:
            run.end()
            return
        case .budgetLeft:
            continue
        case .budgetSpent:
            await Task.yield()
            run.startBudget()
        }
    }
    // Finished: nothing more arrives, and the inline handler lets go of
    // the observation it holds.
    observation.removeInlineHandler()
}

/// Delivers one entry inline, on the thread that received it, which runs
/// `actor`'s jobs: what the handler loop would do with it, had it been
/// resumed with it. A payload that does not decode leaves its loss for the
/// next entry of its name, which the queue holds until then.
private func deliverInline<N: DarwinPayload, A: Actor>(
    _ entry: DeliveryQueue.Entry,
    of observation: ObserverRecord<N>,
    on actor: isolated A,
    to handler: @Sendable (isolated A, N, NotificationDelivery) -> Void
) {
    var decoder = DeliveryDecoder<N>()
    switch runHandler(with: entry, decoder: &decoder, of: observation, on: actor, handler) {
    case .handled:
        break
    case .undecodable:
        let name = entry.element.name
        if let losses = decoder.takeLosses(of: name) {
            observation.noteMissed(losses.count, isExact: losses.isExact, for: name)
        }
    case .cancelled:
        observation.discard([entry][...])
    }
}

/// What ``runHandler(with:decoder:of:on:_:)`` did with an entry.
private enum HandlerCall {
    /// The handler ran; the entry is let go of as handled.
    case handled
    /// Its payload is not an `N`: counted, its loss carried by `decoder`.
    case undecodable
    /// The gate was closed: the handler did not run, the entry is the caller's.
    case cancelled
}

/// Decodes `entry`, and runs `handler` with it through the observation's
/// gate: the one handler call of both the loop and an inline delivery.
@inline(__always)
private func runHandler<N: DarwinPayload, A: Actor>(
    with entry: DeliveryQueue.Entry,
    decoder: inout DeliveryDecoder<N>,
    of observation: ObserverRecord<N>,
    on actor: isolated A,
    _ handler: @Sendable (isolated A, N, NotificationDelivery) -> Void
) -> HandlerCall {
    var cancelled = false
    let decoded = decoder.withValue(of: entry, metrics: observation.metrics) { value, delivery in
        guard observation.gate.begin() else {
            cancelled = true
            return
        }
        Anatomy.mark(.handlerBegan, key: delivery.timestamp.monotonicNanoseconds)
        handler(actor, value, delivery)
        observation.gate.end()
    }
    guard decoded else { return .undecodable }
    guard !cancelled else { return .cancelled }
    // Handled: a durable transport may move its cursor past it.
    entry.element.receipt?.release()
    observation.metrics.add(to: .delivered)
    return .handled
}

/// The loop for a user's actor: waits holding no reference to it, and takes a
/// strong one only to deliver a slice.
private func runWeakHandlerLoop<N: DarwinPayload, A: Actor>(
    _ observation: ObserverRecord<N>,
    on reference: WeakActorReference<A>,
    handler: @escaping @Sendable (isolated A, N, NotificationDelivery) -> Void
) async {
    var run = HandlerRun<N>(observation)
    while await run.refill(isolation: nil) {
        guard let actor = reference.actor else {
            // Nobody else holds the actor: nothing is left to deliver to.
            observation.cancel(waitingForRun: false)
            run.end()
            return
        }
        // Each slice queues for the actor behind work that arrived on it while
        // this loop was away, so a fresh budget is fair.
        run.startBudget()
        let (outcome, next) = await deliverSlice(run, on: actor, to: handler)
        run = next
        if outcome == .ended {
            run.end()
            return
        }
    }
}

/// One slice of deliveries on the actor, for the weak loop.
private func deliverSlice<N: DarwinPayload, A: Actor>(
    _ run: HandlerRun<N>,
    on actor: isolated A,
    to handler: @Sendable (isolated A, N, NotificationDelivery) -> Void
) -> (HandlerRun<N>.Outcome, HandlerRun<N>) {
    var run = run
    var outcome = HandlerRun<N>.Outcome.budgetLeft
    // Until the budget runs out or nothing is left without waiting.
    while outcome == .budgetLeft, run.hasTakenEntries {
        outcome = run.deliver(on: actor, to: handler)
    }
    return (outcome, run)
}

/// A handler loop's position: the batch taken from the queue, how far it got,
/// what it carries into the next delivery, and how much of its budget on the
/// actor is used. A value, so the weak loop can hand it to the actor and take
/// it back.
private struct HandlerRun<N: DarwinPayload>: Sendable {
    enum Outcome: Equatable {
        /// Cancelled: the loop ends.
        case ended
        /// Every taken entry was handled within the budget.
        case budgetLeft
        /// The budget is used: give the actor up, then go on.
        case budgetSpent
    }

    let observation: ObserverRecord<N>
    private var batch: [DeliveryQueue.Entry] = []
    private var index = 0
    private var decoder = DeliveryDecoder<N>()
    // Deliveries since the budget started, and when it started (0: at the next).
    private var budgetUsed = 0
    private var budgetStart: UInt64 = 0

    init(_ observation: ObserverRecord<N>) {
        self.observation = observation
    }

    /// Whether taken entries are still waiting to be delivered.
    var hasTakenEntries: Bool { index < batch.count }

    /// Starts a new budget: the loop has just given its actor up, or waited.
    mutating func startBudget() {
        budgetUsed = 0
        budgetStart = 0
    }

    /// Makes sure entries are waiting to be delivered, suspending until some
    /// arrive. Returns `false` once the observation has ended.
    mutating func refill(isolation actor: isolated (any Actor)?) async -> Bool {
        guard index == batch.count else { return true }
        batch.removeAll(keepingCapacity: true)
        index = 0
        // Waiting may let notifications be handled inline; not past losses
        // this loop still has to report.
        observation.setCarryPending(decoder.carriesLosses)
        switch await observation.queue.take(into: &batch, limit: HandlerLoopBudget.deliveries, isolation: actor) {
        case .finished:
            return false
        case .tookAfterWaiting:
            // Waiting gave the actor up.
            startBudget()
            return true
        case .taken:
            return true
        }
    }

    /// Delivers taken entries in order until they run out or the budget does.
    ///
    /// Decoding happens before the gate; between the gate and the handler call
    /// nothing else runs, and the gate stays passed until the handler returns.
    mutating func deliver<A: Actor>(
        on actor: isolated A,
        to handler: @Sendable (isolated A, N, NotificationDelivery) -> Void
    ) -> Outcome {
        if budgetStart == 0 { budgetStart = SystemClock.monotonicNanoseconds() }
        while index < batch.count {
            guard !observation.isCancelled else { return .ended }
            let entry = batch[index]
            index += 1
            switch runHandler(with: entry, decoder: &decoder, of: observation, on: actor, handler) {
            case .handled:
                break
            case .undecodable:
                continue
            case .cancelled:
                index -= 1
                return .ended
            }
            budgetUsed += 1
            if budgetUsed >= HandlerLoopBudget.deliveries
                || SystemClock.monotonicNanoseconds() &- budgetStart >= HandlerLoopBudget.nanoseconds
            {
                return .budgetSpent
            }
        }
        return .budgetLeft
    }

    /// Ends the run: what it took and did not handle is discarded. Kept
    /// out of `deliver`, whose loop stays as small as it can.
    @inline(never)
    mutating func end() {
        observation.removeInlineHandler()
        observation.discard(batch[index...])
        batch.removeAll()
        index = 0
    }
}

/// A weak reference to an actor that can cross isolation boundaries.
private final class WeakActorReference<A: Actor>: Sendable {
    weak let actor: A?

    init(_ actor: A) {
        self.actor = actor
    }
}
