/// One buffered element and how many were missed just before it.
struct DeliveryEntry<Element> {
    var element: Element
    var missedBefore: Int
    /// Whether ``missedBefore`` is the whole count: `false` when a transport
    /// reported a loss it could not count (then at least that many).
    var missedIsExact = true
}

extension DeliveryEntry: Sendable where Element: Sendable {}

/// What a buffered element is counted under: losses are reported per name,
/// on the next delivery of the same name, never on another name's.
protocol DeliveryKeyed {
    /// The name the element was posted under.
    var deliveryKey: NotificationName { get }
}

extension TransportMessage: DeliveryKeyed {
    var deliveryKey: NotificationName { name }
}

/// Losses not yet reported, per name, in bounded memory: at most
/// `2 × capacity` names, kept in two generations (see ``Generations``). A
/// name with losses that no delivery of it has carried while `capacity`
/// other names gained some is forgotten; its losses stay counted in the
/// center's ``NotificationMetrics`` (`dropped`, `undecodable`), not in a
/// delivery. An observer of one name never forgets.
struct MissedByName: Sendable {
    static let capacity = 4_096
    private var counts = Generations<NotificationName, (count: Int, isExact: Bool)>(capacity: capacity)

    var isEmpty: Bool { counts.count == 0 }

    mutating func add(_ count: Int, isExact: Bool, for name: NotificationName) {
        counts.update(name, default: (0, true)) { carried in
            carried = (carried.count.addingSaturating(count), carried.isExact && isExact)
        }
    }

    /// The losses of `name` not yet reported, forgotten here.
    mutating func take(_ name: NotificationName) -> (count: Int, isExact: Bool)? {
        counts.remove(name)
    }

    /// How many names have losses waiting.
    var names: Int { counts.count }
}

/// The buffer between posters and one observer, as a pure state machine.
///
/// What it drops is reported on the next delivery of the same name: for an
/// observer of a namespace, one name's losses never ride on another's.
///
/// No locks, no async and no I/O: ``DeliveryQueue`` runs it under a mutex and
/// carries out the actions it returns, so every transition can be tested
/// without threads. `Waiter` is whatever the storage resumes when an element
/// arrives for a suspended consumer (a continuation; a plain value in tests).
struct DeliveryQueueStateMachine<Element: DeliveryKeyed, Waiter> {
    typealias Entry = DeliveryEntry<Element>

    private var buffer = FIFOBuffer<Entry>()
    private var waiter: Waiter?
    private var isFinished = false
    // Misses not yet attached to an entry: they ride on the next accepted
    // one of their name (a newer element dropped, or reported missed).
    private var carried = MissedByName()
    // Misses older than every buffered entry (the oldest, dropped to make
    // room): they ride on the next entry of their name taken out.
    private var carriedToTake = MissedByName()
    private let limit: Int?
    private let keepsNewest: Bool

    /// How many elements the policy has dropped so far.
    private(set) var dropped = 0

    init(policy: NotificationBufferingPolicy) {
        switch policy.kind {
        case .newest(let n): (limit, keepsNewest) = (n, true)
        case .oldest(let n): (limit, keepsNewest) = (n, false)
        case .unbounded: (limit, keepsNewest) = (nil, true)
        }
    }

    /// Elements waiting to be taken.
    var count: Int { buffer.count }

    /// How many more elements fit before the policy drops one; `nil` when
    /// the buffer is unbounded.
    var room: Int? { limit.map { max(0, $0 - count) } }

    /// Whether a slice of deliveries is waiting: `slice` entries, or half
    /// the buffer when that is less. A transport that keeps what it has not
    /// read (a log) reads no more for this observer until it has caught up.
    func isBackedUp(slice: Int) -> Bool {
        count >= min(slice, max(1, (limit ?? Int.max) / 2))
    }

    enum EnqueueAction {
        /// Hand this entry straight to the suspended consumer.
        case resume(Waiter, Entry)
        /// Deliver this entry inline, now, on the calling thread: the
        /// consumer was suspended and stays so (asked for with `inline`).
        case inline(Entry)
        /// Buffered; nothing to do.
        case buffered
        /// Buffered after dropping the oldest entry, or not buffered because the
        /// buffer keeps its oldest: either way one element, this one, was
        /// dropped.
        case dropped(Element)
        /// The queue is finished; the element was discarded.
        case discarded
    }

