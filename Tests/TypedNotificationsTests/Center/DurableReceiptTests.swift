import Synchronization
import Testing

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

/// What a hub does with a durable message's receipt (one a transport such as
/// Redis's consumer groups acknowledges only once it was handled).
@Suite("Durable receipts: handled, filtered out, or arrived with nobody observing")
struct DurableReceiptTests {
    /// A message of `value` from another sender whose receipt counts its acknowledgements.
    private func durableMessage(_ value: Ping, acknowledged: Collector<Int>) throws -> TransportMessage {
        var message = try forgedMessage(value, from: forgedSender(instance: 7), sequence: UInt64(value.index + 1))
        message.receipt = DeliveryReceipt.unlessAbandoned { acknowledged.append(value.index) }
        return message
    }

    @Test(
        "a durable message that arrives after the name's last observer left is not acknowledged (it comes again), while one every observer's filter passed by is"
    )
    func nobodyObserving() async throws {
        let transport = InjectingTransport()
        let hub = try NotificationHub(endpoint: "durable", transport: transport)
        defer { hub.close() }
        let acknowledged = Collector<Int>()
        let handled = Collector<Int>()
        // Observed and handled: acknowledged.
        let token = try hub.addObserver(.of(Ping.self)) { ping, _ in handled.append(ping.index) }
        transport.inject(try durableMessage(Ping(index: 0), acknowledged: acknowledged))
        #expect(await handled.wait(forCount: 1, upTo: safetyNet))
        #expect(await acknowledged.wait(forCount: 1, upTo: safetyNet))
        // Observed only by one whose sender filter passes it by: the
        // identity chose not to see it, so it is acknowledged too.
        token.cancel()
        let filtered = try hub.addObserver(.of(Ping.self), from: .endpoint("someone-else")) { ping, _ in
            handled.append(ping.index)
        }
        transport.inject(try durableMessage(Ping(index: 1), acknowledged: acknowledged))
        #expect(await acknowledged.wait(forCount: 2, upTo: safetyNet))
        // The last observer left; a read already in flight hands over one
        // more: nobody took it, so it stays unacknowledged.
        filtered.cancel()
        transport.inject(try durableMessage(Ping(index: 2), acknowledged: acknowledged))
        #expect(acknowledged.values == [0, 1])
        #expect(handled.values == [0])
    }

    @Test(
        "a durable message one observer's filter passed by is handled, though the only observer that took it ended holding it"
    )
    func passedByThenAbandoned() async throws {
        let transport = InjectingTransport()
        let hub = try NotificationHub(endpoint: "durable", transport: transport)
        defer { hub.close() }
        let acknowledged = Collector<Int>()
        let elsewhere = try hub.addObserver(.of(Ping.self), from: .endpoint("someone-else")) { _, _ in }
        defer { elsewhere.cancel() }
        var sequence: DeliverySequence<Ping>? = try hub.deliveries(.of(Ping.self))
        var message = try forgedMessage(Ping(index: 0), from: forgedSender(instance: 7), sequence: 1)
        message.receipt = DeliveryReceipt.unlessAbandonedOrDropped { acknowledged.append(0) }
        transport.inject(message)
        #expect(acknowledged.values.isEmpty)
        // The sequence goes without being iterated: it abandons what it holds.
        withExtendedLifetime(sequence) { sequence = nil }
        #expect(await acknowledged.wait(forCount: 1, upTo: safetyNet))
    }

    @Test("a durable message a buffer dropped is not acknowledged; the one it kept is, once handled")
    func droppedByBuffer() async throws {
        let transport = InjectingTransport()
        let hub = try NotificationHub(endpoint: "durable", transport: transport)
        defer { hub.close() }
        let acknowledged = Collector<Int>()
        let sequence = try hub.deliveries(.of(Ping.self), bufferingPolicy: .bufferingNewest(1))
        for index in 0..<2 {
            var message = try forgedMessage(
                Ping(index: index), from: forgedSender(instance: 7), sequence: UInt64(index + 1))
            message.receipt = DeliveryReceipt.unlessAbandonedOrDropped { acknowledged.append(index) }
            transport.inject(message)
        }
        var iterator = sequence.makeAsyncIterator()
        let kept = await iterator.next()
        #expect(kept?.notification.index == 1)
        #expect(kept?.delivery.missed == 1)
        // Asking for the next lets go of the one handled.
        let waiting = Task { _ = await iterator.next() }
        #expect(await acknowledged.wait(forCount: 1, upTo: safetyNet))
        waiting.cancel()
        _ = await waiting.value
        #expect(acknowledged.values == [1])
    }
}
