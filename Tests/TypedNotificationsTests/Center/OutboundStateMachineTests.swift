import Testing

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

/// Who sends a center's posts, in which batches and with which numbers,
/// tested without threads: posts and waiters are plain strings.
@Suite("Outbound state machine")
struct OutboundStateMachineTests {
    typealias Machine = OutboundStateMachine<String, String>

    let a: NotificationName = "com.example.a"
    let b: NotificationName = "com.example.b"

    func numbers(_ batch: [Machine.Stamped]) -> [String] {
        batch.map { "\($0.post)=\($0.sequence)" }
    }

    func batch(_ next: Machine.Next) -> [Machine.Stamped] {
        if case .send(let batch) = next { return batch }
        Issue.record("expected a batch, got \(next)")
        return []
    }

    @Test("an idle center lets the poster send at once; numbers count per name")
    func idleLeads() {
        var machine = Machine()
        for expected in [(a, 1), (a, 2), (b, 1), (a, 3)] as [(NotificationName, UInt64)] {
            guard case .send(let sequence) = machine.post(named: expected.0) else {
                Issue.record("an idle center must let the poster send")
                return
            }
            #expect(sequence == expected.1)
            guard case .idle = machine.finished(sent: 1) else {
                Issue.record("nothing waited, so the leader is done")
                return
            }
        }
    }

    @Test("posts arriving during a send wait in line and go out in one batch, numbered in line order")
    func groupCommit() {
        var machine = Machine()
        guard case .send(let first) = machine.post(named: a) else {
            Issue.record("must lead")
            return
        }
        #expect(first == 1)
        for (post, name) in [("p1", a), ("p2", b), ("p3", a)] {
            guard case .busy = machine.post(named: name) else {
                Issue.record("must be busy")
                return
            }
            guard case .queued = machine.enqueue(post, named: name, waiter: "w-" + post) else {
                Issue.record("must queue")
                return
            }
        }
        #expect(machine.waitingCount == 3)
        let next = batch(machine.finished(sent: 1))
        #expect(numbers(next) == ["p1=2", "p2=1", "p3=3"])
        #expect(next.map(\.waiter) == ["w-p1", "w-p2", "w-p3"])
        #expect(machine.waitingCount == 0)
        guard case .idle = machine.finished(sent: 3) else {
            Issue.record("must be idle")
            return
        }
        guard case .send(let after) = machine.post(named: a) else {
            Issue.record("must lead")
            return
        }
        #expect(after == 4)
    }

    @Test("a batch holds at most batchLimit posts; the rest wait for the next")
    func batchLimit() {
        var machine = Machine(batchLimit: 2, batchesPerLeader: 10)
        _ = machine.post(named: a)
        for index in 0..<5 { _ = machine.enqueue("p\(index)", named: a, waiter: "w\(index)") }
        #expect(numbers(batch(machine.finished(sent: 1))) == ["p0=2", "p1=3"])
        #expect(numbers(batch(machine.finished(sent: 2))) == ["p2=4", "p3=5"])
        #expect(numbers(batch(machine.finished(sent: 2))) == ["p4=6"])
        guard case .idle = machine.finished(sent: 1) else {
            Issue.record("must be idle")
            return
        }
    }

    @Test("a leader sends at most batchesPerLeader batches, then wakes the oldest waiter to lead")
    func handsOff() {
        var machine = Machine(batchLimit: 1, batchesPerLeader: 2)
        _ = machine.post(named: a)
        for index in 0..<3 { _ = machine.enqueue("p\(index)", named: a, waiter: "w\(index)") }
        #expect(numbers(batch(machine.finished(sent: 1))) == ["p0=2"])
        guard case .handOff(let waiter) = machine.finished(sent: 1) else {
            Issue.record("the leader's budget is spent: it must hand off")
            return
        }
        #expect(waiter == "w1")
        // While the lead is being handed on, new posts wait too.
        guard case .busy = machine.post(named: a) else {
            Issue.record("must be busy while handing off")
            return
        }
        guard case .queued = machine.enqueue("p3", named: a, waiter: "w3") else {
            Issue.record("must queue")
            return
        }
        let led = machine.lead()
        #expect(numbers(led) == ["p1=3"])
        #expect(numbers(batch(machine.finished(sent: 1))) == ["p2=4"])
        guard case .handOff(let nextWaiter) = machine.finished(sent: 1) else {
            Issue.record("must hand off")
            return
        }
        #expect(nextWaiter == "w3")
        #expect(numbers(machine.lead()) == ["p3=5"])
        guard case .idle = machine.finished(sent: 1) else {
            Issue.record("must be idle")
            return
        }
    }

    @Test("a post that fails alone gives its number back: the next post carries it")
    func failedAloneGivesNumberBack() {
        var machine = Machine()
        _ = machine.post(named: a)
        _ = machine.finished(sent: 1)
        guard case .send(let failing) = machine.post(named: a) else {
            Issue.record("must lead")
            return
        }
        #expect(failing == 2)
        _ = machine.finished(sent: 0)
        guard case .send(let next) = machine.post(named: a) else {
            Issue.record("must lead")
            return
        }
        #expect(next == 2)
    }

    @Test("a batch failing part-way gives back exactly the numbers it did not send, per name")
    func partialBatch() {
        var machine = Machine(batchLimit: 10, batchesPerLeader: 10)
        _ = machine.post(named: a)  // a=1
        for (post, name) in [("a2", a), ("b1", b), ("a3", a), ("b2", b), ("a4", a)] {
            _ = machine.enqueue(post, named: name, waiter: "w-" + post)
        }
        // A post arriving while the batch is out waits behind it.
        let first = batch(machine.finished(sent: 1))
        #expect(numbers(first) == ["a2=2", "b1=1", "a3=3", "b2=2", "a4=4"])
        _ = machine.enqueue("b3", named: b, waiter: "w-b3")
        // a2 sent, b1 failed: a3, b2 and a4 were not sent and go back in line,
        // ahead of b3, to be numbered again.
        let unsent = first[2...].map { Machine.Waiting(post: $0.post, name: $0.name, waiter: $0.waiter ?? "") }
        let again = batch(machine.finished(sent: 1, unsent: unsent))
        #expect(numbers(again) == ["a3=3", "b2=1", "a4=4", "b3=2"])
        guard case .idle = machine.finished(sent: 4) else {
            Issue.record("must be idle")
            return
        }
        guard case .send(let nextA) = machine.post(named: a) else {
            Issue.record("must lead")
            return
        }
        #expect(nextA == 5)
    }

    @Test("a post that finds the sender gone idle while it got ready leads instead of queuing")
    func enqueueWhenIdle() {
        var machine = Machine()
        _ = machine.post(named: a)
        _ = machine.finished(sent: 1)
        guard case .send(let sequence) = machine.enqueue("late", named: a, waiter: "w") else {
            Issue.record("an idle center must let the poster send")
            return
        }
        #expect(sequence == 2)
        #expect(machine.waitingCount == 0)
    }

    @Test("after close, new posts are refused; posts already in line are still handed out")
    func close() {
        var machine = Machine()
        _ = machine.post(named: a)
        _ = machine.enqueue("queued", named: a, waiter: "w")
        machine.close()
        guard case .closed = machine.post(named: a) else {
            Issue.record("must refuse")
            return
        }
        guard case .closed = machine.enqueue("late", named: a, waiter: "w2") else {
            Issue.record("must refuse")
            return
        }
        #expect(numbers(batch(machine.finished(sent: 1))) == ["queued=2"])
        guard case .idle = machine.finished(sent: 1) else {
            Issue.record("must be idle")
            return
        }
    }
}
