import Testing
import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// What one churning observer saw, checked against the guarantees.
final class ObserverRecord: Sendable {
    private struct State {
        var firstSeen: [Int?]
        var lastSeen: [Int]
        var outOfOrder = 0
        var waiter: (target: [Int], continuation: CheckedContinuation<Void, Never>)?
    }

    private let state: Locked<State>
    let cancelReturned = Flag()
    let runsAfterCancel = Counter()

    init(posters: Int) {
        state = Locked(
            State(firstSeen: Array(repeating: nil, count: posters), lastSeen: Array(repeating: -1, count: posters)))
    }

    /// Called by the handler.
    func record(_ note: Ping) {
        if cancelReturned.isSet { runsAfterCancel.increment() }
        let ready = state.withLock { state -> CheckedContinuation<Void, Never>? in
            let poster = note.poster
            if state.firstSeen[poster] == nil {
                state.firstSeen[poster] = note.index
            } else if note.index != state.lastSeen[poster] + 1 {
                // A skipped index is a post lost to a live observer; a repeat or
                // a step back breaks order.
                state.outOfOrder += 1
            }
            state.lastSeen[poster] = note.index
            guard let waiter = state.waiter, Self.caughtUp(state.lastSeen, waiter.target) else { return nil }
            state.waiter = nil
            return waiter.continuation
        }
        ready?.resume()
    }

    /// Returns once, for every poster, the observer has seen `target[p]`.
    func waitUntilSeen(_ target: [Int]) async {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> Bool in
                if Self.caughtUp(state.lastSeen, target) { return true }
                state.waiter = (target, continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    var snapshot: (firstSeen: [Int?], lastSeen: [Int], outOfOrder: Int) {
        state.withLock { ($0.firstSeen, $0.lastSeen, $0.outOfOrder) }
    }

    private static func caughtUp(_ seen: [Int], _ target: [Int]) -> Bool {
        zip(seen, target).allSatisfy { $0 >= $1 }
    }
}

/// How far each poster has got: `completed[p]` posts have returned.
final class PosterProgress: Sendable {
    private let completed: Locked<[Int]>
    init(posters: Int) { completed = Locked(Array(repeating: 0, count: posters)) }
    func finished(poster: Int, index: Int) { completed.withLock { $0[poster] = index + 1 } }
    var snapshot: [Int] { completed.withLock { $0 } }
}

@Suite("Stress: posting while observers come and go", .timeLimit(.minutes(10)))
struct StressTests {
    /// 8 tasks post 10,000 notifications each while 8 tasks add and cancel
    /// observers 1,250 times each: 100,000 operations. Every observer checks
    /// that it never runs after its cancel returned, that it missed nothing
    /// posted while it was registered, and that each poster's order held.
    @Test("8 posters × 8 churning observers, 100k operations")
    func postWhileChurning() async throws {
        let posters = 8
        let postsPerPoster = 10_000
        let churners = 8
        let cyclesPerChurner = 1_250
        let hub = try makeHub()
        let progress = PosterProgress(posters: posters)
        let violations = Collector<String>()
        let observersChecked = Counter()
        let deliveriesChecked = Counter()

        try await withThrowingTaskGroup(of: Void.self) { group in
            for poster in 0..<posters {
                group.addTask {
                    for index in 0..<postsPerPoster {
                        try hub.post(Ping(index: index, poster: poster))
                        progress.finished(poster: poster, index: index)
                        if index % 8 == 0 { await Task.yield() }
                    }
                }
            }
            for churner in 0..<churners {
                group.addTask {
                    for cycle in 0..<cyclesPerChurner {
                        let record = ObserverRecord(posters: posters)
                        let token = try hub.addObserver(.of(Ping.self), bufferingPolicy: .unbounded) { note, _ in
                            record.record(note)
                        }
                        // Posts that began after addObserver returned must all arrive.
                        let atRegistration = progress.snapshot
                        await Task.yield()
                        let fence = progress.snapshot
                        // Index `atRegistration[p] + 1` is the first post of p that
                        // surely started after registration; wait for every such post
                        // that has completed by the fence.
                        let target = zip(atRegistration, fence).map { registered, completed in
                            completed - 1 >= registered + 1 ? completed - 1 : -1
                        }
                        await record.waitUntilSeen(target)
                        await token.cancelAndWait()
                        record.cancelReturned.set()

                        let seen = record.snapshot
                        var problems: [String] = []
                        if seen.outOfOrder > 0 {
                            problems.append(
                                "churner \(churner) cycle \(cycle): \(seen.outOfOrder) out of order or skipped")
                        }
                        for poster in 0..<posters where target[poster] >= 0 {
                            if let first = seen.firstSeen[poster], first > atRegistration[poster] + 1 {
                                problems.append(
                                    "churner \(churner) cycle \(cycle): poster \(poster) first seen \(first), expected ≤ \(atRegistration[poster] + 1)"
                                )
                            }
                        }
                        deliveriesChecked.add(seen.lastSeen.count)
                        observersChecked.increment()
                        // Give a late run, if the guarantee were broken, the chance to show.
                        await Task.yield()
                        if record.runsAfterCancel.count > 0 {
                            problems.append("churner \(churner) cycle \(cycle): handler ran after cancel returned")
                        }
                        for problem in problems { violations.append(problem) }
                    }
                }
            }
            try await group.waitForAll()
        }

        let found = violations.values
        #expect(found.isEmpty, "\(found.prefix(10))")
        #expect(observersChecked.count == churners * cyclesPerChurner)
        #expect(hub.metrics.posted == posters * postsPerPoster)
        #expect(hub.metrics.activeObservers == 0)
        #expect(hub.metrics.dropped == 0)
    }
}

extension Counter {
    func add(_ amount: Int) { for _ in 0..<amount { increment() } }
}
