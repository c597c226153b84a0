import Foundation
import Synchronization
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

/// An envelope transport whose sends can be held at a gate, that records
/// every send call as it came, and can be told to fail one message of a
/// batch: to watch what a hub does with posts that arrive during a send.
final class GatedTransport: NotificationTransport {
    /// Each call: the messages it carried (one for `send(_:)`).
    let calls = Locked<[[TransportMessage]]>([])
    /// The first send waits here until the test opens it.
    let gate = OneShotEvent()
    /// Set once the first send is waiting at the gate.
    let atGate = OneShotEvent()
    private let sending = Atomic<Int>(0)
    let overlapped = Atomic<Bool>(false)
    private let first = Atomic<Bool>(true)
    /// In a batch, the message at this index fails (once).
    let failAtIndex = Locked<Int?>(nil)

    var payloadForm: TransportPayloadForm { .encoded }
    func open(as sender: NotificationSender, receiver: TransportReceiver) throws(TypedNotificationError) {}
    func subscribe(to selector: NotificationSelector) throws(TypedNotificationError) {}
    func unsubscribe(from selector: NotificationSelector) {}
    func close() {}

    private func enter() {
        if sending.add(1, ordering: .acquiringAndReleasing).newValue > 1 { overlapped.store(true, ordering: .relaxed) }
        if first.exchange(false, ordering: .acquiringAndReleasing) {
            atGate.signal()
            gate.wait()
        }
    }

    private func leave() { sending.subtract(1, ordering: .acquiringAndReleasing) }

    func send(_ message: TransportMessage) throws(TypedNotificationError) {
        enter()
        defer { leave() }
        calls.withLock { $0.append([message]) }
    }

    func send(batch messages: [TransportMessage]) -> TransportBatchResult {
        enter()
        defer { leave() }
        calls.withLock { $0.append(messages) }
        guard
            let index = failAtIndex.withLock({ value -> Int? in
                defer { value = nil }
                return value
            }),
            index < messages.count
        else { return TransportBatchResult(sent: messages.count) }
        return TransportBatchResult(
            sent: index, failure: TypedNotificationError(code: .storageFull, message: "the disk is full (planted)"))
    }
}

@Suite("Posts of one center: no lock across a send, in order, in batches", .timeLimit(.minutes(10)))
struct OutboundTests {
    /// The sequence number inside each envelope, checked by decoding it.
    func decodedSequences(_ messages: [TransportMessage]) throws -> [UInt64] {
        var decoder = EnvelopeDecoder()
        return try messages.map { message in
            guard case .encoded(let encoded) = message.payload else { throw POSIXError(.EINVAL) }
            let decoded = try decoder.decode(Array(encoded.envelope))
            #expect(decoded.sequence == message.sequence)
            return decoded.sequence
        }
    }

    /// One post held at the gate, then `count` more from threads of their own
    /// once they all wait in line; opens the gate and returns once every
    /// post returned, with each queued post's outcome (`nil`: sent).
    func postBehindGate(_ transport: GatedTransport, count: Int) throws -> (
        hub: NotificationHub<GatedTransport>, outcomes: [Int: TypedNotificationError.Code?]
    ) {
        let hub = try NotificationHub(endpoint: "batch", transport: transport)
        let outcomes = Locked<[Int: TypedNotificationError.Code?]>([:])
        let leader = startThread { _ = try? hub.post(Ping(index: -1)) }
        transport.atGate.wait()
        var done = [leader]
        for index in 0..<count {
            done.append(
                startThread {
                    do throws(TypedNotificationError) {
                        try hub.post(Ping(index: index))
                        outcomes.withLock { $0[index] = .some(nil) }
                    } catch {
                        outcomes.withLock { $0[index] = error.code }
                    }
                })
        }
        #expect(waitOnThisThread { hub.postsInLine == count }, "every post should be waiting in line")
        transport.gate.signal()
        for event in done { event.wait() }
        return (hub, outcomes.withLock { $0 })
    }

