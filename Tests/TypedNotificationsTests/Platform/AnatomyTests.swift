import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsSocket

// The anatomy's stamps are process-wide: only this suite starts them, one
// test at a time. Other suites' notifications are stamped too while a test
// here has stamping on; each test reads only its own notifications' stamps.
@Suite("The anatomy: each step of a notification's path, stamped", .serialized, .timeLimit(.minutes(2)))
struct AnatomyTests {
    @Test("between two socket hubs, every notification is stamped at each of its seven steps, in the order taken")
    func everyStepInOrder() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try socketHub(directory, endpoint: "poster")
        let observer = try socketHub(directory, endpoint: "observer")
        let keys = Collector<UInt64>()
        let token = try observer.addObserver(.of(HelperPing.self)) { _, delivery in
            keys.append(delivery.timestamp.monotonicNanoseconds)
        }
        Anatomy.start(capacity: 200_000)
        let total = 20
        for index in 0..<total { try poster.post(HelperPing(poster: 0, index: index)) }
        #expect(await keys.wait(forCount: total, upTo: .seconds(30)))
        let stamps = Anatomy.stop()
        await token.cancelAndWait()
        poster.close()
        observer.close()
        for key in keys.values {
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
        Anatomy.start(capacity: 200_000)
        try hub.post(HelperPing(poster: 0, index: 10))
        #expect(await keys.wait(forCount: 11, upTo: .seconds(30)))
        let last = keys.values[10]
        let steps = Set(Anatomy.stop().filter { $0.key == last }.map(\.step))
        #expect(steps == [.postCalled, .encoded, .sent, .queued, .handlerBegan])
        await token.cancelAndWait()
        hub.close()
    }
}
