import Foundation
import Synchronization
import Testing
import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// The Darwin-notification manager users hand-roll today, written once
/// against the protocol: names chosen at run time, no payload, no downcast.
final class NameManager<Center: TypedNotificationCenter>: Sendable {
    let center: Center
    private let tokens = Locked<[NotificationName: ObservationToken]>([:])

    init(_ center: Center) {
        self.center = center
    }

    func post(name: NotificationName) throws {
        try center.post(RawNotification(), as: name)
    }

    func startObserving(name: NotificationName, callback: @escaping @Sendable () -> Void) throws {
        let token = try center.addObserver(.of(RawNotification.self, named: name), bufferingPolicy: .unbounded) {
            _, _ in
            callback()
        }
        tokens.withLock { $0[name] = token }
    }

    func stopObserving(name: NotificationName) async {
        await tokens.withLock { $0.removeValue(forKey: name) }?.cancelAndWait()
    }
}

/// The payload-file recipe's generic notification: one payload type, a name
/// per instance.
struct DarwinNotification<Payload: DarwinPayload> {
    let name: NotificationName

    func post(_ payload: Payload, on center: some TypedNotificationCenter) throws {
        try center.post(payload, as: name)
    }

    func values(on center: some TypedNotificationCenter) throws -> NotificationSequence<Payload> {
        try center.notifications(.of(Payload.self, named: name), bufferingPolicy: .unbounded)
    }
}

struct Score: DarwinPayload, Codable, Equatable {
    var home: Int
    var away: Int
}

/// Runs the manager on `center`: two names observed, one stopped; returns
/// what each callback counted once the posts after the stop arrived.
func managerRun(on center: some TypedNotificationCenter) async throws -> (first: Int, second: Int) {
    let manager = NameManager(center)
    let first = Collector<Int>()
    let second = Collector<Int>()
    let one: NotificationName = "test.manager.one"
    let two: NotificationName = "test.manager.two"
    try manager.startObserving(name: one) { first.append(1) }
    try manager.startObserving(name: two) { second.append(1) }
    try manager.post(name: one)
    try manager.post(name: two)
    await first.wait(forCount: 1)
    await second.wait(forCount: 1)
    await manager.stopObserving(name: one)
    try manager.post(name: one)
    try manager.post(name: two)
    await second.wait(forCount: 2)
    await manager.stopObserving(name: two)
    return (first.values.count, second.values.count)
}

@Suite("Names chosen at run time", .timeLimit(.minutes(10)))
struct NamedNotificationTests {
    @Test("a name-only manager written against the protocol runs on a hub and on NotificationCenter")
    func managerOnEveryCenter() async throws {
        let hubRun = try await managerRun(on: makeHub())
        #expect(hubRun == (1, 2))
        let foundationRun = try await managerRun(on: NotificationCenter())
        #expect(foundationRun == (1, 2))
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let fileRun = try await managerRun(on: fileHub(directory))
        #expect(fileRun == (1, 2))
    }

