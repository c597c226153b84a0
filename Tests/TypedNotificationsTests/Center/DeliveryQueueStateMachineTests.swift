import Testing

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

/// The buffer's policies, tested without threads: the waiter is a plain Int.
@Suite("Delivery queue state machine")
struct DeliveryQueueStateMachineTests {
    typealias Machine = DeliveryQueueStateMachine<Int, Int>

    func drain(_ machine: inout Machine) -> [(Int, Int)] {
        var batch: [Machine.Entry] = []
        _ = machine.take(into: &batch, waiter: nil)
        return batch.map { ($0.element, $0.missedBefore) }
    }

    @Test("elements come out in the order they went in")
    func fifo() {
        var machine = Machine(policy: .unbounded)
        for i in 0..<1000 { _ = machine.enqueue(i, missedBefore: 0) }
        let out = drain(&machine)
        #expect(out.map(\.0) == Array(0..<1000))
        #expect(out.allSatisfy { $0.1 == 0 })
        #expect(machine.dropped == 0)
    }

    @Test("bufferingNewest drops the oldest and reports them on the new head")
    func keepsNewest() {
        var machine = Machine(policy: .bufferingNewest(3))
        var drops = 0
        for i in 0..<10 {
            if case .dropped = machine.enqueue(i, missedBefore: 0) { drops += 1 }
        }
        #expect(drops == 7)
        #expect(machine.dropped == 7)
        let out = drain(&machine)
        #expect(out.map(\.0) == [7, 8, 9])
        #expect(out.map(\.1) == [7, 0, 0])
    }

    @Test("bufferingOldest drops new arrivals and reports them on the next accepted")
    func keepsOldest() {
        var machine = Machine(policy: .bufferingOldest(3))
        for i in 0..<10 { _ = machine.enqueue(i, missedBefore: 0) }
        #expect(machine.dropped == 7)
        let first = drain(&machine)
        #expect(first.map(\.0) == [0, 1, 2])
        #expect(first.map(\.1) == [0, 0, 0])
        _ = machine.enqueue(10, missedBefore: 0)
        let second = drain(&machine)
        #expect(second.map(\.0) == [10])
        #expect(second.map(\.1) == [7])
    }

    @Test("a limit of one still counts every drop")
    func limitOne() {
        var machine = Machine(policy: .bufferingNewest(0))  // treated as 1
        for i in 0..<5 { _ = machine.enqueue(i, missedBefore: 1) }
        let out = drain(&machine)
        // Each element already reported one upstream miss; four were dropped here.
        #expect(out.map(\.0) == [4])
        #expect(out.map(\.1) == [1 + 4 * 2])
    }

    @Test("misses noted before an element ride on it")
    func noteMissed() {
        var machine = Machine(policy: .unbounded)
        machine.noteMissed(2)
        _ = machine.enqueue(1, missedBefore: 3)
        #expect(drain(&machine).map(\.1) == [5])
    }

    @Test("a loss that could not be counted makes the next delivery's count a lower bound, through drops, once")
    func inexactMissed() {
        var machine = Machine(policy: .bufferingNewest(2))
        machine.noteMissed(0, isExact: false)
        _ = machine.enqueue(1, missedBefore: 0)
        _ = machine.enqueue(2, missedBefore: 0)
        // 1 is dropped: its head's inexact count moves to 2, with the drop.
        _ = machine.enqueue(3, missedBefore: 0)
        var batch: [Machine.Entry] = []
        _ = machine.take(into: &batch, waiter: nil)
        #expect(batch.map(\.element) == [2, 3])
        #expect(batch.map(\.missedBefore) == [1, 0])
        #expect(batch.map(\.missedIsExact) == [false, true])
        // Only once: the next element's count is exact again.
        _ = machine.enqueue(4, missedBefore: 0)
        batch = []
        _ = machine.take(into: &batch, waiter: nil)
        #expect(batch.map(\.missedIsExact) == [true])
    }

    @Test("a waiter is resumed directly with the next element")
    func waiterResumed() {
        var machine = Machine(policy: .unbounded)
        var batch: [Machine.Entry] = []
        guard case .suspended = machine.take(into: &batch, waiter: 42) else {
            Issue.record("expected to suspend")
            return
        }
        guard case .resume(let waiter, let entry) = machine.enqueue(7, missedBefore: 0) else {
            Issue.record("expected the waiter to be resumed")
            return
        }
        #expect(waiter == 42)
        #expect(entry.element == 7)
        #expect(machine.count == 0)
    }

    @Test("finishing discards or keeps what is buffered, and returns the waiter")
    func finish() {
        var discarding = Machine(policy: .unbounded)
        _ = discarding.enqueue(1, missedBefore: 0)
        #expect(discarding.finish(discardingBuffered: true) == nil)
        var batch: [Machine.Entry] = []
        guard case .finished = discarding.take(into: &batch, waiter: nil) else {
            Issue.record("expected finished")
            return
        }
        guard case .discarded = discarding.enqueue(2, missedBefore: 0) else {
            Issue.record("expected a discard after finish")
            return
        }

        var keeping = Machine(policy: .unbounded)
        _ = keeping.enqueue(1, missedBefore: 0)
        _ = keeping.finish(discardingBuffered: false)
        #expect(drain(&keeping).map(\.0) == [1])

        var waiting = Machine(policy: .unbounded)
        _ = waiting.take(into: &batch, waiter: 9)
        #expect(waiting.finish(discardingBuffered: true) == 9)
    }

