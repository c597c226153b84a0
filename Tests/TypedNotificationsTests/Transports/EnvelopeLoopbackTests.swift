import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(CenterAuthoring) @_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(CenterAuthoring) @_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsLoopback
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

/// Encodes as text what it decodes as a number: it never survives a wire.
private struct LossyScore: TypedNotification, Codable {
    static let name: NotificationName = "test.loopback.lossy"
    var points: Int

    init(points: Int) { self.points = points }

    init(from decoder: any Decoder) throws {
        points = try decoder.singleValueContainer().decode(Int.self)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode("\(points)")
    }
}

private let limitedName: NotificationName = "test.loopback.big"

@Suite("The envelope loopback carries every notification as its envelope", .timeLimit(.minutes(5)))
struct EnvelopeLoopbackTests {
    @Test("a payload type that does not round-trip is caught: counted undecodable, never delivered")
    func payloadThatDoesNotRoundTrip() async throws {
        let bus = EnvelopeBus()
        let observer = try NotificationHub(endpoint: "observer", transport: EnvelopeLoopbackTransport(bus: bus))
        defer { observer.close() }
        let poster = try NotificationHub(endpoint: "poster", transport: EnvelopeLoopbackTransport(bus: bus))
        defer { poster.close() }
        let delivered = Collector<Int>()
        let lossy = try observer.addObserver(.of(LossyScore.self)) { score, _ in delivered.append(score.points) }
        defer { lossy.cancel() }
        let sentinel = Signal()
        let after = try observer.addObserver(.of(Ping.self)) { _, _ in sentinel.fire() }
        defer { after.cancel() }

        try poster.post(LossyScore(points: 7))
        // One poster's envelopes reach the receiving thread in order: once
        // the sentinel arrived, the lossy one was decoded before it.
        try poster.post(Ping(index: 1))
        #expect(await sentinel.wait(upTo: safetyNet))
        #expect(delivered.values.isEmpty)
        #expect(observer.metrics.undecodable == 1)
        #expect(observer.transport.statistics.received == 2)

        // The in-process transport hands the value over as it is, so the
        // same post arrives there: the loopback is what shows the loss.
        let plain = try NotificationHub(endpoint: "plain", transport: InProcessTransport(bus: InProcessBus()))
        defer { plain.close() }
        let arrived = Collector<Int>()
        let direct = try plain.addObserver(.of(LossyScore.self)) { score, _ in arrived.append(score.points) }
        defer { direct.cancel() }
        try plain.post(LossyScore(points: 7))
        await arrived.wait(forCount: 1)
        #expect(arrived.values == [7])
    }

    @Test("a subscribe racing close never puts the closed transport back on the bus")
    func subscribeRacingClose() async throws {
        let bus = EnvelopeBus()
        let race = try NotificationNamespace(validating: "test.race")
        let left = Locked<[Int]>([])
        let codes = Locked<[TypedNotificationError.Code?]>([])
        let failure = Slot<String>()
        // The rounds run on a thread of their own, which they block: a test
        // that blocks one of the shared pool's two threads for long stalls
        // every other test's tasks.
        let done = startThread {
            for round in 0..<300 {
                do {
                    let transport = try EnvelopeLoopbackTransport(bus: bus)
                    try transport.open(
                        as: try forgedSender(endpoint: "racer", instance: UInt64(round + 1)),
                        receiver: TransportReceiver(receive: { _ in }))
                    let subscriber = startThread {
                        for _ in 0..<50 {
                            do throws(TypedNotificationError) {
                                try transport.subscribe(to: .namespace(race))
                                codes.withLock { $0.append(nil) }
                            } catch {
                                codes.withLock { $0.append(error.code) }
                            }
                        }
                    }
                    SystemProcess.pause(microseconds: UInt32.random(in: 0...300))
                    transport.close()
                    guard subscriber.wait(nanoseconds: 30_000_000_000) else {
                        failure.set("round \(round): the subscriber never finished")
                        return
                    }
                    if !bus.inboxes(subscribedTo: "test.race.x").isEmpty { left.withLock { $0.append(round) } }
                } catch {
                    failure.set("round \(round): \(error)")
                    return
                }
            }
        }
        #expect(await waitUntil { done.wait(nanoseconds: 0) })
        #expect(failure.current == nil)
        #expect(left.withLock { $0 }.isEmpty, "rounds whose closed transport was still on the bus")
        let outcomes = codes.withLock { $0 }
        #expect(outcomes.allSatisfy { $0 == nil || $0 == .closed })
        #expect(outcomes.contains(.closed), "the close came first in some rounds")
    }