    @Test("a bare name posted by another process (tnotify post NAME) reaches a name-only observer")
    func bareNameAcrossProcesses() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let hub = try fileHub(directory)
        let senders = Collector<String>()
        let token = try hub.addObserver(.of(RawNotification.self, named: "com.example.darwin.bare")) { _, delivery in
            senders.append(delivery.sender.endpoint)
        }
        let posted = try await tnotify(["post", "com.example.darwin.bare", "--transport", "file", "--dir", directory])
        #expect(posted.status == 0)
        await senders.wait(forCount: 1)
        #expect(senders.values == ["tnotify"])
        await token.cancelAndWait()
    }

    @Test("post(name:) reaches typed observers of a payload-less notification, and a typed post reaches name-only ones")
    func bareNamesAndPayloadlessTypes() async throws {
        let hub = try makeHub()
        let typed = try hub.deliveries(.of(CacheCleared.self))
        let named = try hub.deliveries(.of(RawNotification.self, named: CacheCleared.name))
        try hub.post(RawNotification(), as: CacheCleared.name)
        try hub.post(CacheCleared())
        var typedIterator = typed.makeAsyncIterator()
        var namedIterator = named.makeAsyncIterator()
        for expected in [UInt64(1), 2] {
            #expect(await typedIterator.next()?.delivery.sequence == expected)
            let raw = await namedIterator.next()
            #expect(raw?.delivery.sequence == expected)
            #expect(raw?.notification.bytes == [])
        }
        #expect(hub.metrics.undecodable == 0)
    }

    @Test("name-only handlers run isolated to a given actor, or on the main actor")
    func nameOnlyPlacements() async throws {
        let hub = try makeHub()
        let counter = NameCounter()
        let onMain = Collector<UInt64>()
        let onActor = Collector<Int>()
        let actorToken = try hub.addObserver(.of(RawNotification.self, named: "test.placed"), on: counter) {
            counter, _, delivery in
            counter.count(delivery.sequence)
            onActor.append(1)
        }
        let mainToken = try hub.addObserver(.of(RawNotification.self, named: "test.placed"), on: .main) { _, delivery in
            MainActor.preconditionIsolated()
            onMain.append(delivery.sequence)
        }
        try hub.post(RawNotification(), as: "test.placed")
        try hub.post(RawNotification(), as: "test.placed")
        await onMain.wait(forCount: 2)
        await onActor.wait(forCount: 2)
        await actorToken.cancelAndWait()
        await mainToken.cancelAndWait()
        #expect(await counter.sequences == [1, 2])
        #expect(onMain.values == [1, 2])
    }

    @Test("one payload type under names chosen per instance: each observer gets only its name, typed, in order")
    func payloadPerInstanceName() async throws {
        let hub = try makeHub()
        let home = DarwinNotification<Score>(name: "test.score.home")
        let away = DarwinNotification<Score>(name: "test.score.away")
        let homeValues = try home.values(on: hub)
        let awayValues = try away.values(on: hub)
        for goal in 1...3 {
            try home.post(Score(home: goal, away: 0), on: hub)
            try away.post(Score(home: 0, away: goal), on: hub)
        }
        var homeSeen: [Score] = []
        for await score in homeValues {
            homeSeen.append(score)
            if homeSeen.count == 3 { break }
        }
        var awaySeen: [Score] = []
        for await score in awayValues {
            awaySeen.append(score)
            if awaySeen.count == 3 { break }
        }
        #expect(homeSeen == (1...3).map { Score(home: $0, away: 0) })
        #expect(awaySeen == (1...3).map { Score(home: 0, away: $0) })
    }

    @Test("a payload under a run-time name crosses processes typed, and latest(_:) reads it back")
    func payloadPerInstanceNameAcrossProcesses() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try fileHub(directory, endpoint: "observer")
        let scores = try observer.deliveries(.of(Score.self, named: "test.score.remote"))
        let posted = try await tnotify([
            "post", "test.score.remote", "--transport", "file", "--dir", directory, "--json", #"{"home":2,"away":1}"#,
        ])
        #expect(posted.status == 0)
        var iterator = scores.makeAsyncIterator()
        let delivered = await iterator.next()
        #expect(delivered?.notification == Score(home: 2, away: 1))
        #expect(delivered?.delivery.sender.endpoint == "tnotify")
        let latest = try observer.latest(.of(Score.self, named: "test.score.remote"))
        #expect(latest?.notification == Score(home: 2, away: 1))
        #expect(try observer.latest(.of(Score.self, named: "test.score.none")) == nil)
    }

    @Test("a post under a name whose payload does not decode as the observer's type is counted, never delivered")
    func wrongTypeUnderName() async throws {
        let hub = try makeHub()
        let scores = try hub.deliveries(.of(Score.self, named: "test.score.mixed"))
        try hub.post("not a score", as: "test.score.mixed")
        try hub.post(Score(home: 1, away: 1), as: "test.score.mixed")
        var iterator = scores.makeAsyncIterator()
        let delivered = await iterator.next()
        #expect(delivered?.notification == Score(home: 1, away: 1))
        #expect(delivered?.delivery.missed == 1)
        #expect(hub.metrics.undecodable == 1)
    }

    @Test("a name chosen at run time from text is validated before anything is posted or observed")
    func runTimeNamesAreValidated() throws {
        #expect(throws: TypedNotificationError.self) { try NotificationName(validating: "com.example:changed") }
        let name = try NotificationName(validating: "com.example.changed")
        let hub = try makeHub()
        try hub.post(RawNotification(), as: name)
        #expect(hub.metrics.posted == 1)
    }
}

actor NameCounter {
    private(set) var sequences: [UInt64] = []

    func count(_ sequence: UInt64) {
        sequences.append(sequence)
    }
}