    @Test("a full bufferingNewest buffer stays at its limit over a long run")
    func longRunAtLimit() {
        var machine = Machine(policy: .bufferingNewest(1000))
        for i in 0..<100_000 {
            _ = machine.enqueue(i, missedBefore: 0)
        }
        #expect(machine.count == 1000)
        #expect(machine.dropped == 99_000)
        let out = drain(&machine)
        #expect(out.map(\.0) == Array(99_000..<100_000))
        #expect(out.first?.1 == 99_000)
    }

    @Test("take appends everything buffered to the consumer's batch, in order")
    func takeAppends() {
        var machine = Machine(policy: .bufferingNewest(4))
        for i in 0..<6 { _ = machine.enqueue(i, missedBefore: 0) }
        var batch = [Machine.Entry(element: -1, missedBefore: 0)]
        guard case .taken = machine.take(into: &batch, waiter: nil) else {
            Issue.record("expected entries")
            return
        }
        #expect(batch.map(\.element) == [-1, 2, 3, 4, 5])
        #expect(machine.count == 0)
        // The buffer is usable again after a take.
        _ = machine.enqueue(6, missedBefore: 0)
        #expect(drain(&machine).map(\.0) == [6])
    }
}

/// The tests above use one name for every element.
extension Int: DeliveryKeyed {
    public var deliveryKey: NotificationName { "test.queue" }
}

extension DeliveryQueueStateMachine where Element == Int {
    mutating func noteMissed(_ count: Int, isExact: Bool = true) {
        noteMissed(count, isExact: isExact, for: "test.queue")
    }
}

/// An element posted under a name of a namespace.
struct NamedElement: DeliveryKeyed, Equatable {
    var name: NotificationName
    var index: Int
    var deliveryKey: NotificationName { name }
}

/// A namespace observer's buffer: what it drops is reported on the next
/// delivery of the same name, never on another name's.
@Suite("Delivery queue state machine: losses per name")
struct DeliveryQueuePerNameTests {
    typealias Machine = DeliveryQueueStateMachine<NamedElement, Int>

    /// Received count and reported missed per name.
    func tally(_ machine: inout Machine) -> [String: (received: Int, missed: Int)] {
        var batch: [Machine.Entry] = []
        _ = machine.take(into: &batch, waiter: nil)
        var result: [String: (received: Int, missed: Int)] = [:]
        for entry in batch {
            let name = entry.element.name.rawValue
            let old = result[name] ?? (0, 0)
            result[name] = (old.received + 1, old.missed + entry.missedBefore)
        }
        return result
    }

    @Test(
        "bufferingNewest over three names: each name's received plus missed is its posts, once it is delivered again",
        arguments: [true, false])
    func keepsNewestPerName(newest: Bool) {
        var machine = Machine(policy: newest ? .bufferingNewest(8) : .bufferingOldest(8))
        var posted: [String: Int] = [:]
        func post(_ name: NotificationName, _ index: Int) {
            _ = machine.enqueue(NamedElement(name: name, index: index), missedBefore: 0)
            posted[name.rawValue, default: 0] += 1
        }
        for index in 0..<50 {
            post("com.buf.a", index)
            post("com.buf.b", index)
        }
        for index in 0..<10 { post("com.buf.c", index) }
        var totals = tally(&machine)
        // Each name posted once more, after the drain: it carries what is left.
        for name: NotificationName in ["com.buf.a", "com.buf.b", "com.buf.c"] { post(name, 99) }
        for (name, counts) in tally(&machine) {
            let old = totals[name] ?? (0, 0)
            totals[name] = (old.received + counts.received, old.missed + counts.missed)
        }
        for (name, count) in posted {
            let counts = totals[name] ?? (0, 0)
            #expect(counts.received + counts.missed == count, "\(name): \(counts) of \(count)")
        }
        #expect(machine.namesWithUnreportedLosses == 0)
    }

    @Test("a reported gap rides on the next element of its name, not on another name's")
    func gapPerName() {
        var machine = Machine(policy: .unbounded)
        machine.noteMissed(3, for: "com.gap.a")
        _ = machine.enqueue(NamedElement(name: "com.gap.b", index: 0), missedBefore: 0)
        _ = machine.enqueue(NamedElement(name: "com.gap.a", index: 0), missedBefore: 1)
        var batch: [Machine.Entry] = []
        _ = machine.take(into: &batch, waiter: nil)
        #expect(batch.map(\.missedBefore) == [0, 4])
    }

    @Test("losses of 100,000 names never delivered again stay bounded")
    func bounded() {
        var machine = Machine(policy: .bufferingNewest(1))
        for index in 0..<100_000 {
            _ = machine.enqueue(
                NamedElement(name: NotificationName(checked: "com.many.n\(index)"), index: index), missedBefore: 0)
        }
        #expect(machine.namesWithUnreportedLosses <= 2 * MissedByName.capacity + 1)
        #expect(machine.dropped == 99_999)
    }
}
