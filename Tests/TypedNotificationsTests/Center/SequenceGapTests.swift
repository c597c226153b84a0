import Testing

@_spi(TransportAuthoring) @testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

/// The gap rule as a model: unbounded memory, the same arithmetic written the
/// slow way, with no bound on memory.
private struct GapModel {
    var last: [NotificationSender: UInt64] = [:]

    mutating func note(_ sequence: UInt64, from sender: NotificationSender) -> Int {
        defer { last[sender] = sequence }
        guard let previous = last[sender], sequence > previous else { return 0 }
        let skipped = sequence - previous - 1
        return skipped > UInt64(Int.max) ? Int.max : Int(skipped)
    }
}

@Suite("Guarantee 4: sequence gaps, in bounded memory, whatever the numbers")
struct SenderSequenceTrackerTests {
    let alice = NotificationSender(checkedProcessID: 1, userID: 0, endpoint: "alice", instance: 1)
    let bob = NotificationSender(checkedProcessID: 2, userID: 0, endpoint: "bob", instance: 2)

    @Test("consecutive numbers miss nothing; a skip reports how many; a first number reports nothing")
    func gaps() {
        var tracker = SenderSequenceTracker()
        #expect(tracker.note(5, from: alice) == 0)
        #expect(tracker.note(6, from: alice) == 0)
        #expect(tracker.note(10, from: alice) == 3)
        #expect(tracker.note(1, from: bob) == 0)
        #expect(tracker.note(3, from: bob) == 1)
    }

    @Test("2⁶⁴−1 then 1 is a new run, not a trap and not 2⁶⁴ missed")
    func wrapIsANewRun() {
        var tracker = SenderSequenceTracker()
        #expect(tracker.note(.max, from: alice) == 0)
        #expect(tracker.note(1, from: alice) == 0)
        #expect(tracker.note(2, from: alice) == 0)
        #expect(tracker.note(4, from: alice) == 1)
    }

    @Test("a restart, a replay and a duplicate start a new run; a huge step forward saturates")
    func hostileNumbers() {
        var tracker = SenderSequenceTracker()
        #expect(tracker.note(1_000, from: alice) == 0)
        #expect(tracker.note(1, from: alice) == 0)  // restarted numbering
        #expect(tracker.note(1, from: alice) == 0)  // duplicate
        #expect(tracker.note(0, from: alice) == 0)  // step back
        #expect(tracker.note(.max, from: alice) == Int.max)  // 2⁶⁴−2 skipped: more than Int holds
        #expect(tracker.note(.max, from: alice) == 0)
    }

    @Test("100,000 short-lived senders leave the memory bounded")
    func bounded() {
        var tracker = SenderSequenceTracker(capacity: 1_024)
        var peak = 0
        for instance in 1...100_000 {
            let sender = NotificationSender(
                checkedProcessID: Int32(instance), userID: 0, endpoint: "cron", instance: UInt64(instance))
            #expect(tracker.note(1, from: sender) == 0)
            peak = max(peak, tracker.count)
        }
        #expect(peak <= 2 * 1_024 + 1)
    }

    @Test("a live sender keeps its gap detection among thousands of short-lived ones")
    func liveSenderKeepsGaps() {
        var tracker = SenderSequenceTracker(capacity: 1_024)
        var sequence: UInt64 = 1
        #expect(tracker.note(sequence, from: alice) == 0)
        var gapsSeen = 0
        for round in 0..<100 {
            // 1,000 new senders between two of alice's posts: fewer than the capacity.
            for instance in 0..<1_000 {
                let sender = NotificationSender(
                    checkedProcessID: 9, userID: 0, endpoint: "cron", instance: UInt64(round * 1_000 + instance + 10))
                _ = tracker.note(1, from: sender)
            }
            // Every tenth round alice's previous post was lost.
            sequence += round % 10 == 0 ? 2 : 1
            gapsSeen += tracker.note(sequence, from: alice)
        }
        #expect(gapsSeen == 10)
        #expect(tracker.count <= 2 * 1_024 + 1)
    }

    @Test("random sequences, extremes included, match the model and never trap")
    func matchesModel() {
        var random = SplitMix64(state: 0x5EED)
        let senders = (0..<50).map {
            NotificationSender(checkedProcessID: Int32($0), userID: 0, endpoint: "s", instance: UInt64($0))
        }
        var tracker = SenderSequenceTracker()
        var model = GapModel()
        let interesting: [UInt64] = [
            0, 1, 2, .max, .max - 1, UInt64(Int.max), UInt64(Int.max) + 1, UInt64(Int.max) + 2,
        ]
        var current = [UInt64](repeating: 0, count: senders.count)
        for _ in 0..<200_000 {
            let who = Int(random.next() % UInt64(senders.count))
            switch random.next() % 8 {
            case 0: current[who] = interesting[Int(random.next() % UInt64(interesting.count))]
            case 1: current[who] = random.next()
            case 2: current[who] &+= random.next() % 1_000
            case 3: current[who] &-= random.next() % 3
            default: current[who] &+= 1
            }
            let got = tracker.note(current[who], from: senders[who])
            let expected = model.note(current[who], from: senders[who])
            if got != expected {
                Issue.record("sender \(who) sequence \(current[who]): \(got) != \(expected)")
                return
            }
        }
    }
}

