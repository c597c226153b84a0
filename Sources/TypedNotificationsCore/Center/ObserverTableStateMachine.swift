/// A center's observers per selector (a name or a namespace) and each
/// selector's transport subscription, as a pure state machine.
///
/// A selector is subscribed on the transport exactly while it has observers, and
/// registration is immediate: once it returns, every later post reaches the
/// observer, so a registration that finds its name unsubscribed returns only
/// after subscribing. Subscribing and unsubscribing are system calls (a
/// registry entry written, a log's position read), so they are made with no
/// lock held: this machine lets one thread at a time change a name's
/// subscription, and registrations of that name arriving meanwhile wait in
/// line, each woken with its outcome. Deliveries and registrations of other
/// selectors never wait for a subscription.
///
/// A notification reaches the observers of its name and of every namespace
/// that contains it: one lookup per label of the name while any namespace is
/// observed, one lookup otherwise. Gap detection is per name and sender,
/// whoever observes the name (see ``namespaceSequences``).
///
/// No locks, no threads, no I/O: the center runs it under a mutex, calls the
/// transport, and wakes the waiters. `Observer` is a registered observer;
/// `Waiter` wakes a blocked registration (a plain
/// value in tests).
struct ObserverTableStateMachine<Observer, Waiter> {
    /// Where a name's transport subscription stands.
    enum Subscription: Equatable {
        /// A thread is subscribing; its observer waits in the list.
        case subscribing
        case subscribed
        /// The last observer left and a thread is unsubscribing.
        case unsubscribing
    }

    struct Slot {
        var observers: [Observer] = []
        var subscription = Subscription.subscribing
        /// Registrations waiting for the subscription to settle, in order.
        var waiting: [(observer: Observer, waiter: Waiter)] = []
        /// The last sequence number heard from each sender, for gap
        /// detection (a name's slot only). Forgotten when the name loses its
        /// last observer, so posts made while nobody listened are not
        /// reported as missed; kept in ``namespaceSequences`` while a
        /// namespace still observes the name.
        var sequences = SenderSequenceTracker()

        mutating func received(_ sequence: UInt64, from sender: NotificationSender) -> (
            observers: [Observer], gap: Int
        ) {
            (observers, sequences.note(sequence, from: sender))
        }

        mutating func missed(_ report: MissedNotifications, tracksGaps: Bool) -> (observers: [Observer], missed: Int) {
            guard tracksGaps, let sender = report.sender else { return (observers, report.count) }
            guard let last = report.lastSequence else {
                // The sender's next ones, numbers unknown: its next
                // notification must not count them again.
                sequences.advance(by: report.count, from: sender)
                return (observers, report.count)
            }
            return (observers, sequences.skip(through: last, from: sender, reported: report.count))
        }
    }

    private(set) var slots: [NotificationSelector: Slot] = [:]
    private(set) var isClosed = false
    /// How many of the slots are namespaces: while none is, a delivery
    /// looks up its name alone.
    private var namespaceSlots = 0
    /// Gap detection for the names observed only through a namespace, in
    /// bounded memory however many names appear: at most
    /// `2 × namespaceNameCapacity` names are remembered, in two generations
    /// as ``SenderSequenceTracker`` keeps senders. A name not heard from
    /// while that many others were is forgotten; its next notification then
    /// reports no gap, as a sender's first does. A name's tracker moves
    /// into its slot when the name gains an observer of its own, and back
    /// when that observer leaves while a namespace still covers it.
    private(set) var namespaceSequences = Generations<NotificationName, SenderSequenceTracker>(
        capacity: namespaceNameCapacity)
    /// Names per generation of ``namespaceSequences``.
    static var namespaceNameCapacity: Int { 4_096 }

    // MARK: - Registering

    enum RegisterAction: Equatable {
        /// The center is closed: not registered.
        case closed
        /// Registered: the name was already subscribed.
        case registered
        /// The caller subscribes the transport to the name now, with no
        /// lock held, and reports it with ``subscribed(_:succeeded:)``; its
        /// observer is registered (deliveries may reach it already).
        case subscribe
        /// Another thread is changing the name's subscription: the caller
        /// waits in line (see ``enqueue(_:named:waiter:)``).
        case busy
    }

    /// Registers `observer` for `selector` when that takes no transport call.
    mutating func register(_ observer: Observer, selecting selector: NotificationSelector) -> RegisterAction {
        guard !isClosed else { return .closed }
        guard var slot = slots[selector] else {
            create(selector, Slot(observers: [observer]))
            return .subscribe
        }
        guard slot.subscription == .subscribed else { return .busy }
        slot.observers.append(observer)
        slots[selector] = slot
        return .registered
    }

