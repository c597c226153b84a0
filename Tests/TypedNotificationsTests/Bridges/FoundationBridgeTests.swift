import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotifications

/// Code written once against the protocol, run on every center.
func roundTrip(on center: some TypedNotificationCenter) async throws -> [Int] {
    let sequence = try center.notifications(.of(Ping.self))
    for index in 0..<5 { try center.post(Ping(index: index)) }
    var seen: [Int] = []
    for await note in sequence {
        seen.append(note.index)
        if seen.count == 5 { break }
    }
    return seen
}

// Serialized: the bridge's metrics are process-wide, and one test reads them.
@Suite("Foundation's NotificationCenter as a typed center", .serialized, .timeLimit(.minutes(10)))
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
        let token = try center.addObserver(.of(Ping.self), bufferingPolicy: .unbounded) { note, delivery in
            received.append((note.index, delivery.sequence))
        }
        for index in 0..<1_000 { center.post(Ping(index: index)) }
        await received.wait(forCount: 1_000)
        #expect(received.values.map(\.0) == Array(0..<1_000))
        let sequences = received.values.map(\.1)
        #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $0 + 1 == $1 })
        #expect(center.sender.endpoint == "foundation")
        await token.cancelAndWait()
    }

    @Test("each identity numbers its posts of a name from 1, apart from the center's other identities")
    func identitiesNumberApart() async throws {
        let center = NotificationCenter()
        let first = try center.endpoint("first")
        let second = try center.endpoint("second")
        let seen = Collector<(String, UInt64)>()
        let token = try center.addObserver(.of(Ping.self), bufferingPolicy: .unbounded) { _, delivery in
            seen.append((delivery.sender.endpoint, delivery.sequence))
        }
        first.post(Ping(index: 0))
        second.post(Ping(index: 1))
        first.post(Ping(index: 2))
        center.post(Ping(index: 3))
        second.post(Ping(index: 4))
        // Another name is counted apart.
        first.post(Note(text: "elsewhere"))
        first.post(Ping(index: 5))
        await seen.wait(forCount: 6)
        func numbers(of endpoint: String) -> [UInt64] { seen.values.filter { $0.0 == endpoint }.map(\.1) }
        #expect(numbers(of: "first") == [1, 2, 3])
        #expect(numbers(of: "second") == [1, 2])
        #expect(numbers(of: "foundation") == [1])
        // An endpoint made again is a new identity, numbering from 1.
        let again = try center.endpoint("first")
        again.post(Ping(index: 6))
        await seen.wait(forCount: 7)
        #expect(seen.values.last?.1 == 1)
        #expect(again.sender != first.sender)
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
        center.post(Ping(index: 4))
        #expect(NotificationCenter.typedMetrics.received == before)
    }

    @Test("typed posts are counted in typedMetrics.posted")
    func postsAreCounted() throws {
        let center = NotificationCenter()
        let before = NotificationCenter.typedMetrics.posted
        for index in 0..<3 { center.post(Ping(index: index)) }
        #expect(NotificationCenter.typedMetrics.posted == before + 3)
    }

    @Test("an untyped post of a typed name without a value is counted as missed by a typed observer with a payload")
    func untypedPostsCounted() async throws {
        let center = NotificationCenter()
        let before = NotificationCenter.typedMetrics.undecodable
        let sequence = try center.deliveries(.of(Ping.self))
        center.post(name: Notification.Name(Ping.name), object: nil, userInfo: ["index": 1])
        center.post(Ping(index: 2))
        var iterator = sequence.makeAsyncIterator()
        let delivered = await iterator.next()
        #expect(delivered?.notification.index == 2)
        #expect(delivered?.delivery.missed == 1)
        #expect(NotificationCenter.typedMetrics.undecodable == before + 1)
    }

    @Test("an untyped post reaches name-only observers and payload-less typed observers, from untypedSender")
    func untypedPostsReachPayloadless() async throws {
        let center = NotificationCenter()
        let typed = try center.deliveries(.of(CacheCleared.self))
        let named = try center.deliveries(.of(RawNotification.self, named: CacheCleared.name))
        let others = try center.deliveries(.of(CacheCleared.self), from: .others)
        center.post(name: Notification.Name(CacheCleared.name), object: self as AnyObject?)
        center.post(CacheCleared())
        center.post(name: Notification.Name(CacheCleared.name), object: nil)
        var typedIterator = typed.makeAsyncIterator()
        var namedIterator = named.makeAsyncIterator()
        var othersIterator = others.makeAsyncIterator()
        let untyped = NotificationCenter.untypedSender
        for sender in [untyped, center.sender, untyped] {
            #expect(await typedIterator.next()?.delivery.sender == sender)
            #expect(await namedIterator.next()?.delivery.sender == sender)
        }
        // `.others` of this center: the two untyped posts, not its own typed one.
        let first = await othersIterator.next()?.delivery
        let second = await othersIterator.next()?.delivery
        #expect(first?.sender == untyped)
        #expect(second?.sender == untyped)
        #expect(first?.sequence == 0)
    }

    @Test("an untyped poster that puts a value under the value key reaches typed observers")
    func untypedPosterWithValue() async throws {
        let center = NotificationCenter()
        let sequence = try center.deliveries(.of(Ping.self))
        center.post(
            name: Notification.Name(Ping.name), object: nil,
            userInfo: [TypedNotificationUserInfoKey.value: Ping(index: 7)])
        var iterator = sequence.makeAsyncIterator()
        let delivered = await iterator.next()
        #expect(delivered?.notification.index == 7)
        #expect(delivered?.delivery.sender == NotificationCenter.untypedSender)
        #expect(delivered?.delivery.missed == 0)
    }

    @Test("a plain Foundation observer reads a typed post's value and sender from userInfo")
    func plainObserverReadsValue() throws {
        let center = NotificationCenter()
        let seen = Collector<(Ping?, Ping?, Note?, NotificationDelivery?)>()
        let observer = center.addObserver(forName: Notification.Name(Ping.name), object: nil, queue: nil) { note in
            seen.append(
                (
                    note.userInfo?[TypedNotificationUserInfoKey.value] as? Ping, note.typedValue(as: Ping.self),
                    note.typedValue(as: Note.self), note.typedDelivery
                ))
        }
        defer { center.removeObserver(observer) }
        center.post(Ping(index: 3))
        center.post(name: Notification.Name(Ping.name), object: nil)
        #expect(seen.values.count == 2)
        let typed = try #require(seen.values.first)
        #expect(typed.0 == Ping(index: 3))
        #expect(typed.1 == Ping(index: 3))
        #expect(typed.2 == nil)
        #expect(typed.3?.sender == center.sender)
        #expect(typed.3?.sequence == 1)
        let untyped = try #require(seen.values.last)
        #expect(untyped.1 == nil)
        #expect(untyped.3 == nil)
    }

    @Test("each NotificationCenter has its own sender identity, stable across calls")
    func identityPerCenter() {
        let one = NotificationCenter()
        let two = NotificationCenter()
        #expect(one.sender == one.sender)
        #expect(one.sender != two.sender)
        #expect(NotificationCenter.default.sender == NotificationCenter.default.sender)
        #expect(NotificationCenter.default.sender != one.sender)
        #expect(one.sender.endpoint == "foundation")
    }

    @Test("endpoints of one center tell their posts apart: .others skips its own and keeps the other's")
    func endpointsAndOthers() async throws {
        let center = NotificationCenter()
        let downloads = try center.endpoint("downloads")
        let settings = try center.endpoint("settings")
        #expect(throws: TypedNotificationError.self) { try center.endpoint("bad label") }
        let othersOfDownloads = try downloads.deliveries(.of(Ping.self), from: .others)
        downloads.post(Ping(index: 1))
        settings.post(Ping(index: 2))
        center.post(Ping(index: 3))
        downloads.post(Ping(index: 4))
        settings.post(Ping(index: 5))
        var iterator = othersOfDownloads.makeAsyncIterator()
        var seen: [(Int, String)] = []
        for _ in 0..<3 {
            guard let delivered = await iterator.next() else { break }
            seen.append((delivered.notification.index, delivered.delivery.sender.endpoint))
        }
        #expect(seen.map(\.0) == [2, 3, 5])
        #expect(seen.map(\.1) == ["settings", "foundation", "settings"])
    }

    @Test("name-only and per-name payload posts through NotificationCenter need no try")
    func namedPostsThroughFoundation() async throws {
        let center = NotificationCenter()
        let scores = try center.notifications(.of(Score.self, named: "test.foundation.score"))
        let bare = try center.deliveries(.of(RawNotification.self, named: "test.foundation.bare"))
        center.post(Score(home: 1, away: 0), as: "test.foundation.score")
        center.post(RawNotification(), as: "test.foundation.bare")
        var scoreIterator = scores.makeAsyncIterator()
        #expect(await scoreIterator.next() == Score(home: 1, away: 0))
        var bareIterator = bare.makeAsyncIterator()
        #expect(await bareIterator.next()?.delivery.sender == center.sender)
    }

    @Test("untyped Foundation observers still see typed posts")
    func untypedObserversSeeTypedPosts() throws {
        let center = NotificationCenter()
        let names = Collector<String>()
        let observer = center.addObserver(forName: Notification.Name(Note.name.rawValue), object: nil, queue: nil) {
            names.append($0.name.rawValue)
        }
        center.post(Note(text: "x"))
        #expect(names.values == ["test.note"])
        center.removeObserver(observer)
    }
}

