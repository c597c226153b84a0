import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsSocket

// The anatomy's stamps are process-wide: only this suite starts them, one
// test at a time. Other suites' notifications are stamped too while a test
// here has stamping on; each test reads only its own notifications' stamps.
@Suite("The anatomy: each step of a notification's path, stamped", .serialized, .timeLimit(.minutes(5)))
struct AnatomyTests {
    @Test("between two socket hubs, every notification is stamped at each of its seven steps, in the order taken")
    func everyStepInOrder() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try socketHub(directory, endpoint: "poster")
        let observer = try socketHub(directory, endpoint: "observer")
        let (keys, stamps) = try await stampedRound {
            let keys = Collector<UInt64>()
            let token = try observer.addObserver(.of(HelperPing.self)) { _, delivery in
                keys.append(delivery.timestamp.monotonicNanoseconds)
            }
            let total = 20
            for index in 0..<total { try poster.post(HelperPing(poster: 0, index: index)) }
            #expect(await keys.wait(forCount: total, upTo: .seconds(30)))
            await token.cancelAndWait()
            return keys.values
        }
        poster.close()
        observer.close()
        #expect(keys.count == 20)
        for key in keys {
            var at: [Anatomy.Step: UInt64] = [:]
            for stamp in stamps where stamp.key == key { at[stamp.step] = at[stamp.step] ?? stamp.nanoseconds }
            #expect(
                Set(at.keys) == Set(Anatomy.Step.allCases),
                "notification \(key) has \(at.keys.sorted { $0.rawValue < $1.rawValue })")
            func before(_ first: Anatomy.Step, _ second: Anatomy.Step) {
                guard let a = at[first], let b = at[second] else { return }
                #expect(a <= b, "\(first) at \(a) after \(second) at \(b)")
            }
            before(.postCalled, .encoded)
            before(.encoded, .sent)
            before(.encoded, .received)
            before(.received, .decoded)
            before(.decoded, .queued)
            before(.queued, .handlerBegan)
            // The key is the stamp the envelope carries, taken as the message was made.
            if let made = at[.encoded] { #expect(made >= key) }
        }
    }

    @Test("off, nothing is stamped: posts made between a stop and the next start leave no stamp")
    func offStampsNothing() async throws {
        #expect(Anatomy.stop().isEmpty)
        let hub = try NotificationHub(endpoint: "anatomy", transport: InProcessTransport(bus: InProcessBus()))
        let keys = Collector<UInt64>()
        let token = try hub.addObserver(.of(HelperPing.self)) { _, delivery in
            keys.append(delivery.timestamp.monotonicNanoseconds)
        }
        for index in 0..<10 { try hub.post(HelperPing(poster: 0, index: index)) }
        #expect(await keys.wait(forCount: 10, upTo: .seconds(30)))
        Anatomy.start(capacity: 200_000)
        let stamps = Anatomy.stop()
        let posted = Set(keys.values)
        #expect(!stamps.contains { posted.contains($0.key) })
        // And on again, the same path is stamped: the test above would see it.
        var index = 10
        let (last, again) = try await stampedRound {
            try hub.post(HelperPing(poster: 0, index: index))
            index += 1
            #expect(await keys.wait(forCount: index, upTo: .seconds(30)))
            return Array(keys.values.suffix(1))
        }
        let steps = Set(again.filter { $0.key == last.first }.map(\.step))
        #expect(steps == [.postCalled, .encoded, .sent, .queued, .handlerBegan])
        await token.cancelAndWait()
        hub.close()
    }
}

/// Stamps what `body` does and returns the keys it names with the stamps
/// filed meanwhile. Every notification of this process is stamped while
/// stamping is on, so a flood in another suite can fill the buffer before
/// the body's last step is filed: such a round is played again with twice
/// the room (up to 8 times 200,000 stamps, 38 MB), at most 20 times (the
/// last one is returned whatever it holds).
private func stampedRound(
    _ body: () async throws -> [UInt64]
) async throws -> (keys: [UInt64], stamps: [Anatomy.Stamp]) {
    var round = 0
    while true {
        round += 1
        let capacity = 200_000 << min(round - 1, 3)
        Anatomy.start(capacity: capacity)
        let keys = try await body()
        let stamps = Anatomy.stop()
        if stamps.count < capacity || round == 20 { return (keys, stamps) }
        print("AnatomyTests: the buffer filled beside other suites in round \(round); played again")
    }
}