    /// Adds a slot for `selector`; a name's takes over the gap detection a
    /// namespace kept for it.
    private mutating func create(_ selector: NotificationSelector, _ slot: Slot) {
        var slot = slot
        switch selector {
        case .name(let name):
            if let kept = namespaceSequences.remove(name) { slot.sequences = kept }
        case .namespace:
            namespaceSlots += 1
        }
        slots[selector] = slot
    }

    /// Removes the slot of `selector`. A name's gap detection stays while a
    /// namespace covers the name; a namespace's names that no other
    /// namespace covers are forgotten.
    private mutating func remove(_ selector: NotificationSelector) {
        guard let slot = slots.removeValue(forKey: selector) else { return }
        switch selector {
        case .name(let name):
            if isCoveredByNamespace(name) { namespaceSequences.insert(slot.sequences, for: name) }
        case .namespace:
            namespaceSlots -= 1
            guard namespaceSlots > 0 else {
                namespaceSequences = Generations(capacity: Self.namespaceNameCapacity)
                return
            }
            let remaining = slots
            namespaceSequences.removeAll { !Self.isCovered($0, in: remaining) }
        }
    }

    private func isCoveredByNamespace(_ name: NotificationName) -> Bool {
        namespaceSlots > 0 && Self.isCovered(name, in: slots)
    }

    private static func isCovered(_ name: NotificationName, in slots: [NotificationSelector: Slot]) -> Bool {
        var covered = false
        NotificationNamespace.forEach(containing: name) { namespace in
            if !covered, slots[.namespace(namespace)] != nil { covered = true }
        }
        return covered
    }

    enum EnqueueAction: Equatable {
        case closed
        /// Settled meanwhile, subscribed: registered, nothing was queued.
        case registered
        /// Settled meanwhile, unsubscribed: the caller subscribes, as for
        /// ``RegisterAction/subscribe``. Nothing was queued.
        case subscribe
        /// Queued: the caller blocks until `waiter` is woken with an
        /// ``RegistrationOutcome``.
        case queued
    }

    /// Queues `observer` behind the subscription change in progress, after
    /// ``register(_:selecting:)`` said ``RegisterAction/busy``.
    mutating func enqueue(_ observer: Observer, selecting selector: NotificationSelector, waiter: Waiter)
        -> EnqueueAction
    {
        switch register(observer, selecting: selector) {
        case .closed: return .closed
        case .registered: return .registered
        case .subscribe: return .subscribe
        case .busy:
            slots[selector]?.waiting.append((observer, waiter))
            return .queued
        }
    }

    /// What the thread that changed a subscription does next.
    struct Settled {
        /// The queued registrations to wake, with their outcomes.
        var wake: [(waiter: Waiter, outcome: RegistrationOutcome)] = []
        /// The caller must unsubscribe the selector now (its observers all left
        /// while it subscribed), and report it with ``unsubscribed(_:)``.
        var unsubscribe = false
        /// The center closed while the caller subscribed: its registration
        /// fails with ``TypedNotificationError/Code/closed``.
        var closed = false
    }

    /// The transport subscribed to `selector`, or failed to (the caller's
    /// registration fails then, and its observer is removed).
    mutating func subscribed(_ selector: NotificationSelector, succeeded: Bool) -> Settled {
        guard var slot = slots[selector], slot.subscription == .subscribing else { return Settled(closed: true) }
        guard succeeded else {
            slot.observers = []
            return handOver(selector, slot)
        }
        slot.subscription = .subscribed
        var settled = Settled()
        for (observer, waiter) in slot.waiting {
            slot.observers.append(observer)
            settled.wake.append((waiter, .registered))
        }
        slot.waiting = []
        if slot.observers.isEmpty {
            slot.subscription = .unsubscribing
            settled.unsubscribe = true
        }
        slots[selector] = slot
        return settled
    }

    /// Lets the first queued registration subscribe afresh, or forgets the
    /// selector when none waits.
    private mutating func handOver(_ selector: NotificationSelector, _ slot: Slot) -> Settled {
        guard let first = slot.waiting.first else {
            remove(selector)
            return Settled()
        }
        // The same selector, subscribed afresh: what it knew of senders stays.
        var next = Slot(observers: [first.observer])
        next.waiting = Array(slot.waiting.dropFirst())
        next.sequences = slot.sequences
        slots[selector] = next
        return Settled(wake: [(first.waiter, .subscribe)])
    }

    // MARK: - Unregistering