    /// Buffers `element`, hands it to the suspended consumer, or with
    /// `inline`, when the consumer is suspended, has it delivered on the
    /// calling thread and leaves the consumer waiting: the buffer is empty
    /// then, so it is next in order.
    mutating func enqueue(_ element: Element, missedBefore: Int, inline: Bool = false) -> EnqueueAction {
        guard !isFinished else { return .discarded }
        var entry = Entry(element: element, missedBefore: missedBefore)
        if !carried.isEmpty, let carry = carried.take(element.deliveryKey) {
            entry.missedBefore = entry.missedBefore.addingSaturating(carry.count)
            entry.missedIsExact = carry.isExact
        }
        if let waiter {
            // A waiter exists only while the buffer is empty.
            attachCarriedToTake(&entry)
            if inline { return .inline(entry) }
            self.waiter = nil
            return .resume(waiter, entry)
        }
        guard let limit, count >= limit else {
            buffer.append(entry)
            return .buffered
        }
        dropped += 1
        if keepsNewest, let oldest = buffer.removeFirst() {
            // Older than everything buffered: the next entry of its name
            // taken out is the first after it.
            carriedToTake.add(
                oldest.missedBefore.addingSaturating(1), isExact: oldest.missedIsExact,
                for: oldest.element.deliveryKey)
            buffer.append(entry)
            return .dropped(oldest.element)
        }
        carried.add(entry.missedBefore.addingSaturating(1), isExact: entry.missedIsExact, for: element.deliveryKey)
        return .dropped(element)
    }

    /// Adds to `entry` what dropped entries of its name, older than it, left.
    private mutating func attachCarriedToTake(_ entry: inout Entry) {
        guard !carriedToTake.isEmpty, let carry = carriedToTake.take(entry.element.deliveryKey) else { return }
        entry.missedBefore = entry.missedBefore.addingSaturating(carry.count)
        entry.missedIsExact = entry.missedIsExact && carry.isExact
    }

    /// Names with losses not yet reported on a delivery (bounded).
    var namesWithUnreportedLosses: Int { carried.names + carriedToTake.names }

    /// Records misses of `name` reported before its next element arrived (a
    /// sequence gap a transport reported, say): the next accepted element of
    /// that name carries them. Not `isExact`: a loss that could not be
    /// counted, at least `count`.
    mutating func noteMissed(_ count: Int, isExact: Bool = true, for name: NotificationName) {
        guard !isFinished else { return }
        carried.add(count, isExact: isExact, for: name)
    }

    enum TakeAction {
        /// Every buffered entry was appended to the batch.
        case taken
        /// Nothing buffered and the queue is finished.
        case finished
        /// Nothing buffered; the caller must suspend (the `Waiter` was stored).
        case suspended
    }

    /// Moves at most `limit` buffered entries, oldest first, to the end of
    /// `batch`; if there are none, stores `waiter` (when given) to be resumed
    /// with the next one.
    ///
    /// Taking many at once lets a consumer that fell behind catch up with one
    /// lock acquisition instead of one per element.
    mutating func take(into batch: inout [Entry], limit: Int = .max, waiter newWaiter: Waiter?) -> TakeAction {
        if count > 0 {
            let start = batch.count
            buffer.move(upTo: Swift.max(1, limit), into: &batch)
            if !carriedToTake.isEmpty {
                for index in start..<batch.count { attachCarriedToTake(&batch[index]) }
            }
            return .taken
        }
        if isFinished {
            return .finished
        }
        guard let newWaiter else { return .suspended }
        precondition(waiter == nil, "a delivery queue has one consumer at a time")
        waiter = newWaiter
        return .suspended
    }

    /// Ends the queue. Returns the suspended waiter, which must be resumed with
    /// no element. With `discardingBuffered`, pending entries are dropped too
    /// (a cancelled observer must not see them); otherwise they are still handed
    /// out before the end.
    mutating func finish(discardingBuffered: Bool) -> Waiter? {
        var discarded: [Entry] = []
        return finish(discardingBuffered: discardingBuffered, discarded: &discarded)
    }

    /// Ends the queue, as ``finish(discardingBuffered:)``, and appends the
    /// entries it discards to `discarded`.
    mutating func finish(discardingBuffered: Bool, discarded: inout [Entry]) -> Waiter? {
        isFinished = true
        if discardingBuffered {
            buffer.move(upTo: .max, into: &discarded)
        }
        defer { waiter = nil }
        return waiter
    }
}

extension DeliveryQueueStateMachine: Sendable where Element: Sendable, Waiter: Sendable {}
