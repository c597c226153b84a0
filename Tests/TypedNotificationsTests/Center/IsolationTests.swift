import Synchronization
import Testing
import TypedNotifications

/// An actor with state a handler can only touch while isolated to it.
actor Tally {
    var seen: [Int] = []
    func record(_ value: Int) { seen.append(value) }
}

@MainActor
final class MainActorModel {
    var received: [Int] = []
}

@Suite("Where handlers run", .timeLimit(.minutes(10)))
struct IsolationTests {
    @Test("a handler on a given actor runs isolated to it")
    func onActor() async throws {
        let hub = try makeHub()
        let tally = Tally()
        let done = Signal()
        let token = try hub.addObserver(.of(Ping.self), on: tally) { tally, note, _ in
            // Synchronous access to actor state compiles only because the
            // handler is isolated to `tally`; the runtime check confirms it.
            tally.preconditionIsolated()
            tally.record(note.index)
            if note.index == 99 { done.fire() }
        }
        for index in 0..<100 { try hub.post(Ping(index: index)) }
        await done.wait()
        #expect(await tally.seen == Array(0..<100))
        await token.cancelAndWait()
    }

    @Test("a handler on the main actor can update main-actor state")
    @MainActor
    func onMainActor() async throws {
        let hub = try makeHub()
        let model = MainActorModel()
        let done = Signal()
        let token = try hub.addObserver(.of(Ping.self), on: .main) { note, _ in
            MainActor.preconditionIsolated()
            model.received.append(note.index)
            if note.index == 9 { done.fire() }
        }
        for index in 0..<10 { try hub.post(Ping(index: index)) }
        await done.wait()
        #expect(model.received == Array(0..<10))
        await token.cancelAndWait()
    }

    @Test("handlers on the center's executor never run concurrently")
    func centerExecutorIsSerial() async throws {
        let hub = try makeHub()
        let running = Atomic<Int>(0)
        let overlaps = Counter()
        let runs = Collector<Int>()
        let tokens = try (0..<4).map { _ in
            try hub.addObserver(.of(Ping.self), bufferingPolicy: .unbounded) { note, _ in
                hub.executor.preconditionIsolated()
                if running.add(1, ordering: .acquiringAndReleasing).newValue > 1 { overlaps.increment() }
                // A little work so that overlaps would have a chance to show.
                var sum = 0
                for i in 0..<200 { sum &+= i &* note.index }
                _ = sum
                running.subtract(1, ordering: .acquiringAndReleasing)
                runs.append(note.index)
            }
        }
        for index in 0..<2_000 { try hub.post(Ping(index: index)) }
        await runs.wait(forCount: 8_000)
        #expect(overlaps.count == 0)
        for token in tokens { await token.cancelAndWait() }
    }
}

@Suite("Sender identity and filters", .timeLimit(.minutes(10)))
struct SenderFilterTests {
    @Test("observers can filter by endpoint, process, one sender, or everyone but themselves")
    func filters() async throws {
        let bus = InProcessBus()
        let app = try makeHub(endpoint: "app", bus: bus)
        let widget = try makeHub(endpoint: "widget", bus: bus)
        let fromWidget = try app.deliveries(.of(Ping.self), from: .endpoint("widget"))
        let fromOthers = try app.deliveries(.of(Ping.self), from: .others)
        let fromAppOnly = try app.deliveries(.of(Ping.self), from: .only(app.sender))
        let fromThisProcess = try app.deliveries(.of(Ping.self), from: .process(app.sender.processID))
        let fromNowhere = try app.deliveries(.of(Ping.self), from: .process(-1))

        try app.post(Ping(index: 1))
        try widget.post(Ping(index: 2))
        try app.post(Ping(index: 3))
        try widget.post(Ping(index: 4))

        func first(_ sequence: DeliverySequence<Ping>, _ count: Int) async -> [Int] {
            var seen: [Int] = []
            for await delivered in sequence {
                seen.append(delivered.notification.index)
                if seen.count == count { break }
            }
            return seen
        }
        #expect(await first(fromWidget, 2) == [2, 4])
        #expect(await first(fromOthers, 2) == [2, 4])
        #expect(await first(fromAppOnly, 2) == [1, 3])
        #expect(await first(fromThisProcess, 4) == [1, 2, 3, 4])
        var nowhere = fromNowhere.makeAsyncIterator()
        app.close()
        #expect(await nowhere.next() == nil)
        #expect(SenderFilter.endpoint("widget").description == "endpoint widget")
    }
}