@Suite("Foundation's NotificationCenter observes a namespace", .timeLimit(.minutes(5)))
struct FoundationNamespaceTests {
    @Test("typed and Foundation posts under names in the namespace arrive with their names; a near miss never")
    func everyName() async throws {
        let center = NotificationCenter()
        let typed = try center.deliveries(.of(Ping.self, in: "test.jobs"))
        let raw = try center.deliveries(.of(RawNotification.self, in: "test.jobs"))
        let poster = try center.endpoint("poster")
        poster.post(Ping(index: 0), as: "test.jobsx")
        poster.post(Ping(index: 1), as: "test.jobs.a")
        center.post(name: Notification.Name("test.jobs.untyped"), object: nil)
        center.post(name: Notification.Name("test.jobs.not a name"), object: nil)
        poster.post(Ping(index: 2), as: "test")
        poster.post(Ping(index: 3), as: "test.jobs.b.c")
        var seen: [String] = []
        for await posted in typed {
            let (name, ping) = (posted.name, posted.notification)
            seen.append("\(name)=\(ping.index)")
            if ping.index == 3 { break }
        }
        #expect(seen == ["test.jobs.a=1", "test.jobs.b.c=3"])
        var names: [String] = []
        for await posted in raw {
            names.append(posted.name.rawValue)
            if posted.name == "test.jobs.b.c" { break }
        }
        #expect(names == ["test.jobs.a", "test.jobs.untyped", "test.jobs.b.c"])
    }

