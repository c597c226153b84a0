import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// What a center's observer table holds for each observer: it takes messages
/// of one name and can be finished when the center closes.
protocol ObservationSink: AnyObject, Sendable {
    /// Filters and queues one message. Returns `false` when the filter
    /// passed it by. Never runs user code, never blocks.
    @discardableResult func offer(_ message: TransportMessage, gap: Int) -> Bool
    /// Adds `count` notifications that will never arrive to the next
    /// delivery's missed count; not `isExact`: a loss that could not be
    /// counted, at least `count`. Never runs user code, never blocks.
    func noteMissed(_ count: Int, isExact: Bool, for name: NotificationName)
    /// Whether a slice of notifications waits in its buffer. Never blocks.
    var isBackedUp: Bool { get }
    /// How many more notifications its buffer takes before it drops one;
    /// `nil` when unbounded. Never blocks.
    var room: Int? { get }
    /// Ends the observation because its center closed: already queued
    /// notifications are still delivered.
    func finishFromCenter()
}

/// Cancelling, as tokens and sequences see it.
protocol ObservationControl: AnyObject, Sendable {
    /// Cancels. With `waitingForRun`, returns only once no run of a handler
    /// can begin (see ``RunGate``). Returns whether this call did it.
    @discardableResult func cancel(waitingForRun: Bool) -> Bool
    /// Cancelled, or its center closed.
    var isEnded: Bool { get }
}

/// One observer of notifications of type `N`: its filter, its buffer and its
/// cancellation state.
///
/// The type says what the observer takes; the state does not depend on it,
/// so it is one non-generic class (``ObserverState``). A generic class's
/// stored properties, read from unspecialized code (a handler loop for an
/// app's type), cost a run-time metadata lookup each; these are read per
/// notification.
package typealias ObserverRecord<N: DarwinPayload> = ObserverState

