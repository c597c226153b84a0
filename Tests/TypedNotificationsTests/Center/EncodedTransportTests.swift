import Testing
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// A transport that carries envelopes within one process and can be told to
/// lose messages, to test what a hub does for cross-process transports:
/// encode, enforce the payload limit, detect sequence gaps. Every message goes
/// through the wire format: it is sent as envelope bytes and decoded again.
final class LossyEncodedTransport: NotificationTransport {
    private let decoder = Locked(EnvelopeDecoder())
    private let state = Locked<(receiver: TransportReceiver?, subscribed: Set<NotificationName>, lose: Set<UInt64>)>(
        (nil, [], [])
    )
    let sent = Locked<[TransportMessage]>([])

    var payloadForm: TransportPayloadForm { .encoded }

    func lose(sequences: Set<UInt64>) { state.withLock { $0.lose = sequences } }

    func open(as sender: NotificationSender, receiver: TransportReceiver) throws(TypedNotificationError) {
        state.withLock { $0.receiver = receiver }
    }

    func subscribe(to selector: NotificationSelector) throws(TypedNotificationError) {
        let name = try selector.name(servedBy: "recording")
        state.withLock { _ = $0.subscribed.insert(name) }
    }

    func unsubscribe(from selector: NotificationSelector) {
        guard case .name(let name) = selector else { return }
        state.withLock { _ = $0.subscribed.remove(name) }
    }

    func send(_ message: TransportMessage) throws(TypedNotificationError) {
        sent.withLock { $0.append(message) }
        guard case .encoded(let encoded) = message.payload else {
            throw TypedNotificationError(code: .transportFailure, message: "expected an envelope")
        }
        let wire = Array(encoded.envelope)
        let received = try decoder.withLock { (decoder: inout EnvelopeDecoder) throws(TypedNotificationError) in
            try decoder.decode(wire)
        }
        let receiver = state.withLock { state -> TransportReceiver? in
            guard state.subscribed.contains(received.name), !state.lose.contains(received.sequence) else {
                return nil
            }
            return state.receiver
        }
        receiver?.receive(received)
    }

    func close() { state.withLock { $0.receiver = nil } }
}

@Suite("A hub over a cross-process transport", .timeLimit(.minutes(10)))
struct EncodedTransportTests {
    @Test("payloads travel as bytes and are decoded for each observer")
    func encodesAndDecodes() async throws {
        let transport = LossyEncodedTransport()
        let hub = try NotificationHub(endpoint: "bytes", transport: transport)
        let sequence = try hub.notifications(.of(Note.self))
        try hub.post(Note(text: "héllo"))
        var iterator = sequence.makeAsyncIterator()
        #expect(await iterator.next() == Note(text: "héllo"))
        let sent = transport.sent.withLock { $0 }
        guard case .encoded(let encoded) = sent.first?.payload else {
            Issue.record("expected an envelope")
            return
        }
        #expect(try encoded.withUnsafePayload { try Note(payload: $0) } == Note(text: "héllo"))
        #expect(encoded.envelope.starts(with: NotificationEnvelope.magic))
    }

    @Test("a gap in a sender's sequence numbers reaches the observer as missed")
    func sequenceGapsAreReported() async throws {
        let transport = LossyEncodedTransport()
        transport.lose(sequences: [3, 4, 7])
        let hub = try NotificationHub(endpoint: "lossy", transport: transport)
        let sequence = try hub.deliveries(.of(Ping.self))
        for index in 1...8 { try hub.post(Ping(index: index)) }
        var received: [(UInt64, Int)] = []
        for await delivered in sequence {
            received.append((delivered.delivery.sequence, delivered.delivery.missed))
            if received.count == 5 { break }
        }
        #expect(received.map(\.0) == [1, 2, 5, 6, 8])
        #expect(received.map(\.1) == [0, 0, 2, 0, 1])
        #expect(hub.metrics.sequenceGaps == 3)
    }

    @Test("posts made while nobody observed are not reported as missed")
    func noGapAcrossUnobservedPeriods() async throws {
        let transport = LossyEncodedTransport()
        let hub = try NotificationHub(endpoint: "idle", transport: transport)
        do {
            let first = try hub.notifications(.of(Ping.self))
            try hub.post(Ping(index: 1))
            for await _ in first { break }
        }
        for index in 2...5 { try hub.post(Ping(index: index)) }
        let second = try hub.deliveries(.of(Ping.self))
        try hub.post(Ping(index: 6))
        for await delivered in second {
            #expect(delivered.notification.index == 6)
            #expect(delivered.delivery.missed == 0)
            break
        }
        #expect(hub.metrics.sequenceGaps == 0)
    }

    @Test("an over-limit payload fails before anything is sent and uses no sequence number")
    func payloadLimit() async throws {
        let transport = LossyEncodedTransport()
        let hub = try NotificationHub(
            endpoint: "limited",
            transport: transport,
            configuration: .init(maximumPayloadSize: 64)
        )
        let sequence = try hub.deliveries(.of(Note.self))
        #expect {
            try hub.post(Note(text: String(repeating: "x", count: 100)))
        } throws: { error in
            (error as? TypedNotificationError)?.code == .payloadTooLarge
        }
        #expect(transport.sent.withLock { $0.isEmpty })
        try hub.post(Note(text: "fits"))
        for await delivered in sequence {
            #expect(delivered.delivery.sequence == 1)
            #expect(delivered.delivery.missed == 0)
            break
        }
    }

    @Test("a payload that cannot be encoded fails with a typed error")
    func encodingFailure() throws {
        let hub = try NotificationHub(endpoint: "enc", transport: LossyEncodedTransport())
        #expect {
            try hub.post(Unencodable(marker: 1))
        } throws: { error in
            guard let error = error as? TypedNotificationError else { return false }
            return error.code == .payloadEncodingFailed && error.cause is PayloadDecodingError
        }
        #expect(hub.metrics.posted == 0)
    }

    @Test("payload limits outside 0...16 MiB are refused")
    func limitRange() {
        for size in [-1, 16 * 1024 * 1024 + 1] {
            #expect {
                try NotificationHub(
                    transport: LossyEncodedTransport(),
                    configuration: .init(maximumPayloadSize: size)
                )
            } throws: { error in
                (error as? TypedNotificationError)?.code == .invalidConfiguration
            }
        }
        #expect(NotificationHubConfiguration().maximumPayloadSize == 64 * 1024)
    }
}