    @Test("posts that arrive during a send wait in line and leave together in one batch, numbered in order")
    func groupsPostsBehindASend() throws {
        let transport = GatedTransport()
        let (hub, outcomes) = try postBehindGate(transport, count: 8)

        let calls = transport.calls.withLock { $0 }
        #expect(calls.map(\.count) == [1, 8], "the eight that waited go out as one batch")
        #expect(try decodedSequences(calls.joined().map { $0 }) == Array(1...9))
        #expect(outcomes.count == 8)
        #expect(outcomes.values.allSatisfy { $0 == nil })
        let overlapped = transport.overlapped.load(ordering: .relaxed)
        #expect(!overlapped, "sends of one center never overlap")
        #expect(hub.metrics.posted == 9)
    }

    @Test(
        "a batch that fails part-way: each post gets its own outcome, and the numbers of those not sent are given back")
    func partialFailureLeavesNoGap() throws {
        let transport = GatedTransport()
        transport.failAtIndex.withLock { $0 = 2 }
        let (hub, outcomes) = try postBehindGate(transport, count: 8)

        let calls = transport.calls.withLock { $0 }
        #expect(calls.map(\.count) == [1, 8, 5], "the five behind the failed post go out again")
        guard calls.count == 3 else { return }
        // Sent: the leader's, the first two of the batch, then the five again.
        let sent = [calls[0][0]] + calls[1].prefix(2) + calls[2]
        #expect(try decodedSequences(Array(sent)) == Array(1...8), "no number is skipped")
        #expect(calls[1][2].sequence == 4)
        // The one that failed is the third in the batch, and only it threw.
        let failedIndex = try Ping.decodePayload(fromEncoded: calls[1][2]).index
        let failures = outcomes.filter { $0.value != nil }
        #expect(failures.count == 1)
        #expect(failures[failedIndex] == .some(.storageFull))
        // A later post carries the next number.
        try hub.post(Ping(index: 100))
        #expect(transport.calls.withLock { $0.last?.first?.sequence } == 9)
    }

    @Test("post(contentsOf:) hands the transport its posts 64 at a time, numbered in order, and says how many it sent")
    func postContentsOfBatches() throws {
        let transport = GatedTransport()
        transport.gate.signal()
        let hub = try NotificationHub(endpoint: "batch", transport: transport)
        #expect(try hub.post(contentsOf: (0..<200).map { Ping(index: $0) }) == 200)
        let calls = transport.calls.withLock { $0 }
        // The first alone (it found the line idle), three batches of 64, then
        // the lead passes on and the last seven go out together.
        #expect(calls.map(\.count) == [1, 64, 64, 64, 7])
        let sent = calls.joined().map { $0 }
        #expect(try decodedSequences(sent) == Array(1...200))
        #expect(try sent.map { try Ping.decodePayload(fromEncoded: $0).index } == Array(0..<200))
        #expect(hub.metrics.posted == 200)
    }

    @Test("post(contentsOf:) with a post failing mid-batch: the others are sent without a gap, and its error is thrown")
    func postContentsOfFailure() throws {
        let transport = GatedTransport()
        transport.gate.signal()
        transport.failAtIndex.withLock { $0 = 5 }
        let hub = try NotificationHub(endpoint: "batch", transport: transport)
        #expect(throws: TypedNotificationError.self) {
            try hub.post(contentsOf: (0..<100).map { Ping(index: $0) })
        }
        let calls = transport.calls.withLock { $0 }
        // The first call sent 1; the second failed at its sixth message.
        guard calls.count >= 3 else {
            Issue.record("calls: \(calls.map(\.count))")
            return
        }
        let sent = [calls[0][0]] + calls[1].prefix(5) + calls[2...].joined()
        #expect(try decodedSequences(Array(sent)) == Array(1...99), "no number is skipped")
        let indices = try sent.map { try Ping.decodePayload(fromEncoded: $0).index }
        #expect(Set(indices).count == 99)
        #expect(!indices.contains(try Ping.decodePayload(fromEncoded: calls[1][5]).index))
        #expect(hub.metrics.posted == 99)

