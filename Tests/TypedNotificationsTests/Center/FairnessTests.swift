import NotificationPlatform
import Testing
import TypedNotifications

/// Busy work of about `microseconds`, standing in for a handler that does
/// something with each notification.
func spin(microseconds: Int) {
    let until = SystemClock.monotonicNanoseconds() + UInt64(microseconds) * 1_000
    while SystemClock.monotonicNanoseconds() < until {}
}

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

        // A ticker on the main actor, due every 10 ms until the flood is handled;
        // a tick is on time if it runs within 10 ms of when it was due.
        let clock = ContinuousClock()
        let start = clock.now
        var due = 0
        var onTime = 0
        var worst = Duration.zero
        while !floodHandled.hasFired {
            due += 1
            let deadline = start.advanced(by: .milliseconds(10 * due))
            try await Task.sleep(until: deadline, clock: clock)
            let late = clock.now - deadline
            worst = max(worst, late)
            if late <= .milliseconds(10) { onTime += 1 }
        }
        // Enough ticks fell within the flood for the ratio to mean something.
        #expect(due >= 10, "the flood lasted only \(due) ticks")
        #expect(Double(onTime) >= 0.8 * Double(due), "\(onTime) of \(due) ticks on time; worst \(worst) late")
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
        // Latency of each quiet notification, and whether the flood was still
        // being handled when it arrived.
        let latencies = Collector<(nanoseconds: UInt64, duringFlood: Bool)>()
        let quiet = try hub.addObserver(Note.self, bufferingPolicy: .unbounded) { _, delivery in
            let now = SystemClock.monotonicNanoseconds()
            latencies.append((now &- delivery.timestamp.monotonicNanoseconds, !floodHandled.hasFired))
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
        await latencies.wait(forCount: sent)
        let during = latencies.values.filter(\.duringFlood).map(\.nanoseconds)
        let worst = during.max() ?? 0
        #expect(during.count >= 10, "only \(during.count) quiet notifications arrived during the flood")
        #expect(worst <= 100_000_000, "worst latency during the flood: \(worst / 1_000_000) ms")
        await flood.cancelAndWait()
        await quiet.cancelAndWait()
    }
}