    @Test("an envelope over the receiving center's limit is refused unread, and counted missed once")
    func oversizedRefused() async throws {
        let bus = EnvelopeBus()
        let observer = try NotificationHub(endpoint: "small", transport: EnvelopeLoopbackTransport(bus: bus))
        defer { observer.close() }
        let deliveries = try observer.deliveries(.of([UInt8].self, named: limitedName))
        let poster = try NotificationHub(
            endpoint: "large", transport: EnvelopeLoopbackTransport(bus: bus),
            configuration: NotificationHubConfiguration(maximumPayloadSize: 1024 * 1024))

        try poster.post([1], as: limitedName)
        for _ in 0..<2 { try poster.post([UInt8](repeating: 0x5A, count: 512 * 1024), as: limitedName) }
        try poster.post([2], as: limitedName)

        var seen: [(bytes: [UInt8], missed: Int)] = []
        for await delivered in deliveries {
            seen.append((delivered.notification, delivered.delivery.missed))
            if seen.count == 2 { break }
        }
        #expect(seen.map(\.bytes) == [[1], [2]])
        #expect(seen.map(\.missed) == [0, 2])
        #expect(observer.metrics.undecodable == 2)
        #expect(observer.metrics.sequenceGaps == 0)
        #expect(observer.transport.statistics.refusedOversized == 2)
        #expect(observer.transport.statistics.refusedMalformed == 0)
        #expect(poster.transport.statistics.sent == 4)
        poster.close()
    }
}

@Suite("An observation a center registered and nobody started", .timeLimit(.minutes(5)))
struct UnstartedObservationTests {
    @Test("released unstarted, it leaves its center: no observer, no subscription, nothing received")
    func releasedUnstartedEnds() async throws {
        let bus = EnvelopeBus()
        let poster = try NotificationHub(endpoint: "poster", transport: EnvelopeLoopbackTransport(bus: bus))
        defer { poster.close() }
        let hub = try NotificationHub(endpoint: "observer", transport: EnvelopeLoopbackTransport(bus: bus))
        defer { hub.close() }
        do {
            let observation = try hub.observe(
                String.self, selecting: .name("test.unstarted"), from: .any, bufferingPolicy: .unbounded)
            let copy = observation
            _ = copy
            #expect(hub.metrics.activeObservers == 1)
        }
        #expect(hub.metrics.activeObservers == 0)
        for _ in 0..<100 { try poster.post("after", as: "test.unstarted") }
        // A started observer of another name, posted to after them, marks
        // the end: the loopback delivers one poster's envelopes in order.
        let marker = Signal()
        let token = try hub.addObserver(.of(Ping.self)) { _, _ in marker.fire() }
        defer { token.cancel() }
        try poster.post(Ping(index: 0))
        #expect(await marker.wait(upTo: safetyNet))
        // The name was unsubscribed: the transport received only the marker.
        #expect(hub.transport.statistics.received == 1)
    }

    @Test("started, it lives on its token; it starts only once")
    func startsOnce() async throws {
        let hub = try NotificationHub(endpoint: "observer", transport: InProcessTransport(bus: InProcessBus()))
        defer { hub.close() }
        let observation = try hub.observe(
            String.self, selecting: .name("test.once"), from: .any, bufferingPolicy: .unbounded)
        let record = try observation.start()
        #expect(throws: TypedNotificationError.self) { try observation.start() }
        let sequence = DeliverySequence<String>(observation: record)
        try hub.post("kept", as: "test.once")
        var iterator = sequence.makeAsyncIterator()
        #expect(await iterator.next()?.notification == "kept")
        #expect(hub.metrics.activeObservers == 1)
    }
}