    /// Removes the observer of `selector` that `isTheOne` picks. Returns
    /// whether the caller must unsubscribe the selector now (it lost its last
    /// observer), and report it with ``unsubscribed(_:)``.
    mutating func unregister(from selector: NotificationSelector, where isTheOne: (Observer) -> Bool) -> Bool {
        guard var slot = slots[selector] else { return false }
        slot.observers.removeAll(where: isTheOne)
        let unsubscribe = slot.observers.isEmpty && slot.subscription == .subscribed
        if unsubscribe { slot.subscription = .unsubscribing }
        slots[selector] = slot
        return unsubscribe
    }

    /// The transport unsubscribed `selector`.
    mutating func unsubscribed(_ selector: NotificationSelector) -> Settled {
        guard let slot = slots[selector], slot.subscription == .unsubscribing else { return Settled() }
        return handOver(selector, slot)
    }

    // MARK: - Closing

    /// Closes the table. Returns the observers to finish and the queued
    /// registrations to wake with ``RegistrationOutcome/closed``.
    mutating func close() -> (observers: [Observer], waiters: [Waiter]) {
        isClosed = true
        defer {
            slots = [:]
            namespaceSlots = 0
            namespaceSequences = Generations(capacity: Self.namespaceNameCapacity)
        }
        let observers = slots.values.flatMap(\.observers)
        let waiters = slots.values.flatMap { $0.waiting.map(\.waiter) }
        return (observers, waiters)
    }

    // MARK: - Delivering

    /// The observers a notification of `name` reaches: its name's, then each
    /// enclosing namespace's from the shortest; and whether any namespace
    /// covers it.
    func observers(of name: NotificationName) -> [Observer] {
        observersAndCoverage(of: name).observers
    }

    private func observersAndCoverage(of name: NotificationName) -> (observers: [Observer], covered: Bool) {
        var observers = slots[.name(name)]?.observers ?? []
        guard namespaceSlots > 0 else { return (observers, false) }
        var covered = false
        NotificationNamespace.forEach(containing: name) { namespace in
            guard let slot = slots[.namespace(namespace)] else { return }
            covered = true
            observers += slot.observers
        }
        return (observers, covered)
    }

    /// The observers of a received notification, and how many of its
    /// sender's notifications of its name went missing before it (0 unless
    /// `tracksGaps`); `nil` when nobody observes the name.
    mutating func received(
        _ name: NotificationName, sequence: UInt64, from sender: NotificationSender, tracksGaps: Bool
    ) -> (observers: [Observer], gap: Int)? {
        guard namespaceSlots > 0 else {
            // The common case: one hash of the name, and the slot is not copied.
            guard tracksGaps else { return slots[.name(name)].map { ($0.observers, 0) } }
            return slots[.name(name)]?.received(sequence, from: sender)
        }
        let (observers, covered) = observersAndCoverage(of: name)
        let named = slots[.name(name)] != nil
        guard named || covered else { return nil }
        guard tracksGaps else { return (observers, 0) }
        let gap =
            named
            ? slots[.name(name)]?.sequences.note(sequence, from: sender) ?? 0
            : namespaceSequences.update(name, default: SenderSequenceTracker()) { $0.note(sequence, from: sender) }
        return (observers, gap)
    }

    /// The observers of `name` and how many notifications a transport's
    /// report of missed ones adds, counted once: the sender's next
    /// notification then reveals no gap. `nil` when nobody observes the name.
    mutating func missed(_ report: MissedNotifications, tracksGaps: Bool) -> (observers: [Observer], missed: Int)? {
        let name = report.name
        guard namespaceSlots > 0 else { return slots[.name(name)]?.missed(report, tracksGaps: tracksGaps) }
        let (observers, covered) = observersAndCoverage(of: name)
        if slots[.name(name)] != nil {
            guard let found = slots[.name(name)]?.missed(report, tracksGaps: tracksGaps) else { return nil }
            return (observers, found.missed)
        }
        guard covered else { return nil }
        var slot = Slot(observers: observers)
        slot.sequences = namespaceSequences.remove(name) ?? SenderSequenceTracker()
        let found = slot.missed(report, tracksGaps: tracksGaps)
        namespaceSequences.insert(slot.sequences, for: name)
        return found
    }

    /// How many senders the table remembers for gap detection.
    var rememberedSenders: Int {
        slots.values.reduce(0) { $0 + $1.sequences.count } + namespaceSequences.values.reduce(0) { $0 + $1.count }
    }
}

/// What a queued registration is woken with.
enum RegistrationOutcome: Equatable, Sendable {
    /// Registered: the name is subscribed.
    case registered
    /// The registration ahead failed to subscribe, or the name was
    /// unsubscribed meanwhile: the woken caller subscribes now, as for
    /// ``ObserverTableStateMachine/RegisterAction/subscribe``; its observer is registered.
    case subscribe
    /// The center closed.
    case closed
}