        hub.close()
        do {
            try hub.post(contentsOf: [Ping(index: 1)])
            Issue.record("a closed hub took a batch")
        } catch {
            #expect(error.code == .closed)
        }
    }

    @Test(
        "post(contentsOf:) beside another thread posting one at a time: each poster's posts in order, numbers without a gap"
    )
    func postContentsOfBesideSinglePosts() throws {
        let transport = GatedTransport()
        transport.gate.signal()
        let hub = try NotificationHub(endpoint: "batch", transport: transport)
        let single = startThread {
            for index in 0..<500 { _ = try? hub.post(Ping(index: index, poster: 2)) }
        }
        let batched = try hub.post(contentsOf: (0..<500).map { Ping(index: $0, poster: 1) })
        single.wait()
        #expect(batched == 500)
        let sent = transport.calls.withLock { $0 }.joined().map { $0 }
        #expect(try decodedSequences(sent) == Array(1...1_000))
        let pings = try sent.map { try Ping.decodePayload(fromEncoded: $0) }
        #expect(pings.filter { $0.poster == 1 }.map(\.index) == Array(0..<500))
        #expect(pings.filter { $0.poster == 2 }.map(\.index) == Array(0..<500))
        let overlapped = transport.overlapped.load(ordering: .relaxed)
        #expect(!overlapped, "sends of one center never overlap")
    }

    @Test(
        "post(contentsOf:) with a payload that cannot be encoded: the posts before it go out, its error is thrown, the hub posts on"
    )
    func postContentsOfEncodingFailure() throws {
        let transport = GatedTransport()
        transport.gate.signal()
        let hub = try NotificationHub(endpoint: "batch", transport: transport)
        do {
            try hub.post(contentsOf: (0..<10).map { Fragile(index: $0, failing: $0 == 3) })
            Issue.record("a payload that cannot be encoded was posted")
        } catch {
            #expect(error.code == .payloadEncodingFailed)
        }
        let sent = transport.calls.withLock { $0 }.joined().map { $0 }
        #expect(try decodedSequences(sent) == [1, 2, 3])
        // The batch did not keep the lead: a later post goes out at once.
        try hub.post(Ping(index: 0))
        #expect(transport.calls.withLock { $0.last?.first?.sequence } == 1)
        #expect(hub.metrics.posted == 4)
    }

    @Test("close returns while a post is being sent; the hub holds no lock across the transport's send")
    func closeDoesNotWaitForASend() throws {
        let transport = GatedTransport()
        let hub = try NotificationHub(endpoint: "close", transport: transport)
        let poster = startThread { _ = try? hub.post(Ping(index: 0)) }
        transport.atGate.wait()
        let closed = startThread { hub.close() }
        let closedWhileSending = closed.wait(nanoseconds: 30_000_000_000)
        transport.gate.signal()
        poster.wait()
        #expect(closedWhileSending, "close waited for a send to finish")
        #expect(throws: TypedNotificationError.self) { try hub.post(Ping(index: 1)) }
    }
}

extension Ping {
    /// The value inside a message's envelope.
    static func decodePayload(fromEncoded message: TransportMessage) throws -> Ping {
        guard case .encoded(let encoded) = message.payload else { throw POSIXError(.EINVAL) }
        return try encoded.withUnsafePayload { try Ping(payload: $0) }
    }
}

/// A notification whose payload refuses to be encoded when told to.
struct Fragile: TypedNotification {
    static let name: NotificationName = "test.fragile"
    var index: Int
    var failing: Bool

    struct Refused: Error {}

    func encodePayload(into buffer: inout [UInt8]) throws {
        if failing { throw Refused() }
        buffer.append(UInt8(truncatingIfNeeded: index))
    }

    init(index: Int, failing: Bool) {
        self.index = index
        self.failing = failing
    }

    init(payload bytes: UnsafeRawBufferPointer) throws {
        index = Int(bytes.first ?? 0)
        failing = false
    }
}
