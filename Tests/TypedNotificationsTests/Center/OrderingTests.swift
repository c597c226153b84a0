import Testing
import TypedNotifications

@Suite("Guarantee 1: per-poster order", .timeLimit(.minutes(10)))
struct OrderingTests {
    @Test("10,000 posts reach three handlers and two sequences in post order")
    func singlePosterOrder() async throws {
        let hub = try makeHub()
        let count = 10_000
        let collectors = (0..<3).map { _ in Collector<Int>() }
        let tokens = try collectors.map { collector in
            try hub.addObserver(.of(Ping.self), bufferingPolicy: .unbounded) { note, _ in collector.append(note.index) }
        }
        let sequences = try (0..<2).map { _ in try hub.notifications(.of(Ping.self), bufferingPolicy: .unbounded) }
        let readers = sequences.map { sequence in
            Task {
                var seen: [Int] = []
                for await note in sequence {
                    seen.append(note.index)
                    if seen.count == count { break }
                }
                return seen
            }
        }
        for index in 0..<count {
            try hub.post(Ping(index: index))
        }
        for collector in collectors {
            await collector.wait(forCount: count)
            #expect(collector.values == Array(0..<count))
        }
        for reader in readers {
            #expect(await reader.value == Array(0..<count))
        }
        withExtendedLifetime(tokens) {}
    }

    @Test("four concurrent posters: each poster's notifications stay in its order")
    func concurrentPostersKeepTheirOrder() async throws {
        let bus = InProcessBus()
        let observerHub = try makeHub(endpoint: "observer", bus: bus)
        let posters = try (0..<4).map { try makeHub(endpoint: "poster\($0)", bus: bus) }
        let perPoster = 5_000
        let collector = Collector<Ping>()
        let token = try observerHub.addObserver(.of(Ping.self), bufferingPolicy: .unbounded) { note, _ in
            collector.append(note)
        }
        await withTaskGroup(of: Void.self) { group in
            for (id, hub) in posters.enumerated() {
                group.addTask {
                    for index in 0..<perPoster {
                        try? hub.post(Ping(index: index, poster: id))
                        if index % 64 == 0 { await Task.yield() }
                    }
                }
            }
        }
        await collector.wait(forCount: 4 * perPoster)
        let received = collector.values
        for id in 0..<4 {
            #expect(received.filter { $0.poster == id }.map(\.index) == Array(0..<perPoster))
        }
        withExtendedLifetime(token) {}
    }

    @Test("delivery metadata: sender, consecutive sequence numbers, rising timestamps")
    func metadata() async throws {
        let bus = InProcessBus()
        let poster = try makeHub(endpoint: "poster", bus: bus)
        let observer = try makeHub(endpoint: "observer", bus: bus)
        let deliveries = try observer.deliveries(.of(Ping.self))
        for index in 0..<100 {
            try poster.post(Ping(index: index))
        }
        try poster.post(Note(text: "other names count separately"))
        var received: [NotificationDelivery] = []
        for await delivered in deliveries {
            received.append(delivered.delivery)
            if received.count == 100 { break }
        }
        #expect(received.map(\.sequence) == Array(1...100))
        #expect(received.allSatisfy { $0.sender == poster.sender && $0.missed == 0 })
        #expect(poster.sender.endpoint == "poster")
        #expect(poster.sender != observer.sender)
        let stamps = received.map(\.timestamp.monotonicNanoseconds)
        #expect(stamps == stamps.sorted())
        #expect(stamps.first.map { $0 > 0 } == true)
        let wall = received[0].timestamp.date.timeIntervalSinceNow
        #expect(abs(wall) < 600)
    }
}

@Suite("Guarantee 2: registration is immediate", .timeLimit(.minutes(10)))
struct RegistrationTests {
    @Test("a post right after notifications(of:) returns is seen, before iteration starts")
    func sequenceRegistersAtCreation() async throws {
        let hub = try makeHub()
        let sequence = try hub.notifications(.of(Ping.self))
        try hub.post(Ping(index: 1))
        var iterator = sequence.makeAsyncIterator()
        #expect(await iterator.next() == Ping(index: 1))
    }

    @Test("a post right after deliveries(of:) returns is seen, across hubs")
    func deliveriesRegisterAtCreation() async throws {
        let bus = InProcessBus()
        let poster = try makeHub(endpoint: "poster", bus: bus)
        let observer = try makeHub(endpoint: "observer", bus: bus)
        let sequence = try observer.deliveries(.of(Ping.self))
        try poster.post(Ping(index: 7))
        for await delivered in sequence {
            #expect(delivered.notification.index == 7)
            break
        }
    }

