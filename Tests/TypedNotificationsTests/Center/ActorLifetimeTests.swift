import Testing
import TypedNotifications

/// The most common shape of an observer: an actor that observes on itself and
/// keeps its own token.
actor SelfObservingModel {
    private var token: ObservationToken?
    private(set) var seen: [Int] = []
    nonisolated let runs = Counter()
    nonisolated let firstRun = Signal()
    nonisolated let released = Signal()

    func start(on hub: NotificationHub<InProcessTransport>) throws {
        token = try hub.addObserver(.of(Ping.self), bufferingPolicy: .unbounded, on: self) { model, note, _ in
            // The isolated parameter, not `self`: nothing captures the actor.
            model.seen.append(note.index)
            model.runs.increment()
            model.firstRun.fire()
        }
    }

    deinit {
        released.fire()
    }
}

@Suite("An actor that observes on itself is released", .timeLimit(.minutes(10)))
struct ActorLifetimeTests {
    /// Whether the hub's one observation ended. The model's `deinit` fires
    /// `released` in its body, and its token, released after the body,
    /// cancels the observation: a test that reads the count as soon as
    /// `released` fired can come between the two (ThreadSanitizer's run
    /// did, once). Nothing else tells of the token's release, so this
    /// looks again until the safety net.
    private func observationEnded(on hub: NotificationHub<InProcessTransport>) async -> Bool {
        await waitUntil { hub.metrics.activeObservers == 0 }
    }

    @Test("when the last outside reference goes, the actor is released and its observation ends")
    func releasedWhenIdle() async throws {
        let hub = try makeHub()
        weak var weakModel: SelfObservingModel?
        let runs: Counter
        let released: Signal
        do {
            let model = SelfObservingModel()
            weakModel = model
            runs = model.runs
            released = model.released
            try await model.start(on: hub)
            try hub.post(Ping(index: 1))
            await model.firstRun.wait()
        }
        #expect(await released.wait(upTo: safetyNet), "the actor was never released")
        #expect(weakModel == nil)
        #expect(await observationEnded(on: hub))
        try hub.post(Ping(index: 2))
        #expect(runs.count == 1)
        #expect(hub.metrics.received == 1)
    }

    @Test("an actor released while a flood is being delivered to it goes too, and no run follows")
    func releasedUnderFlood() async throws {
        let hub = try makeHub()
        let runs: Counter
        let released: Signal
        do {
            let model = SelfObservingModel()
            runs = model.runs
            released = model.released
            try await model.start(on: hub)
            for index in 0..<20_000 { try hub.post(Ping(index: index)) }
            await model.firstRun.wait()
        }
        #expect(await released.wait(upTo: safetyNet), "the actor was never released")
        #expect(await observationEnded(on: hub))
        let afterRelease = runs.count
        try hub.post(Ping(index: -1))
        #expect(runs.count == afterRelease)
    }

    @Test("a center holds the actor a handler runs on weakly: an actor nobody holds ends its observation")
    func unheldActorEndsObservation() async throws {
        let hub = try makeHub()
        let runs = Counter()
        let token = try hub.addObserver(.of(Ping.self), on: Tally()) { _, _, _ in runs.increment() }
        // The loop finds the actor gone when the first notification arrives.
        try hub.post(Ping(index: 1))
        #expect(await waitUntil { token.isCancelled })
        #expect(runs.count == 0)
        #expect(await observationEnded(on: hub))
    }
}
