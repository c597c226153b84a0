import Foundation
import Testing
import TypedNotifications

/// Code written once against the protocol, run on every center.
func roundTrip(on center: some TypedNotificationCenter) async throws -> [Int] {
    let sequence = try center.notifications(of: Ping.self)
    for index in 0..<5 { try center.post(Ping(index: index)) }
    var seen: [Int] = []
    for await note in sequence {
        seen.append(note.index)
        if seen.count == 5 { break }
    }
    return seen
}

// Serialized: the bridge's metrics are process-wide, and one test reads them.
@Suite("Foundation's NotificationCenter as a typed center", .serialized, .timeLimit(.minutes(5)))
struct FoundationBridgeTests {
    @Test("the same generic code runs on a hub and on NotificationCenter")
    func sameCodeEveryCenter() async throws {
        #expect(try await roundTrip(on: NotificationCenter()) == Array(0..<5))
        #expect(try await roundTrip(on: makeHub()) == Array(0..<5))
    }

    @Test("typed handlers get values and metadata in order")
    func handlers() async throws {
        let center = NotificationCenter()
        let received = Collector<(Int, UInt64)>()
        let token = try center.addObserver(Ping.self, bufferingPolicy: .unbounded) { note, delivery in
            received.append((note.index, delivery.sequence))
        }
        for index in 0..<1_000 { try center.post(Ping(index: index)) }
        await received.wait(forCount: 1_000)
        #expect(received.values.map(\.0) == Array(0..<1_000))
        let sequences = received.values.map(\.1)
        #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $0 + 1 == $1 })
        #expect(center.sender.endpoint == "foundation")
        await token.cancelAndWait()
    }

    @Test("cancel waits for a running handler and removes the Foundation observer", arguments: [false, true])
    func cancel(synchronously: Bool) async throws {
        let center = NotificationCenter()
        let outcome = try await cancelDuringHandlerRun(on: center, synchronously: synchronously)
        #expect(outcome.runFinishedBeforeCancelReturned)
        #expect(outcome.runsAfterCancel == 0)
        // The Foundation observer is gone, so a later post is not even received.
        let before = NotificationCenter.typedMetrics.received
        try center.post(Ping(index: 4))
        #expect(NotificationCenter.typedMetrics.received == before)
    }

    @Test("typed posts are counted in typedMetrics.posted")
    func postsAreCounted() throws {
        let center = NotificationCenter()
        let before = NotificationCenter.typedMetrics.posted
        for index in 0..<3 { try center.post(Ping(index: index)) }
        #expect(NotificationCenter.typedMetrics.posted == before + 3)
    }

    @Test("untyped posts of the same name are ignored by typed observers")
    func untypedPostsIgnored() async throws {
        let center = NotificationCenter()
        let sequence = try center.notifications(of: Ping.self)
        center.post(name: Notification.Name(Ping.name.rawValue), object: nil, userInfo: ["index": 1])
        try center.post(Ping(index: 2))
        var iterator = sequence.makeAsyncIterator()
        #expect(await iterator.next()?.index == 2)
    }

    @Test("untyped Foundation observers still see typed posts")
    func untypedObserversSeeTypedPosts() throws {
        let center = NotificationCenter()
        let names = Collector<String>()
        let observer = center.addObserver(forName: Notification.Name(Note.name.rawValue), object: nil, queue: nil) {
            names.append($0.name.rawValue)
        }
        try center.post(Note(text: "x"))
        #expect(names.values == ["test.note"])
        center.removeObserver(observer)
    }
}