/// The state of one observer (see ``ObserverRecord``).
package final class ObserverState: ObservationSink, ObservationControl {
    let queue: DeliveryQueue
    let metrics: Counters<NotificationMetrics>
    private let filter: SenderFilter
    private let observer: NotificationSender

    /// Decides whether a handler run may begin; closed by cancel. A handler
    /// loop passes it after decoding, immediately before each call.
    let gate = RunGate()
    // Mirrors the gate for cheap reads: sequences check it before each delivery.
    private let cancelled = Atomic<Bool>(false)
    // Set when the center closed: deliveries already queued still go out.
    private let endedByCenter = Atomic<Bool>(false)

    // Guards the one-time handover of the function that removes this observer
    // from its center, so it runs exactly once: at cancel, or at registration
    // if cancel came first.
    private let unregistration = Locked<Unregistration>(.pending)

    private enum Unregistration {
        case pending
        case registered(@Sendable () -> Void)
        case done
    }

    // Receipts of messages this observer will never handle, kept until it has
    // been removed from its center (see `discard`).
    private let leftovers = Locked<Leftovers>(Leftovers())

    private struct Leftovers {
        var removed = false
        var receipts: [DeliveryReceipt] = []
    }

    package init(
        filter: SenderFilter,
        observer: NotificationSender,
        policy: NotificationBufferingPolicy,
        metrics: Counters<NotificationMetrics>
    ) {
        self.filter = filter
        self.observer = observer
        self.metrics = metrics
        self.queue = DeliveryQueue(policy: policy)
    }

    /// Hands over the function that removes this observer from its center.
    /// Runs it at once if the observer was cancelled in the meantime.
    package func registered(unregister: @escaping @Sendable () -> Void) {
        let runNow = unregistration.withLock { state -> Bool in
            guard case .pending = state else { return true }
            state = .registered(unregister)
            return false
        }
        metrics.add(to: .activeObservers)
        if runNow { cleanUp(unregister) }
    }

    /// Whether the observer was cancelled; nothing more is delivered.
    var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

    /// Whether the observation is over: cancelled, or its center closed.
    var isEnded: Bool { isCancelled || endedByCenter.load(ordering: .acquiring) }

    @discardableResult
    func cancel(waitingForRun: Bool) -> Bool {
        // The gate first: from here on no handler run begins.
        let closing = gate.close()
        if closing.closedNow {
            cancelled.store(true, ordering: .releasing)
            let unregister = unregistration.withLock { state -> (@Sendable () -> Void)? in
                defer { state = .done }
                if case .registered(let unregister) = state { return unregister }
                return nil
            }
            if let unregister { cleanUp(unregister) }
            let discarded = queue.finish(discardingBuffered: true)
            markRemoved(releasing: discarded.compactMap(\.element.receipt))
        }
        // Unregistered and woken before blocking, so the loop ends promptly.
        if waitingForRun { gate.waitForRunInFlight(closing) }
        return closing.closedNow
    }

    func finishFromCenter() {
        endedByCenter.store(true, ordering: .releasing)
        let wasRegistered = unregistration.withLock { state -> Bool in
            defer { state = .done }
            if case .registered = state { return true }
            return false
        }
        if wasRegistered { metrics.subtract(from: .activeObservers) }
        queue.finish(discardingBuffered: false)
        markRemoved(releasing: [])
    }

    /// Lets go of the receipts of messages this observer took from its queue
    /// but will never handle (it ended with them in hand), once it has been
    /// removed from its center: a durable transport that loses its last
    /// observer of a name first forgets what was in flight, so a later
    /// observer gets those messages again instead of the cursor skipping them.
    func discard(_ entries: ArraySlice<DeliveryQueue.Entry>) {
        let receipts = entries.compactMap(\.element.receipt)
        guard !receipts.isEmpty else { return }
        let releaseNow = leftovers.withLock { state -> Bool in
            guard state.removed else {
                state.receipts += receipts
                return false
            }
            return true
        }
        guard releaseNow else { return }
        for receipt in receipts { receipt.abandon() }
    }

    private func markRemoved(releasing receipts: [DeliveryReceipt]) {
        let stashed = leftovers.withLock { state -> [DeliveryReceipt] in
            state.removed = true
            defer { state.receipts = [] }
            return state.receipts
        }
        for receipt in receipts + stashed { receipt.abandon() }
    }

    private func cleanUp(_ unregister: @Sendable () -> Void) {
        unregister()
        metrics.subtract(from: .activeObservers)
    }

    var isBackedUp: Bool { queue.isBackedUp }

    var room: Int? { queue.room }

    @discardableResult
    package func offer(_ message: TransportMessage, gap: Int) -> Bool {
        guard filter.accepts(message.sender, observer: observer) else { return false }
        // Held until this observer is done with it; the queue lets go of a
        // message it drops or refuses.
        message.receipt?.hold()
        var inlineHandler: InlineHandler?
        if hasInlineHandler.load(ordering: .acquiring), !carryPending.load(ordering: .relaxed) {
            inlineHandler = inline.withLock { $0 }
            if let loop = inlineHandler?.loop, !loop.mayRunHandlerInline() { inlineHandler = nil }
        }
        if queue.enqueue(message, missedBefore: gap, inline: inlineHandler?.deliver) {
            metrics.add(to: .dropped)
        }
        return true
    }

    /// A handler that may run inline: its handler loop waits on the event
    /// loop that receives its notifications (a center's executor on a
    /// transport's loop), so a notification that would resume the loop is
    /// handled by the receiving thread there and then, in order, with no job
    /// queued and no task switched to (see ``EventLoop/mayRunHandlerInline()``).
    struct InlineHandler: Sendable {
        let loop: EventLoop
        let deliver: @Sendable (DeliveryQueue.Entry) -> Void
    }

    // The handler loop's inline handler, while it runs; read per message
    // only when `hasInlineHandler` says there is one.
    private let inline = Locked<InlineHandler?>(nil)
    private let hasInlineHandler = Atomic<Bool>(false)
    // Set while the handler loop holds losses of undecodable notifications
    // not yet reported: they ride on its next delivery of their name, so
    // none may go past it inline.
    private let carryPending = Atomic<Bool>(false)

    /// Lets `handler` run inline, until ``removeInlineHandler()``.
    func setInlineHandler(_ handler: InlineHandler) {
        inline.withLock { $0 = handler }
        hasInlineHandler.store(true, ordering: .releasing)
    }

    /// Ends inline delivery: what arrives from now on resumes the loop.
    func removeInlineHandler() {
        hasInlineHandler.store(false, ordering: .releasing)
        inline.withLock { $0 = nil }
    }

    /// Whether the handler loop carries unreported losses (see `carryPending`).
    func setCarryPending(_ pending: Bool) {
        carryPending.store(pending, ordering: .relaxed)
    }

    func noteMissed(_ count: Int, isExact: Bool, for name: NotificationName) {
        queue.noteMissed(count, isExact: isExact, for: name)
    }
}