    @Test("a post right after addObserver returns reaches the handler")
    func handlerRegistersAtReturn() async throws {
        let hub = try makeHub()
        let seen = Collector<Int>()
        let token = try hub.addObserver(.of(Ping.self)) { note, _ in seen.append(note.index) }
        try hub.post(Ping(index: 3))
        await seen.wait(forCount: 1)
        #expect(seen.values == [3])
        await token.cancelAndWait()
    }
}

/// A notification that is a class, to tell whether the very instance arrived.
final class Frame: TypedNotification, Codable {
    static let name: NotificationName = "test.frame"
    let number: Int
    init(number: Int) { self.number = number }
}

/// A notification that refuses to be encoded.
struct Unencodable: TypedNotification {
    static let name: NotificationName = "test.unencodable"
    let marker: Int
    func encodePayload(into buffer: inout [UInt8]) throws {
        throw PayloadDecodingError.invalidUTF8
    }
    init(marker: Int) { self.marker = marker }
    init(payload bytes: UnsafeRawBufferPointer) throws { throw PayloadDecodingError.invalidUTF8 }
}

@Suite("In-process transport", .timeLimit(.minutes(10)))
struct InProcessTransportTests {
    @Test("values are handed over as they are: the same instance, never encoded")
    func valuesAreNotEncoded() async throws {
        let hub = try makeHub()
        let frames = try hub.notifications(.of(Frame.self))
        let unencodable = try hub.notifications(.of(Unencodable.self))
        let frame = Frame(number: 1)
        try hub.post(frame)
        try hub.post(Unencodable(marker: 5))
        for await received in frames {
            #expect(received === frame)
            break
        }
        for await received in unencodable {
            #expect(received.marker == 5)
            break
        }
    }

    @Test("hubs on separate buses do not hear each other; hubs on one bus do")
    func busesIsolate() async throws {
        let shared = InProcessBus()
        let a = try makeHub(endpoint: "a", bus: shared)
        let b = try makeHub(endpoint: "b", bus: shared)
        let loner = try makeHub(endpoint: "loner")
        let atB = try b.notifications(.of(Ping.self))
        let atLoner = try loner.notifications(.of(Ping.self))
        try a.post(Ping(index: 1))
        try loner.post(Ping(index: 2))
        var iterator = atB.makeAsyncIterator()
        #expect(await iterator.next()?.index == 1)
        var lonerIterator = atLoner.makeAsyncIterator()
        #expect(await lonerIterator.next()?.index == 2)
        #expect(b.metrics.received == 1)
        #expect(loner.metrics.received == 1)
    }

    @Test("a different type under the same name is converted through its payload")
    func sameNameOtherType() async throws {
        struct PingView: TypedNotification, Codable {
            static let name: NotificationName = "test.ping"
            var index: Int
        }
        struct Incompatible: TypedNotification, Codable {
            static let name: NotificationName = "test.ping"
            var missingField: [String]
        }
        let hub = try makeHub()
        let views = try hub.notifications(.of(PingView.self))
        let broken = try hub.deliveries(.of(Incompatible.self))
        try hub.post(Ping(index: 42))
        try hub.post(Ping(index: 43))
        var iterator = views.makeAsyncIterator()
        #expect(await iterator.next()?.index == 42)
        // Undecodable posts are not silent: the next decodable one reports them.
        try hub.post(Incompatible(missingField: ["x"]))
        var brokenIterator = broken.makeAsyncIterator()
        let delivered = await brokenIterator.next()
        #expect(delivered?.notification.missingField == ["x"])
        #expect(delivered?.delivery.missed == 2)
        #expect(hub.metrics.undecodable == 2)
    }

    @Test("a closed hub refuses posts and observers, and ends its sequences")
    func closing() async throws {
        let hub = try makeHub()
        let sequence = try hub.notifications(.of(Ping.self))
        try hub.post(Ping(index: 1))
        hub.close()
        hub.close()
        var seen: [Int] = []
        for await note in sequence { seen.append(note.index) }
        #expect(seen == [1])
        #expect(throws: TypedNotificationError.self) { try hub.post(Ping(index: 2)) }
        #expect {
            try hub.notifications(.of(Ping.self))
        } throws: { error in
            (error as? TypedNotificationError)?.code == .closed
        }
        #expect(hub.metrics.activeObservers == 0)
    }
}
