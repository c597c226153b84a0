import Testing

@_spi(TransportAuthoring) @testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

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
        #expect(machine.slots[.name(b)] == nil)
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
        #expect(machine.slots[.name(a)] == nil, "forgotten with its last observer")
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

/// A namespace's observers in the same table: found by every name in it,
/// with gap detection per name that stays bounded however many names appear.
@Suite("Observer table state machine: namespaces")
struct ObserverTableNamespaceTests {
    typealias Machine = ObserverTableStateMachine<String, String>

    let jobs: NotificationNamespace = "com.example.jobs"
    let poster = NotificationSender(checkedProcessID: 7, userID: 0, endpoint: "poster", instance: 1)

    func gap(_ machine: inout Machine, _ name: NotificationName, _ sequence: UInt64) -> Int? {
        machine.received(name, sequence: sequence, from: poster, tracksGaps: true)?.gap
    }

    @Test("a notification reaches its name's observers, then each enclosing namespace's; a near miss none")
    func routing() {
        var machine = Machine()
        #expect(machine.register("all", selecting: .namespace("com")) == .subscribe)
        _ = machine.subscribed(.namespace("com"), succeeded: true)
        #expect(machine.register("jobs", selecting: .namespace(jobs)) == .subscribe)
        _ = machine.subscribed(.namespace(jobs), succeeded: true)
        #expect(machine.register("started", named: "com.example.jobs.started") == .subscribe)
        _ = machine.subscribed("com.example.jobs.started", succeeded: true)
        #expect(machine.observers(of: "com.example.jobs.started") == ["started", "all", "jobs"])
        #expect(machine.observers(of: "com.example.jobs") == ["all", "jobs"])
        #expect(machine.observers(of: "com.example.jobsx") == ["all"])
        #expect(machine.observers(of: "org.example.jobs").isEmpty)
        #expect(machine.received("org.example.jobs", sequence: 1, from: poster, tracksGaps: true) == nil)
    }

    @Test("gaps are counted per name in a namespace, and survive a name observer coming and going")
    func gapsPerName() {
        var machine = Machine()
        _ = machine.register("jobs", selecting: .namespace(jobs))
        _ = machine.subscribed(.namespace(jobs), succeeded: true)
        do {
            let found = gap(&machine, "com.example.jobs.a", 1)
            #expect(found == 0)
        }
        do {
            let found = gap(&machine, "com.example.jobs.b", 1)
            #expect(found == 0, "another name numbers on its own")
        }
        do {
            let found = gap(&machine, "com.example.jobs.a", 4)
            #expect(found == 2)
        }
        // A name observer arrives: it takes over the name's numbers …
        _ = machine.register("a", named: "com.example.jobs.a")
        _ = machine.subscribed("com.example.jobs.a", succeeded: true)
        do {
            let found = gap(&machine, "com.example.jobs.a", 5)
            #expect(found == 0)
        }
        // … and hands them back when it leaves: no gap invented, none lost.
        #expect(machine.unregister(from: "com.example.jobs.a", where: { $0 == "a" }) == true)
        _ = machine.unsubscribed("com.example.jobs.a")
        do {
            let found = gap(&machine, "com.example.jobs.a", 6)
            #expect(found == 0)
        }
        do {
            let found = gap(&machine, "com.example.jobs.a", 9)
            #expect(found == 2)
        }
        // A report of missed ones is counted once.
        let report = MissedNotifications(count: 3, name: "com.example.jobs.b", sender: poster, lastSequence: 4)
        #expect(machine.missed(report, tracksGaps: true)?.missed == 3)
        do {
            let found = gap(&machine, "com.example.jobs.b", 5)
            #expect(found == 0)
        }
    }

    @Test("a namespace's last observer leaving forgets the names only it covered")
    func forgottenWithNamespace() {
        var machine = Machine()
        _ = machine.register("jobs", selecting: .namespace(jobs))
        _ = machine.subscribed(.namespace(jobs), succeeded: true)
        _ = machine.register("all", selecting: .namespace("com"))
        _ = machine.subscribed(.namespace("com"), succeeded: true)
        do {
            let found = gap(&machine, "com.example.jobs.a", 1)
            #expect(found == 0)
        }
        do {
            let found = gap(&machine, "com.other", 1)
            #expect(found == 0)
        }
        #expect(machine.rememberedSenders == 2)
        #expect(machine.unregister(from: .namespace("com"), where: { $0 == "all" }) == true)
        _ = machine.unsubscribed(.namespace("com"))
        #expect(machine.rememberedSenders == 1, "com.other is forgotten, com.example.jobs.a is still covered")
        #expect(machine.unregister(from: .namespace(jobs), where: { $0 == "jobs" }) == true)
        _ = machine.unsubscribed(.namespace(jobs))
        #expect(machine.rememberedSenders == 0)
        #expect(machine.slots.isEmpty)
    }

    @Test("100,000 names through one namespace: the table remembers at most two generations of names")
    func boundedNames() {
        var machine = Machine()
        _ = machine.register("jobs", selecting: .namespace(jobs))
        _ = machine.subscribed(.namespace(jobs), succeeded: true)
        let limit = 2 * Machine.namespaceNameCapacity + 1
        var largest = 0
        for index in 0..<100_000 {
            let name = NotificationName(checked: "com.example.jobs.n\(index)")
            do {
                let found = gap(&machine, name, 1)
                #expect(found == 0)
            }
            // A name heard from often is never forgotten.
            if index % 1_000 == 0 {
                let found = gap(&machine, "com.example.jobs.hot", UInt64(index / 1_000 + 1))
                #expect(found == 0)
            }
            largest = max(largest, machine.namespaceSequences.count)
        }
        #expect(largest <= limit, "\(largest) names remembered")
        #expect(machine.rememberedSenders <= limit, "one sender per name")
        do {
            let found = gap(&machine, "com.example.jobs.hot", 102)
            #expect(found == 1, "the name heard from often kept its numbers")
        }
    }
}

/// The machine by name, as most of these tests use it.
extension ObserverTableStateMachine {
    mutating func register(_ observer: Observer, named name: NotificationName) -> RegisterAction {
        register(observer, selecting: .name(name))
    }

    mutating func enqueue(_ observer: Observer, named name: NotificationName, waiter: Waiter) -> EnqueueAction {
        enqueue(observer, selecting: .name(name), waiter: waiter)
    }

    mutating func subscribed(_ name: NotificationName, succeeded: Bool) -> Settled {
        subscribed(.name(name), succeeded: succeeded)
    }

    mutating func unregister(from name: NotificationName, where isTheOne: (Observer) -> Bool) -> Bool {
        unregister(from: .name(name), where: isTheOne)
    }

    mutating func unsubscribed(_ name: NotificationName) -> Settled {
        unsubscribed(.name(name))
    }
}