/// Turns queued entries into typed deliveries, in order, and carries what
/// could not be decoded into the next delivery of the same name's
/// ``NotificationDelivery/missed``.
///
/// Shared by async sequences and handler loops; holds only the counts of
/// names with an undecodable payload not yet reported (bounded, see
/// ``MissedByName``).
struct DeliveryDecoder<N: DarwinPayload>: Sendable {
    private var undecoded = MissedByName()

    /// The entry as a delivery, or `nil` (counted as undecodable and as missed)
    /// when its payload is not an `N`.
    ///
    /// Inlined: callers are generic and, called from another module,
    /// unspecialized, where each extra generic call costs a metadata lookup.
    @inline(__always)
    mutating func delivery(from entry: DeliveryQueue.Entry, metrics: Counters<NotificationMetrics>)
        -> DeliveredNotification<N>?
    {
        let delivery = metadata(of: entry)
        guard let value = N.decoded(from: entry.element.payload) else {
            undecodable(entry.element, delivery, metrics: metrics)
            return nil
        }
        return DeliveredNotification(notification: value, delivery: delivery)
    }

    /// Whether losses of undecodable notifications wait to ride on a delivery.
    var carriesLosses: Bool { !undecoded.isEmpty }

    /// Takes the losses carried for `name`, to hand them to the queue.
    mutating func takeLosses(of name: NotificationName) -> (count: Int, isExact: Bool)? {
        undecoded.take(name)
    }

    /// Calls `body` with the entry's value and its metadata, and returns
    /// `true`; or returns `false` (counted as undecodable and as missed) when
    /// its payload is not an `N`.
    ///
    /// What a handler loop calls: the value goes straight to `body`, so no
    /// value of a type generic over `N` (an optional, a pair) is made. From
    /// unspecialized code each would cost a run-time metadata lookup per
    /// notification (a tenth of the in-process hop, measured).
    @inline(__always)
    mutating func withValue(
        of entry: DeliveryQueue.Entry, metrics: Counters<NotificationMetrics>,
        _ body: (N, NotificationDelivery) -> Void
    ) -> Bool {
        let delivery = metadata(of: entry)
        let value: N
        do {
            value = try N.decodedValue(from: entry.element.payload)
        } catch {
            undecodable(entry.element, delivery, metrics: metrics)
            return false
        }
        body(value, delivery)
        return true
    }

    /// The entry's metadata, with what an undecodable one before it left.
    private mutating func metadata(of entry: DeliveryQueue.Entry) -> NotificationDelivery {
        var missed = entry.missedBefore
        var missedIsExact = entry.missedIsExact
        let message = entry.element
        if !undecoded.isEmpty, let carried = undecoded.take(message.name) {
            missed = missed.addingSaturating(carried.count)
            missedIsExact = missedIsExact && carried.isExact
        }
        return NotificationDelivery(of: message, missed: missed, missedIsExact: missedIsExact)
    }

    private mutating func undecodable(
        _ message: TransportMessage, _ delivery: NotificationDelivery, metrics: Counters<NotificationMetrics>
    ) {
        metrics.add(to: .undecodable)
        undecoded.add(delivery.missed.addingSaturating(1), isExact: delivery.missedIsExact, for: message.name)
        // Counted as missed: as handled as it will ever be.
        message.receipt?.release()
    }
}

