/// One buffered element and how many were missed just before it.
struct DeliveryEntry<Element> {
    var element: Element
    var missedBefore: Int
    /// Whether ``missedBefore`` is the whole count: `false` when a transport
    /// reported a loss it could not count (then at least that many).
    var missedIsExact = true
}

extension DeliveryEntry: Sendable where Element: Sendable {}

/// The buffer between posters and one observer, as a pure state machine.
///
/// No locks, no async and no I/O: ``DeliveryQueue`` runs it under a mutex and
/// carries out the actions it returns, so every transition can be tested
/// without threads. `Waiter` is whatever the storage resumes when an element
/// arrives for a suspended consumer (a continuation; a plain value in tests).
struct DeliveryQueueStateMachine<Element, Waiter> {
    typealias Entry = DeliveryEntry<Element>

    private var buffer = FIFOBuffer<Entry>()
    private var waiter: Waiter?
    private var isFinished = false
    // Misses not yet attached to an entry: they ride on the next accepted one.
    private var missedCarry = 0
    private var carryIsExact = true
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
        /// Buffered; nothing to do.
        case buffered
        /// Buffered after dropping the oldest entry, or not buffered because the
        /// buffer keeps its oldest: either way one element, this one, was
        /// dropped.
        case dropped(Element)
        /// The queue is finished; the element was discarded.
        case discarded
    }

    mutating func enqueue(_ element: Element, missedBefore: Int) -> EnqueueAction {
        guard !isFinished else { return .discarded }
        var entry = Entry(
            element: element, missedBefore: missedBefore.addingSaturating(missedCarry), missedIsExact: carryIsExact)
        missedCarry = 0
        carryIsExact = true
        if let waiter {
            // A waiter exists only while the buffer is empty.
            self.waiter = nil
            return .resume(waiter, entry)
        }
        guard let limit, count >= limit else {
            buffer.append(entry)
            return .buffered
        }
        dropped += 1
        if keepsNewest, let oldest = buffer.removeFirst() {
            let lost = oldest.missedBefore.addingSaturating(1)
            if buffer.isEmpty {
                entry.missedBefore = entry.missedBefore.addingSaturating(lost)
                entry.missedIsExact = entry.missedIsExact && oldest.missedIsExact
            } else {
                buffer.updateFirst {
                    $0.missedBefore = $0.missedBefore.addingSaturating(lost)
                    $0.missedIsExact = $0.missedIsExact && oldest.missedIsExact
                }
            }
            buffer.append(entry)
            return .dropped(oldest.element)
        }
        missedCarry = entry.missedBefore.addingSaturating(1)
        carryIsExact = entry.missedIsExact
        return .dropped(element)
    }

    /// Records misses that happened before any element arrived (a payload this
    /// observer could not decode, say): the next accepted element carries them.
    /// Not `isExact`: a loss that could not be counted, at least `count`.
    mutating func noteMissed(_ count: Int, isExact: Bool = true) {
        guard !isFinished else { return }
        missedCarry = missedCarry.addingSaturating(count)
        carryIsExact = carryIsExact && isExact
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
            buffer.move(upTo: Swift.max(1, limit), into: &batch)
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
