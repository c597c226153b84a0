import Dispatch
import Testing
import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

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

/// The most flood deliveries that run on an actor while other work waits for
/// it: one budget of a handler loop, and as many again for the slice that
/// was under way when the other work was queued.
let mostDeliveriesWhileOthersWait = 2 * 256

// Fairness is asserted in deliveries: how many flood deliveries ran on the
// actor while other work was queued for it, which load on the machine
// changes only by descheduling a pool thread (moments the two-observer test
// recognises by a control actor waiting too, and leaves out). The main-actor ticker also measures it in time, as a user sees it
// (a ticker due every 10 ms), asserted only against a free ticker of the same
// run and only when the machine keeps that one on time; the two-observer test
// reports its waits in time and asserts nothing on them. The time limit is a
// safety net: under ThreadSanitizer, beside the other suites, a 100k flood
// took 66 to over 300 seconds.
@Suite("A busy handler shares its actor", .serialized, .timeLimit(.minutes(10)))
struct FairnessTests {
    @Test("a main-actor handler under a 100k flood lets other main-actor work in after every slice")
    func mainActorWorkInterleaves() async throws {
        let hub = try makeHub()
        let total = 100_000
        let handled = Counter()
        let floodHandled = Signal()
        let token = try hub.addObserver(.of(Ping.self), bufferingPolicy: .unbounded, on: .main) { note, _ in
            spin(microseconds: 2)
            handled.increment()
            if note.index == total - 1 { floodHandled.fire() }
        }
        // The whole flood is queued before the handler can start: this task
        // holds the main actor while it posts.
        try await MainActor.run {
            for index in 0..<total { try hub.post(Ping(index: index)) }
        }
        // Other main-actor work, one job at a time, each queued straight on
        // the main actor as a user's `Task { @MainActor in … }` is (not via
        // `Task.yield()`, which goes through the shared pool first, so that a
        // loaded pool, not the flood, would decide when it comes back). Each
        // job notes how many flood deliveries had run when it started; the
        // count read right after the job was surely queued is its baseline,
        // so a descheduled test thread cannot inflate the difference.
        var mostInBetween = 0
        var turns = 0
        while !floodHandled.hasFired {
            let started = Collector<Int>()
            Task { @MainActor in started.append(handled.count) }
            let queuedAt = handled.count
            await started.wait(forCount: 1)
            mostInBetween = max(mostInBetween, (started.values.first ?? 0) - queuedAt)
            turns += 1
        }
        #expect(turns >= 100, "other main-actor work ran only \(turns) times during the flood")
        #expect(
            mostInBetween <= mostDeliveriesWhileOthersWait,
            "\(mostInBetween) flood deliveries ran while other main-actor work waited")
        await token.cancelAndWait()
    }

    @Test(
        "a main-actor ticker keeps at least 80% as many ticks on time as a free thread does while 100k notifications flood a main-actor handler"
    )
    @MainActor
    func mainActorTickerUnderFlood() async throws {
        await MachineLoad.acquire()
        defer { MachineLoad.release() }
        let hub = try makeHub()
        let total = 100_000
        let floodHandled = Signal()
        let token = try hub.addObserver(.of(Ping.self), bufferingPolicy: .unbounded, on: .main) { note, _ in
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
        let report = "main actor: \(main.onTime) of \(main.due) on time; a free thread: \(free.onTime) of \(free.due)"
        // Measured against a baseline of the same run: a ticker on a free
        // thread, which the flood cannot delay, only the machine can. (Before
        // handler loops gave their actor up, the main-actor ticker ran once in
        // the whole flood: 0% on time.) Asserted when the machine keeps the
        // free ticker on time; under ThreadSanitizer it often cannot, and then
        // late ticks say nothing about the actor.
        let mainRatio = Double(main.onTime) / Double(max(main.due, 1))
        let freeRatio = Double(free.onTime) / Double(max(free.due, 1))
        if freeRatio >= 0.8 {
            #expect(mainRatio >= 0.8 * freeRatio, "\(report)")
        } else {
            print(
                "FairnessTests: the machine kept only \(free.onTime) of \(free.due) unflooded ticks on time; \(report)")
        }
        await token.cancelAndWait()
    }

    @Test("two observers on one executor: while one is flooded, the other waits at most a slice")
    func twoObserversOneExecutor() async throws {
        // A comparison of timings within one run: not beside a test that
        // loads the whole machine (the 10,000-name ones).
        await MachineLoad.acquire()
        defer { MachineLoad.release() }
        let hub = try makeHub()
        let total = 100_000
        let handled = Counter()
        let floodHandled = Signal()
        // The flood's first delivery holds the executor until the whole flood
        // and the first quiet notification are queued behind it, so a fast
        // handler cannot keep pace with the poster and leave no flood at all.
        let queued = DispatchSemaphore(value: 0)
        let flood = try hub.addObserver(.of(Ping.self), bufferingPolicy: .unbounded) { note, _ in
            if note.index == 0 { _ = queued.wait(timeout: .now() + .seconds(60)) }
            spin(microseconds: 5)
            handled.increment()
            if note.index == total - 1 { floodHandled.fire() }
        }
        // Each quiet notification is numbered; its handler records how many
        // flood deliveries had run by then, how long it waited, and whether
        // the flood was still on. The poster records how many had run right
        // after the post returned, when the notification was surely queued:
        // the difference is what ran while it waited (a poster descheduled
        // between the two cannot inflate it).
        let waits = Collector<(note: Int, handledBy: Int, nanoseconds: UInt64, duringFlood: Bool)>()
        let queuedAt = Locked<[Int: Int]>([:])
        let quiet = try hub.addObserver(.of(Note.self), bufferingPolicy: .unbounded) { note, delivery in
            let now = SystemClock.monotonicNanoseconds()
            waits.append(
                (
                    Int(note.text) ?? -1, handled.count, now &- delivery.timestamp.monotonicNanoseconds,
                    !floodHandled.hasFired
                ))
        }
        // The same notifications on an actor of their own: what the machine's
        // load alone costs.
        let controlActor = Tally()
        let controlWaits = Collector<(note: Int, nanoseconds: UInt64)>()
        let control = try hub.addObserver(.of(Note.self), bufferingPolicy: .unbounded, on: controlActor) {
            _, note, delivery in
            controlWaits.append(
                (Int(note.text) ?? -1, SystemClock.monotonicNanoseconds() &- delivery.timestamp.monotonicNanoseconds))
        }
        // The flood is posted and the executor let go from a thread of its
        // own: the held delivery takes one of the pool's two threads, and a
        // release that needed the other could wait behind another suite's.
        let failures = Locked<[TypedNotificationError]>([])
        let posted = startThread {
            do throws(TypedNotificationError) {
                for index in 0..<total { try hub.post(Ping(index: index)) }
                try hub.post(Note(text: "0"))
            } catch {
                failures.withLock { $0.append(error) }
            }
            queuedAt.withLock { $0[0] = 0 }
            queued.signal()
        }
        #expect(await waitUntil { posted.wait(nanoseconds: 0) })
        try #require(failures.withLock { $0 }.isEmpty)
        var sent = 1
        // One quiet notification every 2 ms while the flood lasts (pacing a
        // load, not waiting for anything).
        while !floodHandled.hasFired {
            try hub.post(Note(text: "\(sent)"))
            let count = handled.count
            queuedAt.withLock { [sent] in $0[sent] = count }
            sent += 1
            try await Task.sleep(for: .milliseconds(2))
        }
        await waits.wait(forCount: sent)
        await controlWaits.wait(forCount: sent)
        let during = waits.values.filter(\.duringFlood)
        #expect(!during.isEmpty, "no quiet notification arrived during the flood")
        // The pool has a thread per core; one that took the quiet job and was
        // then descheduled by the operating system (other processes on a
        // loaded machine) holds it while the other thread runs flood slices,
        // which no executor can prevent. Such moments show as the control,
        // on an actor of its own, waiting too: those notifications measure
        // the machine, not the executor, and are left out of the bound.
        // A shorter stall of the same kind counts too: while the machine held
        // the control back for d, at most d / 5 µs flood deliveries (each
        // spins 5 µs) could run ahead of the quiet notification for the same
        // reason, so those are allowed on top of the executor's bound (in CI
        // a control held back 2 ms came with 613 flood deliveries).
        let controlWait = Dictionary(
            controlWaits.values.map { ($0.note, $0.nanoseconds) }, uniquingKeysWith: { max($0, $1) })
        let stalled = Set(controlWait.filter { $0.value > 5_000_000 }.keys)
        let measured = during.filter { !stalled.contains($0.note) }
        let baselines = queuedAt.withLock { $0 }
        let ranAhead = measured.map { wait in
            (
                deliveries: wait.handledBy - (baselines[wait.note] ?? wait.handledBy),
                machine: Int((controlWait[wait.note] ?? 0) / 5_000)
            )
        }
        let mostDeliveries = ranAhead.map(\.deliveries).max() ?? 0
        let worstExcess = ranAhead.map { $0.deliveries - $0.machine }.max() ?? 0
        #expect(
            worstExcess <= mostDeliveriesWhileOthersWait,
            "\(worstExcess) flood deliveries (beyond what the machine's stalls explain) ran while a quiet notification waited"
        )
        if measured.count < during.count / 2 {
            print(
                "FairnessTests: the machine stalled a free actor for \(during.count - measured.count) of \(during.count) quiet notifications"
            )
        }
        let worst = during.map(\.nanoseconds).max() ?? 0
        let controlWorst = controlWaits.values.map(\.nanoseconds).max() ?? 0
        // The wait in time is reported, not asserted: the delivery bound above
        // is what the executor promises, and a wait in milliseconds also counts
        // every other process on the machine (in CI a 209 ms wait came with at
        // most 512 flood deliveries of 5 µs ahead of it, and a free actor's 12).
        print(
            "FairnessTests: worst wait during the flood \(worst / 1_000_000) ms"
                + " behind at most \(mostDeliveries) flood deliveries; on a free actor \(controlWorst / 1_000_000) ms")
        await flood.cancelAndWait()
        await quiet.cancelAndWait()
        await control.cancelAndWait()
        withExtendedLifetime(controlActor) {}
    }
}