/// The consuming end of an observation for an async sequence: takes queued
/// messages in batches and turns them into typed deliveries, in order.
///
/// Decoding happens here, on the consumer, never on the poster's thread or a
/// transport's receive thread. A payload this observer cannot decode is
/// counted and reported in the next delivery's ``NotificationDelivery/missed``.
struct ObservationCursor<N: DarwinPayload> {
    let observation: ObserverRecord<N>
    private var batch: [DeliveryQueue.Entry] = []
    private var index = 0
    private var decoder = DeliveryDecoder<N>()
    // The receipt of the delivery returned last: the loop is done with it
    // when it asks for the next.
    private var handing: DeliveryReceipt?

    init(_ observation: ObserverRecord<N>) {
        self.observation = observation
    }

    /// The next delivery, or `nil` once the observation has ended.
    mutating func next(isolation actor: isolated (any Actor)? = #isolation) async -> DeliveredNotification<N>? {
        releaseHandedOut()
        while true {
            if index == batch.count {
                batch.removeAll(keepingCapacity: true)
                index = 0
                guard await observation.queue.take(into: &batch, isolation: actor) != .finished else { return nil }
            }
            let entry = batch[index]
            index += 1
            // A cancelled observer delivers nothing more, even what it holds.
            // A sequence is consumed by the task that iterates it, and task
            // cancellation is cooperative, so this flag is enough: the exact
            // promise of the run gate is for handlers, which run elsewhere.
            if observation.isCancelled {
                observation.discard(batch[(index - 1)...])
                batch.removeAll()
                index = 0
                return nil
            }
            guard let delivered = decoder.delivery(from: entry, metrics: observation.metrics) else { continue }
            observation.metrics.add(to: .delivered)
            handing = entry.element.receipt
            return delivered
        }
    }

    /// The loop is done with the delivery handed out last: it asked for the
    /// next, or left the loop.
    mutating func releaseHandedOut() {
        if let handled = handing {
            handing = nil
            handled.release()
        }
    }

    /// Called when iteration ends: what was taken and not handed out is
    /// discarded.
    mutating func end() {
        releaseHandedOut()
        observation.discard(batch[index...])
        batch.removeAll()
        index = 0
    }
}

extension DeliveredNotification {
    /// `message` as a `Notification` with its metadata, or `nil` when its
    /// payload does not decode as one.
    package init?(decoding message: TransportMessage, missed: Int, missedIsExact: Bool = true) {
        guard let value = Notification.decoded(from: message.payload) else { return nil }
        self.init(
            notification: value,
            delivery: NotificationDelivery(of: message, missed: missed, missedIsExact: missedIsExact))
    }
}

extension NotificationDelivery {
    /// The metadata of `message`, with what was missed just before it.
    init(of message: TransportMessage, missed: Int, missedIsExact: Bool) {
        self.init(
            name: message.name,
            sender: message.sender,
            sequence: message.sequence,
            timestamp: message.timestamp,
            missed: missed,
            isRedelivery: message.isRedelivery,
            missedIsExact: missedIsExact
        )
    }
}

extension DarwinPayload {
    /// The payload as this type: a value of this type as it is; anything
    /// else through its payload bytes, as it would cross a process boundary.
    ///
    /// A static on the notification type, not on a generic type of ours:
    /// called per notification from unspecialized code, it needs no generic
    /// metadata beyond `Self`'s.
    @inline(__always)
    package static func decoded(from payload: TransportPayload) -> Self? {
        switch payload {
        case .value(let value):
            if let typed = value as? Self { return typed }
            // Another type posted under this name: convert through bytes.
            guard let bytes = try? value.encodedPayload() else { return nil }
            return try? Self(payload: bytes)
        case .encoded(let encoded):
            return try? encoded.withUnsafePayload { try Self(payload: $0) }
        }
    }

    /// Like ``decoded(from:)``, throwing where that returns `nil`: no
    /// `Optional<Self>` is made, which unspecialized code would look up.
    @inline(__always)
    package static func decodedValue(from payload: TransportPayload) throws -> Self {
        switch payload {
        case .value(let value):
            // Another type posted under this name: convert through bytes.
            if let typed = value as? Self { return typed }
            return try Self(payload: try value.encodedPayload())
        case .encoded(let encoded):
            return try encoded.withUnsafePayload { try Self(payload: $0) }
        }
    }
}
