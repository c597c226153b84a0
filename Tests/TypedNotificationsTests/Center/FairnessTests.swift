import NotificationPlatform
import Testing
import TypedNotifications

/// Busy work of about `microseconds`, standing in for a handler that does
/// something with each notification.
func spin(microseconds: Int) {
    let until = SystemClock.monotonicNanoseconds() + UInt64(microseconds) * 1_000
    while SystemClock.monotonicNanoseconds() < until {}
}

/// A ticker due every 10 ms until `stop` fires: how many ticks were due, and
/// how many ran within 10 ms of when they were due. It runs isolated to the
/// caller's actor, or on the global executor for a caller with none.
func tick(
    until stop: Signal,
    isolation: isolated (any Actor)? = #isolation
) async throws -> (due: Int, onTime: Int) {
    let clock = ContinuousClock()
    let start = clock.now
    var due = 0
    var onTime = 0
    while !stop.hasFired {
        due += 1
        let deadline = start.advanced(by: .milliseconds(10 * due))
        try await Task.sleep(until: deadline, clock: clock)
        if clock.now - deadline <= .milliseconds(10) { onTime += 1 }
    }
    return (due, onTime)
}

// Both tests compare the flooded actor with a control that nothing floods,
// measured at the same time: the suite runs beside others (and under
// ThreadSanitizer), so a loaded machine makes both late together, while a
// handler that keeps its actor makes only the flooded side late.
@Suite("A busy handler shares its actor", .serialized, .timeLimit(.minutes(3)))
struct FairnessTests {
    @Test(
        "a main-actor ticker keeps at least 80% of its ticks on time while 100k notifications flood a main-actor handler"
    )
    @MainActor
    func mainActorTickerUnderFlood() async throws {
        let hub = try makeHub()
        let total = 100_000
        let floodHandled = Signal()
        let token = try hub.addObserver(Ping.self, bufferingPolicy: .unbounded, on: .main) { note, _ in
            spin(microseconds: 5)
            if note.index == total - 1 { floodHandled.fire() }
        }
        // The whole flood is queued before the handler can start: this task
        // holds the main actor while it posts.
        for index in 0..<total { try hub.post(Ping(index: index)) }
        let control = Task.detached { try await tick(until: floodHandled) }
        let main = try await tick(until: floodHandled)  // on the main actor, as this test is
        let free = try await control.value
        // Enough ticks fell within the flood for the ratio to mean something.
        #expect(main.due >= 10, "the flood lasted only \(main.due) ticks")
        let mainRatio = Double(main.onTime) / Double(main.due)
        let freeRatio = Double(free.onTime) / Double(max(1, free.due))
        #expect(
            mainRatio >= 0.8 * freeRatio,
            "main actor: \(main.onTime) of \(main.due) on time; a free thread: \(free.onTime) of \(free.due)")
        await token.cancelAndWait()
    }

    @Test("two observers on one executor: while one is flooded, the other's latency stays bounded")
    func twoObserversOneExecutor() async throws {
        let hub = try makeHub()
        let total = 100_000
        let floodHandled = Signal()
        let flood = try hub.addObserver(Ping.self, bufferingPolicy: .unbounded) { note, _ in
            spin(microseconds: 5)
            if note.index == total - 1 { floodHandled.fire() }
        }
        // Latency of each quiet notification on the flooded executor, and on
        // an actor of its own, and whether the flood was still on.
        let quietLatencies = Collector<(nanoseconds: UInt64, duringFlood: Bool)>()
        let controlLatencies = Collector<UInt64>()
        let quiet = try hub.addObserver(Note.self, bufferingPolicy: .unbounded) { _, delivery in
            let now = SystemClock.monotonicNanoseconds()
            quietLatencies.append((now &- delivery.timestamp.monotonicNanoseconds, !floodHandled.hasFired))
        }
        let controlActor = Tally()
        let control = try hub.addObserver(Note.self, bufferingPolicy: .unbounded, on: controlActor) { _, _, delivery in
            controlLatencies.append(SystemClock.monotonicNanoseconds() &- delivery.timestamp.monotonicNanoseconds)
        }
        for index in 0..<total { try hub.post(Ping(index: index)) }
        // One quiet notification every 5 ms while the flood lasts (pacing a
        // load, not waiting for anything).
        var sent = 0
        while !floodHandled.hasFired {
            try hub.post(Note(text: "\(sent)"))
            sent += 1
            try await Task.sleep(for: .milliseconds(5))
        }
        await quietLatencies.wait(forCount: sent)
        await controlLatencies.wait(forCount: sent)
        let during = quietLatencies.values.filter(\.duringFlood).map(\.nanoseconds)
        let worst = during.max() ?? 0
        let controlWorst = controlLatencies.values.max() ?? 0
        #expect(during.count >= 10, "only \(during.count) quiet notifications arrived during the flood")
        #expect(
            worst <= controlWorst + 100_000_000,
            "worst latency during the flood: \(worst / 1_000_000) ms; on a free actor: \(controlWorst / 1_000_000) ms")
        await flood.cancelAndWait()
        await quiet.cancelAndWait()
        await control.cancelAndWait()
        withExtendedLifetime(controlActor) {}
    }
}
