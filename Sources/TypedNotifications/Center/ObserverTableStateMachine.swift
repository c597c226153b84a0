/// A center's observers per name and each name's transport subscription, as
/// a pure state machine.
///
/// A name is subscribed on the transport exactly while it has observers, and
/// registration is immediate: once it returns, every later post reaches the
/// observer, so a registration that finds its name unsubscribed returns only
/// after subscribing. Subscribing and unsubscribing are system calls (a
/// registry entry written, a log's position read), so they are made with no
/// lock held: this machine lets one thread at a time change a name's
/// subscription, and registrations of that name arriving meanwhile wait in
/// line, each woken with its outcome. Deliveries and registrations of other
/// names never wait for a subscription.
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
        /// detection. Forgotten when the name loses its last observer, so
        /// posts made while nobody listened are not reported as missed.
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

    private(set) var slots: [NotificationName: Slot] = [:]
    private(set) var isClosed = false

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

    /// Registers `observer` for `name` when that takes no transport call.
    mutating func register(_ observer: Observer, named name: NotificationName) -> RegisterAction {
        guard !isClosed else { return .closed }
        guard var slot = slots[name] else {
            slots[name] = Slot(observers: [observer])
            return .subscribe
        }
        guard slot.subscription == .subscribed else { return .busy }
        slot.observers.append(observer)
        slots[name] = slot
        return .registered
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
    /// ``register(_:named:)`` said ``RegisterAction/busy``.
    mutating func enqueue(_ observer: Observer, named name: NotificationName, waiter: Waiter) -> EnqueueAction {
        switch register(observer, named: name) {
        case .closed: return .closed
        case .registered: return .registered
        case .subscribe: return .subscribe
        case .busy:
            slots[name]?.waiting.append((observer, waiter))
            return .queued
        }
    }

    /// What the thread that changed a subscription does next.
    struct Settled {
        /// The queued registrations to wake, with their outcomes.
        var wake: [(waiter: Waiter, outcome: RegistrationOutcome)] = []
        /// The caller must unsubscribe the name now (its observers all left
        /// while it subscribed), and report it with ``unsubscribed(_:)``.
        var unsubscribe = false
        /// The center closed while the caller subscribed: its registration
        /// fails with ``TypedNotificationError/Code/closed``.
        var closed = false
    }

    /// The transport subscribed to `name`, or failed to (the caller's
    /// registration fails then, and its observer is removed).
    mutating func subscribed(_ name: NotificationName, succeeded: Bool) -> Settled {
        guard var slot = slots[name], slot.subscription == .subscribing else { return Settled(closed: true) }
        guard succeeded else {
            slot.observers = []
            return handOver(name, slot)
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
        slots[name] = slot
        return settled
    }

    /// Lets the first queued registration subscribe afresh, or forgets the
    /// name when none waits.
    private mutating func handOver(_ name: NotificationName, _ slot: Slot) -> Settled {
        guard let first = slot.waiting.first else {
            slots[name] = nil
            return Settled()
        }
        var next = Slot(observers: [first.observer])
        next.waiting = Array(slot.waiting.dropFirst())
        slots[name] = next
        return Settled(wake: [(first.waiter, .subscribe)])
    }

    // MARK: - Unregistering

    /// Removes the observer of `name` that `isTheOne` picks. Returns whether
    /// the caller must unsubscribe the name now (it lost its last observer),
    /// and report it with ``unsubscribed(_:)``.
    mutating func unregister(from name: NotificationName, where isTheOne: (Observer) -> Bool) -> Bool {
        guard var slot = slots[name] else { return false }
        slot.observers.removeAll(where: isTheOne)
        let unsubscribe = slot.observers.isEmpty && slot.subscription == .subscribed
        if unsubscribe { slot.subscription = .unsubscribing }
        slots[name] = slot
        return unsubscribe
    }

    /// The transport unsubscribed `name`.
    mutating func unsubscribed(_ name: NotificationName) -> Settled {
        guard let slot = slots[name], slot.subscription == .unsubscribing else { return Settled() }
        return handOver(name, slot)
    }

    // MARK: - Closing

    /// Closes the table. Returns the observers to finish and the queued
    /// registrations to wake with ``RegistrationOutcome/closed``.
    mutating func close() -> (observers: [Observer], waiters: [Waiter]) {
        isClosed = true
        defer { slots = [:] }
        let observers = slots.values.flatMap(\.observers)
        let waiters = slots.values.flatMap { $0.waiting.map(\.waiter) }
        return (observers, waiters)
    }

    // MARK: - Delivering

    /// The observers of `name`.
    func observers(of name: NotificationName) -> [Observer] {
        slots[name]?.observers ?? []
    }

    /// The observers of a received notification, and how many of its
    /// sender's notifications went missing before it (0 unless
    /// `tracksGaps`); `nil` when nobody observes the name.
    mutating func received(
        _ name: NotificationName, sequence: UInt64, from sender: NotificationSender, tracksGaps: Bool
    ) -> (observers: [Observer], gap: Int)? {
        guard tracksGaps else { return slots[name].map { ($0.observers, 0) } }
        // In place: one hash of the name, and the slot is not copied.
        return slots[name]?.received(sequence, from: sender)
    }

    /// The observers of `name` and how many notifications a transport's
    /// report of missed ones adds, counted once: the sender's next
    /// notification then reveals no gap. `nil` when nobody observes the name.
    mutating func missed(_ report: MissedNotifications, tracksGaps: Bool) -> (observers: [Observer], missed: Int)? {
        slots[report.name]?.missed(report, tracksGaps: tracksGaps)
    }

    /// How many senders the table remembers for gap detection.
    var rememberedSenders: Int {
        slots.values.reduce(0) { $0 + $1.sequences.count }
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
