import Testing

@testable import TypedNotifications

/// Who observes which name and who subscribes the transport to it, tested
/// without threads or a transport: observers and waiters are plain strings.
@Suite("Observer table state machine")
struct ObserverTableStateMachineTests {
    typealias Machine = ObserverTableStateMachine<String, String>

    let a: NotificationName = "com.example.a"
    let b: NotificationName = "com.example.b"
    let poster = NotificationSender(checkedProcessID: 7, userID: 0, endpoint: "poster", instance: 1)

    func woken(_ settled: Machine.Settled) -> [String] {
        settled.wake.map { "\($0.waiter)=\($0.outcome)" }
    }

    @Test("the first observer of a name subscribes; later ones of a subscribed name register at once")
    func firstSubscribes() {
        var machine = Machine()
        #expect(machine.register("o1", named: a) == .subscribe)
        #expect(machine.observers(of: a) == ["o1"], "deliveries may reach it while it subscribes")
        #expect(woken(machine.subscribed(a, succeeded: true)) == [])
        #expect(machine.register("o2", named: a) == .registered)
        #expect(machine.register("o3", named: b) == .subscribe, "another name does not wait")
        #expect(machine.observers(of: a) == ["o1", "o2"])
    }

    @Test("registrations arriving while a name subscribes wait, and are registered once it is subscribed")
    func waitWhileSubscribing() {
        var machine = Machine()
        _ = machine.register("o1", named: a)
        #expect(machine.register("o2", named: a) == .busy)
        #expect(machine.enqueue("o2", named: a, waiter: "w2") == .queued)
        #expect(machine.enqueue("o3", named: a, waiter: "w3") == .queued)
        #expect(machine.observers(of: a) == ["o1"], "not registered until subscribed")
        let settled = machine.subscribed(a, succeeded: true)
        #expect(woken(settled) == ["w2=registered", "w3=registered"])
        #expect(!settled.unsubscribe && !settled.closed)
        #expect(machine.observers(of: a) == ["o1", "o2", "o3"])
    }

    @Test("a subscription that settled between busy and enqueue registers without queuing")
    func settledBeforeEnqueue() {
        var machine = Machine()
        _ = machine.register("o1", named: a)
        #expect(machine.register("o2", named: a) == .busy)
        _ = machine.subscribed(a, succeeded: true)
        #expect(machine.enqueue("o2", named: a, waiter: "w2") == .registered)
        #expect(machine.unregister(from: a, where: { $0 == "o1" }) == false)
        #expect(machine.unregister(from: a, where: { $0 == "o2" }) == true)
        #expect(machine.enqueue("o3", named: a, waiter: "w3") == .queued, "unsubscribing: wait")
        #expect(woken(machine.unsubscribed(a)) == ["w3=subscribe"])
    }

    @Test(
        "a failed subscription drops its observer and lets the first waiter try again; with none, the name is forgotten"
    )
    func failedSubscription() {
        var machine = Machine()
        _ = machine.register("o1", named: a)
        _ = machine.enqueue("o2", named: a, waiter: "w2")
        _ = machine.enqueue("o3", named: a, waiter: "w3")
        #expect(woken(machine.subscribed(a, succeeded: false)) == ["w2=subscribe"])
        #expect(machine.observers(of: a) == ["o2"])
        #expect(machine.register("o4", named: a) == .busy, "o2 is subscribing now")
        #expect(woken(machine.subscribed(a, succeeded: true)) == ["w3=registered"])
        #expect(machine.observers(of: a) == ["o2", "o3"])

        _ = machine.register("o5", named: b)
        #expect(woken(machine.subscribed(b, succeeded: false)) == [])
        #expect(machine.slots[b] == nil)
        #expect(machine.register("o6", named: b) == .subscribe)
    }

    @Test("the last observer leaving unsubscribes once; registrations meanwhile subscribe afresh after it")
    func lastLeaves() {
        var machine = Machine()
        _ = machine.register("o1", named: a)
        _ = machine.subscribed(a, succeeded: true)
        _ = machine.register("o2", named: a)
        #expect(machine.unregister(from: a, where: { $0 == "o1" }) == false)
        #expect(machine.unregister(from: a, where: { $0 == "o2" }) == true)
        #expect(machine.unregister(from: a, where: { $0 == "o2" }) == false, "unsubscribed once")
        #expect(machine.register("o3", named: a) == .busy)
        _ = machine.enqueue("o3", named: a, waiter: "w3")
        _ = machine.enqueue("o4", named: a, waiter: "w4")
        #expect(woken(machine.unsubscribed(a)) == ["w3=subscribe"])
        #expect(woken(machine.subscribed(a, succeeded: true)) == ["w4=registered"])
        #expect(machine.observers(of: a) == ["o3", "o4"])

        _ = machine.unregister(from: a, where: { $0 == "o3" })
        #expect(machine.unregister(from: a, where: { $0 == "o4" }) == true)
        #expect(woken(machine.unsubscribed(a)) == [])
        #expect(machine.slots[a] == nil, "forgotten with its last observer")
    }

    @Test("observers that all leave while their name subscribes make the subscriber unsubscribe it")
    func leftWhileSubscribing() {
        var machine = Machine()
        _ = machine.register("o1", named: a)
        #expect(machine.unregister(from: a, where: { $0 == "o1" }) == false, "the subscriber unsubscribes")
        let settled = machine.subscribed(a, succeeded: true)
        #expect(settled.unsubscribe)
        #expect(machine.register("o2", named: a) == .busy)
    }

    @Test("closing returns every observer and waiter, refuses new registrations, and fails a subscription in progress")
    func close() {
        var machine = Machine()
        _ = machine.register("o1", named: a)
        _ = machine.subscribed(a, succeeded: true)
        _ = machine.register("o2", named: b)
        _ = machine.enqueue("o3", named: b, waiter: "w3")
        let closed = machine.close()
        #expect(Set(closed.observers) == ["o1", "o2"])
        #expect(closed.waiters == ["w3"])
        #expect(machine.subscribed(b, succeeded: true).closed == true)
        #expect(machine.register("o4", named: a) == .closed)
        #expect(machine.enqueue("o4", named: a, waiter: "w4") == .closed)
        #expect(machine.unregister(from: a, where: { _ in true }) == false)
    }

    @Test("gaps are counted per sender, a reported loss once, and forgotten with the name's last observer")
    func gaps() {
        var machine = Machine()
        _ = machine.register("o1", named: a)
        _ = machine.subscribed(a, succeeded: true)
        #expect(machine.received(a, sequence: 1, from: poster, tracksGaps: true)?.gap == 0)
        #expect(machine.received(a, sequence: 3, from: poster, tracksGaps: true)?.gap == 1)
        let report = MissedNotifications(count: 2, name: a, sender: poster, lastSequence: 5)
        #expect(machine.missed(report, tracksGaps: true)?.missed == 2)
        #expect(machine.received(a, sequence: 6, from: poster, tracksGaps: true)?.gap == 0, "not counted twice")
        #expect(machine.received(a, sequence: 9, from: poster, tracksGaps: false)?.gap == 0)
        #expect(machine.rememberedSenders == 1)
        #expect(machine.received(b, sequence: 1, from: poster, tracksGaps: true) == nil)

        _ = machine.unregister(from: a, where: { _ in true })
        _ = machine.unsubscribed(a)
        _ = machine.register("o2", named: a)
        _ = machine.subscribed(a, succeeded: true)
        #expect(machine.received(a, sequence: 20, from: poster, tracksGaps: true)?.gap == 0)
    }
}