@Suite("Hostile sequence numbers reach observers without a trap", .timeLimit(.minutes(10)))
struct HostileSequenceTests {
    @Test("2⁶⁴−1 then 1 from one forged sender: both delivered, nothing reported missed")
    func twoForgedRecords() async throws {
        let transport = InjectingTransport()
        let hub = try NotificationHub(endpoint: "victim", transport: transport)
        let deliveries = try hub.deliveries(.of(Ping.self))
        let forger = try forgedSender(instance: 7)
        transport.inject(try forgedMessage(Ping(index: 1), from: forger, sequence: .max))
        transport.inject(try forgedMessage(Ping(index: 2), from: forger, sequence: 1))
        // Then a jump that no Int can count, twice: saturated, never overflowed.
        transport.inject(try forgedMessage(Ping(index: 3), from: forger, sequence: .max))
        transport.inject(try forgedMessage(Ping(index: 4), from: forger, sequence: 0))
        transport.inject(try forgedMessage(Ping(index: 5), from: forger, sequence: .max))
        var seen: [(Int, Int)] = []
        for await delivered in deliveries {
            seen.append((delivered.notification.index, delivered.delivery.missed))
            if seen.count == 5 { break }
        }
        #expect(seen.map(\.0) == [1, 2, 3, 4, 5])
        #expect(seen.map(\.1) == [0, 0, Int.max, 0, Int.max])
        #expect(hub.metrics.sequenceGaps == Int.max)
    }

    @Test("gaps that saturate and a full buffer's drops add up without a trap")
    func saturatedGapsInAFullBuffer() async throws {
        let transport = InjectingTransport()
        let hub = try NotificationHub(endpoint: "victim", transport: transport)
        let deliveries = try hub.deliveries(.of(Ping.self), bufferingPolicy: .bufferingNewest(1))
        let forger = try forgedSender(instance: 8)
        // Each pair is a gap of Int.max; the one-slot buffer folds them all into one entry.
        for index in 0..<6 {
            transport.inject(try forgedMessage(Ping(index: index), from: forger, sequence: index % 2 == 0 ? 0 : .max))
        }
        var iterator = deliveries.makeAsyncIterator()
        let last = await iterator.next()
        #expect(last?.notification.index == 5)
        #expect(last?.delivery.missed == Int.max)
    }

    @Test("a live observer of a name that 20,000 short-lived senders post to stays bounded and keeps gaps")
    func manyShortLivedSenders() async throws {
        let transport = InjectingTransport()
        let hub = try NotificationHub(endpoint: "victim", transport: transport)
        let deliveries = try hub.deliveries(.of(Ping.self), bufferingPolicy: .unbounded)
        let live = try forgedSender(endpoint: "daemon", instance: 1)
        var liveSequence: UInt64 = 0
        for round in 0..<20 {
            for instance in 0..<1_000 {
                let cron = try forgedSender(endpoint: "cron", instance: UInt64(10 + round * 1_000 + instance))
                transport.inject(try forgedMessage(Ping(index: -1), from: cron, sequence: 1))
            }
            liveSequence += round == 10 ? 3 : 1  // two of the daemon's posts lost once
            transport.inject(try forgedMessage(Ping(index: round), from: live, sequence: liveSequence))
        }
        var missedByLive = 0
        var liveSeen = 0
        for await delivered in deliveries where delivered.delivery.sender == live {
            missedByLive += delivered.delivery.missed
            liveSeen += 1
            if liveSeen == 20 { break }
        }
        #expect(missedByLive == 2)
        #expect(hub.metrics.sequenceGaps == 2)
        #expect(hub.rememberedSenders <= 2 * SenderSequenceTracker.defaultCapacity + 1)
    }

    @Test("file transport: two forged records in a log do not kill a durable reader, on any restart")
    func forgedRecords() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // The durable reader exists before the forgery, so it replays it.
        do {
            let first = try fileHub(directory, endpoint: "victim", identity: "victim")
            _ = try first.deliveries(.of(Ping.self))
            first.close()
        }
        let forger = try forgedSender(instance: 10)
        let raw = try FileSignalTransport(directory: directory)
        try raw.open(as: forger, receiver: TransportReceiver { _ in })
        try raw.send(try forgedMessage(Ping(index: 1), from: forger, sequence: .max))
        try raw.send(try forgedMessage(Ping(index: 2), from: forger, sequence: 1))
        raw.close()
        for restart in 0..<2 {
            let reader = try fileHub(directory, endpoint: "victim", identity: "victim")
            let deliveries = try reader.deliveries(.of(Ping.self))
            let honest = try fileHub(directory, endpoint: "honest")
            try honest.post(Ping(index: 10 + restart))
            var seen: [Int] = []
            for await delivered in deliveries {
                seen.append(delivered.notification.index)
                if delivered.notification.index == 10 + restart { break }
            }
            // The first run replays the forged pair; each run gets its honest post.
            #expect(seen == (restart == 0 ? [1, 2, 10] : [11]))
            reader.close()
            honest.close()
        }
    }
}
