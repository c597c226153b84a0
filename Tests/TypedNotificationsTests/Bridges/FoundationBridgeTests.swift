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

@Suite("Foundation's NotificationCenter as a typed center", .timeLimit(.minutes(1)))
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
        await token.cancel()
    }

    @Test("cancel removes the Foundation observer and waits for a running handler")
    func cancel() async throws {
        let center = NotificationCenter()
        let entered = Signal()
        let release = DispatchSemaphore(value: 0)
        let finished = Flag()
        let cancelReturned = Flag()
        let runsAfterCancel = Counter()
        let token = try center.addObserver(Ping.self, on: BlockingActor()) { _, _, _ in
            if cancelReturned.isSet { runsAfterCancel.increment() }
            entered.fire()
            release.wait()
            finished.set()
        }
        try center.post(Ping(index: 1))
        await entered.wait()
        let canceller = Task {
            await token.cancel()
            let finishedFirst = finished.isSet
            cancelReturned.set()
            return finishedFirst
        }
        while !token.isCancelled { await Task.yield() }
        release.signal()
        #expect(await canceller.value)
        let before = NotificationCenter.typedMetrics.received
        try center.post(Ping(index: 2))
        // The Foundation observer is gone, so the post is not even received.
        #expect(NotificationCenter.typedMetrics.received == before)
        #expect(runsAfterCancel.count == 0)
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