    @Test("a namespace from an invalid literal is refused with invalidName, on every center")
    func invalidLiteral() throws {
        let bad: NotificationNamespace = "test.jobs."
        #expect(bad.validationError?.code == .invalidName)
        for center in [NotificationCenter() as any TypedNotificationCenter, try makeHub()] {
            do {
                _ = try center.addObserver(.of(Ping.self, in: bad)) { _, _ in }
                Issue.record("\(type(of: center)) took an invalid namespace")
            } catch {
                #expect(error.code == .invalidName, "\(error)")
            }
        }
    }

    @Test("cancel removes the Foundation observer: later posts reach nobody and nothing runs")
    func cancelled() async throws {
        let center = NotificationCenter()
        let got = Collector<Int>()
        let token = try center.addObserver(.of(Ping.self, in: "test.jobs")) { ping, _ in got.append(ping.index) }
        center.post(Ping(index: 1), as: "test.jobs.a")
        await got.wait(forCount: 1)
        await token.cancelAndWait()
        center.post(Ping(index: 2), as: "test.jobs.a")
        // A second observer registered after the cancel sees the next post,
        // so the first one's absence is not a matter of timing.
        let after = Collector<Int>()
        let witness = try center.addObserver(.of(Ping.self, in: "test.jobs")) { ping, _ in after.append(ping.index) }
        center.post(Ping(index: 3), as: "test.jobs.b")
        await after.wait(forCount: 1)
        await witness.cancelAndWait()
        #expect(got.values == [1])
    }
}
