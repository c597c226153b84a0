import Foundation
import Synchronization
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

/// An in-process transport whose subscriptions to one name can be held at a
/// gate or made to fail, and that counts subscribe and unsubscribe calls:
/// to watch what a hub does while a subscription is a slow system call.
final class SlowSubscribeTransport: NotificationTransport {
    let inner: InProcessTransport
    let slowName: NotificationName
    /// The first subscription of `slowName` waits here until the test opens it.
    let gate = OneShotEvent()
    /// Set once that subscription is waiting at the gate.
    let atGate = OneShotEvent()
    private let first = Atomic<Bool>(true)
    /// How many subscriptions of `slowName` fail, from the first.
    let failures = Atomic<Int>(0)
    let subscribes = Atomic<Int>(0)
    let unsubscribes = Atomic<Int>(0)

    init(bus: InProcessBus, slowName: NotificationName) {
        inner = InProcessTransport(bus: bus)
        self.slowName = slowName
    }

    var payloadForm: TransportPayloadForm { inner.payloadForm }
    func open(as sender: NotificationSender, receiver: TransportReceiver) throws(TypedNotificationError) {
        try inner.open(as: sender, receiver: receiver)
    }
    func send(_ message: TransportMessage) throws(TypedNotificationError) { try inner.send(message) }
    func close() { inner.close() }

    func subscribe(to selector: NotificationSelector) throws(TypedNotificationError) {
        if selector == .name(slowName) {
            subscribes.add(1, ordering: .relaxed)
            if first.exchange(false, ordering: .acquiringAndReleasing) {
                atGate.signal()
                gate.wait()
            }
            if failures.subtract(1, ordering: .relaxed).oldValue > 0 {
                throw TypedNotificationError(code: .storageFull, message: "the disk is full (planted)")
            }
        }
        try inner.subscribe(to: selector)
    }

    func unsubscribe(from selector: NotificationSelector) {
        if selector == .name(slowName) { unsubscribes.add(1, ordering: .relaxed) }
        inner.unsubscribe(from: selector)
    }
}

@Suite("Subscriptions: no lock across a transport's subscribe", .timeLimit(.minutes(10)))
struct SubscriptionTests {
    @Test("while one name's subscription is held, deliveries and registrations of other names go on")
    func otherNamesGoOn() async throws {
        let bus = InProcessBus()
        let transport = SlowSubscribeTransport(bus: bus, slowName: Ping.name)
        let hub = try NotificationHub(endpoint: "observer", transport: transport)
        let poster = try makeHub(endpoint: "poster", bus: bus)
        let notes = Collector<String>()
        let noteToken = try hub.addObserver(.of(Note.self)) { note, _ in notes.append(note.text) }

        let registered = Atomic<Bool>(false)
        let pings = Collector<Int>()
        let tokens = Locked<[ObservationToken]>([])
        let held = startThread {
            if let token = try? hub.addObserver(.of(Ping.self), handler: { ping, _ in pings.append(ping.index) }) {
                tokens.withLock { $0.append(token) }
                registered.store(true, ordering: .releasing)
            }
        }
        transport.atGate.wait()

        // A delivery of another name needs the observer table: it must not
        // wait behind the subscription held at the gate.
        try poster.post(Note(text: "during"))
        #expect(await notes.wait(forCount: 1, upTo: safetyNet), "a delivery waited behind another name's subscribe")
        let sameName = try hub.deliveries(.of(Note.self))
        _ = sameName
        let registeredEarly = registered.load(ordering: .acquiring)
        #expect(!registeredEarly, "registration returns only once subscribed")

        // A second observer of the held name waits for the subscription.
        let second = startThread {
            if let token = try? hub.addObserver(.of(Ping.self), handler: { ping, _ in pings.append(1000 + ping.index) })
            {
                tokens.withLock { $0.append(token) }
            }
        }
        #expect(await waitUntil { hub.subscriptionWaiters(of: Ping.name) == 1 })
        transport.gate.signal()
        held.wait()
        second.wait()
        let tokenCount = tokens.withLock { $0.count }
        let subscribes = transport.subscribes.load(ordering: .relaxed)
        #expect(tokenCount == 2)
        #expect(subscribes == 1, "one subscribe for both observers")

        try poster.post(Ping(index: 1))
        #expect(await pings.wait(forCount: 2, upTo: safetyNet))
        #expect(Set(pings.values) == [1, 1001], "both registered observers have it")

        for token in tokens.withLock({ $0 }) { token.cancel() }
        let unsubscribes = transport.unsubscribes.load(ordering: .relaxed)
        #expect(unsubscribes == 1, "unsubscribed once, with the last observer")
        noteToken.cancel()
    }

    @Test("a failed subscription fails only its own registration; the next one in line subscribes again")
    func failureHandsOver() throws {
        let bus = InProcessBus()
        let transport = SlowSubscribeTransport(bus: bus, slowName: Ping.name)
        transport.failures.store(1, ordering: .relaxed)
        let hub = try NotificationHub(endpoint: "observer", transport: transport)
        let firstError = Locked<TypedNotificationError.Code?>(nil)
        let held = startThread {
            do throws(TypedNotificationError) {
                _ = try hub.deliveries(.of(Ping.self))
            } catch {
                firstError.withLock { $0 = error.code }
            }
        }
        transport.atGate.wait()
        let secondSucceeded = Atomic<Bool>(false)
        let second = startThread {
            if let sequence = try? hub.deliveries(.of(Ping.self)) {
                _ = sequence
                secondSucceeded.store(true, ordering: .releasing)
            }
        }
        #expect(waitOnThisThread { hub.subscriptionWaiters(of: Ping.name) == 1 })
        transport.gate.signal()
        held.wait()
        second.wait()
        let first = firstError.withLock { $0 }
        let succeeded = secondSucceeded.load(ordering: .acquiring)
        let subscribes = transport.subscribes.load(ordering: .relaxed)
        #expect(first == .storageFull)
        #expect(succeeded, "the second registration subscribed after the first failed")
        #expect(subscribes == 2)
    }

    @Test("closing the hub wakes a registration waiting in line with a closed error")
    func closeWakesWaiters() throws {
        let bus = InProcessBus()
        let transport = SlowSubscribeTransport(bus: bus, slowName: Ping.name)
        let hub = try NotificationHub(endpoint: "observer", transport: transport)
        let codes = Locked<[TypedNotificationError.Code]>([])
        @Sendable func register() {
            do throws(TypedNotificationError) {
                _ = try hub.deliveries(.of(Ping.self))
            } catch {
                codes.withLock { $0.append(error.code) }
            }
        }
        let held = startThread { register() }
        transport.atGate.wait()
        let second = startThread { register() }
        #expect(waitOnThisThread { hub.subscriptionWaiters(of: Ping.name) == 1 })
        hub.close()
        second.wait()
        let afterClose = codes.withLock { $0 }
        #expect(afterClose == [.closed], "the waiter is woken by close, not by the gate")
        transport.gate.signal()
        held.wait()
        let afterGate = codes.withLock { $0 }
        #expect(afterGate == [.closed, .closed])
    }
}
