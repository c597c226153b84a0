import Testing

@testable import TypedNotifications

/// The buffer's policies, tested without threads: the waiter is a plain Int.
@Suite("Delivery queue state machine")
struct DeliveryQueueStateMachineTests {
    typealias Machine = DeliveryQueueStateMachine<Int, Int>

    func drain(_ machine: inout Machine) -> [(Int, Int)] {
        var out: [(Int, Int)] = []
        while case .element(let entry) = machine.next(waiter: nil) {
            out.append((entry.element, entry.missedBefore))
        }
        return out
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

    @Test("a waiter is resumed directly with the next element")
    func waiterResumed() {
        var machine = Machine(policy: .unbounded)
        guard case .suspended = machine.next(waiter: 42) else {
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
        guard case .finished = discarding.next(waiter: nil) else {
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
        _ = waiting.next(waiter: 9)
        #expect(waiting.finish(discardingBuffered: true) == 9)
    }

    @Test("a long-lived buffer compacts instead of growing")
    func compaction() {
        var machine = Machine(policy: .unbounded)
        for i in 0..<100_000 {
            _ = machine.enqueue(i, missedBefore: 0)
            _ = machine.enqueue(i, missedBefore: 0)
            _ = machine.next(waiter: nil)
        }
        #expect(machine.count == 100_000)
        let out = drain(&machine)
        #expect(out.count == 100_000)
    }
}
