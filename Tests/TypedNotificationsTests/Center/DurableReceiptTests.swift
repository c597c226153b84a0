import Synchronization
import Testing

@_spi(TransportAuthoring) @testable import TypedNotifications

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
        let token = try hub.addObserver(Ping.self) { ping, _ in handled.append(ping.index) }
        transport.inject(try durableMessage(Ping(index: 0), acknowledged: acknowledged))
        #expect(await handled.wait(forCount: 1, upTo: .seconds(30)))
        #expect(await acknowledged.wait(forCount: 1, upTo: .seconds(30)))
        // Observed only by one whose sender filter passes it by: the
        // identity chose not to see it, so it is acknowledged too.
        token.cancel()
        let filtered = try hub.addObserver(Ping.self, from: .endpoint("someone-else")) { ping, _ in
            handled.append(ping.index)
        }
        transport.inject(try durableMessage(Ping(index: 1), acknowledged: acknowledged))
        #expect(await acknowledged.wait(forCount: 2, upTo: .seconds(30)))
        // The last observer left; a read already in flight hands over one
        // more: nobody took it, so it stays unacknowledged.
        filtered.cancel()
        transport.inject(try durableMessage(Ping(index: 2), acknowledged: acknowledged))
        #expect(acknowledged.values == [0, 1])
        #expect(handled.values == [0])
    }
}
