import Dispatch
import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotifications
import TypedNotificationsCatalog
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Every transport the center runs on, read from the transport catalog: a
/// guarantee of the README that holds for all of them is written once here
/// and run against each, Redis against a real server; a new transport's
/// catalog entry puts it here, and it proves itself by passing. The
/// catalog's variants play on Linux what Apple platforms do differently;
/// every transport that meets in a directory also runs in one of 200
/// bytes, as long as an app group container's (longer than `sun_path`).
struct ContractTransport: Sendable, Equatable, CustomTestStringConvertible {
    let entry: TransportEntry
    /// The length of the directory made for a run, when it is a long one.
    let directoryLength: Int?

    static func == (left: ContractTransport, right: ContractTransport) -> Bool {
        left.entry.name == right.entry.name && left.directoryLength == right.directoryLength
    }

    var testDescription: String {
        directoryLength.map { "\(entry.name), \($0)-byte directory" } ?? entry.name
    }

    /// Every transport of the catalog, and the long directories.
    static var all: [ContractTransport] {
        TransportCatalog.entries.flatMap { entry in
            var kinds = [ContractTransport(entry: entry, directoryLength: nil)]
            if case .directory = entry.meeting, !entry.isVariant {
                kinds.append(ContractTransport(entry: entry, directoryLength: 200))
            }
            return kinds
        }
    }

    /// The transports that run here: those that meet at a server only where
    /// one can be started (CI requires it, see `RedisTestServer.suitesRun`).
    static var available: [ContractTransport] {
        all.filter { kind in
            if case .server = kind.entry.meeting { return RedisTestServer.suitesRun }
            return true
        }
    }

    /// The one run of `name` in a short directory (or on a server).
    static func named(_ name: String) -> ContractTransport? {
        available.first { $0.entry.name == name && $0.directoryLength == nil }
    }

    /// The KIND of `tnotify-test-helper contract … KIND PLACE …`.
    var helperKind: String { entry.name }

    /// A fresh place for a run of this kind: a directory, a server or a bus;
    /// `remove` deletes or stops it after.
    func makePlace() async throws -> (place: TransportPlace, remove: @Sendable () async -> Void) {
        switch entry.meeting {
        case .process:
            return (entry.defaultPlace, {})
        case .directory:
            let base = try makeTemporaryDirectory()
            let path = try directoryLength.map { try makeLongDirectory(in: base, length: $0) } ?? base
            return (.directory(path), { removeDirectory(base) })
        case .server:
            let server = try await RedisTestServer()
            return (.server(server.url()), { await server.kill() })
        }
    }

    /// Runs `body` with a fresh place of this kind, removed after it
    /// whether `body` throws or not.
    func withPlace(_ body: (TransportPlace) async throws -> Void) async throws {
        let (place, remove) = try await makePlace()
        do {
            try await body(place)
        } catch {
            await remove()
            throw error
        }
        await remove()
    }

    /// A transport of this kind at `place`, typed as `T`.
    func make<T: NotificationTransport>(
        _ type: T.Type, at place: TransportPlace, request: TransportRequest = TransportRequest()
    ) throws -> T {
        try #require(try entry.make(place, request) as? T)
    }
}

/// A directory inside `base` whose absolute path is exactly `length` bytes,
/// created 0700: as long as an app group container's path, or longer.
func makeLongDirectory(in base: String, length: Int) throws -> String {
    var path = base
    while path.utf8.count < length {
        let room = length - path.utf8.count - 1
        guard room > 0 else { break }
        path += "/" + String(repeating: "g", count: min(room, 200))
        try FileManager.default.createDirectory(
            atPath: path, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
    }
    #expect(path.utf8.count == length)
    return path
}

/// A test body that runs over any transport, given a poster hub and an
/// observer hub that reach each other.
protocol ContractBody {
    /// Whether it holds a handler on the transport's thread until the test
    /// lets it go: its hubs then get threads of their own, so that no other
    /// test's hubs wait behind it on a thread they share.
    var holdsHandler: Bool { get }

    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws
}

extension ContractBody {
    var holdsHandler: Bool { false }
}

/// What to ask of a transport that runs `body`: a loop group of its own
/// for a body that holds a handler (a thread for each of its two hubs).
func transportRequest(for body: some ContractBody) -> TransportRequest {
    TransportRequest(loopGroup: body.holdsHandler ? LoopGroup(threads: 2) : nil)
}

/// Runs `body` over `kind`: two hubs on one bus, one directory or one Redis
/// server made for this call, closed and removed after it.
func runContract(_ kind: ContractTransport, _ body: some ContractBody) async throws {
    try await kind.withPlace { place in
        let request = transportRequest(for: body)
        try await runContract(kind, body, poster: try kind.entry.make(place, request), request: request, at: place)
    }
}

private func runContract<T: NotificationTransport>(
    _ kind: ContractTransport, _ body: some ContractBody, poster transport: T, request: TransportRequest,
    at place: TransportPlace
) async throws {
    let poster = try NotificationHub(endpoint: "poster", transport: transport)
    defer { poster.close() }
    let observer = try NotificationHub(
        endpoint: "observer", transport: try kind.make(T.self, at: place, request: request))
    defer { observer.close() }
    do {
        try await body.run(poster: poster, observer: observer)
    } catch {
        // A hub closed by its transport says why in `failure`, which the
        // error thrown afterwards (`closed`) does not.
        if let failure = observer.failure { Issue.record("the observer's hub failed: \(failure)") }
        if let failure = poster.failure { Issue.record("the poster's hub failed: \(failure)") }
        throw error
    }
}

/// Guarantee 1: one poster's notifications reach the observer in post order.
private struct InOrder: ContractBody {
    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let got = Collector<Int>()
        let token = try observer.addObserver(.of(Ping.self), bufferingPolicy: .unbounded) { ping, _ in
            got.append(ping.index)
        }
        for index in 0..<500 { try poster.post(Ping(index: index)) }
        // Handlers run on the shared pool; at the start of a full run that
        // pool is crowded by every suite starting at once (twice in 20 runs
        // the in-process case, the first to start, needed over 60 s). The
        // net is generous: a lost notification fails it all the same.
        #expect(await got.wait(forCount: 500, upTo: .seconds(240)))
        #expect(got.values == Array(0..<500))
        token.cancel()
    }
}

/// Guarantee 2: once `addObserver` returned, the very next post reaches it:
/// 40 fresh observers, each followed at once by one post.
private struct ImmediateRegistration: ContractBody {
    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        for round in 0..<40 {
            let got = Collector<Int>()
            let token = try observer.addObserver(.of(Ping.self)) { ping, _ in got.append(ping.index) }
            try poster.post(Ping(index: round))
            #expect(await got.wait(forCount: 1, upTo: safetyNet), "round \(round)")
            #expect(got.values.first == round)
            token.cancel()
        }
    }
}

/// Guarantee 3: no handler run begins after `cancel()` or the token's
/// release returns, with a payload decoder that takes 200 µs (the adversary
/// that broke it before).
private struct ExactSynchronousCancel: ContractBody {
    let placement: Placement
    let ending: Ending

    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let late = try await lateRunsAfterSynchronousEnd(
            poster: poster, observer: observer, placement: placement, ending: ending, rounds: 40)
        #expect(late == 0)
    }
}

/// Guarantee 4: every loss is counted. A handler held while 300 posts
/// arrive with an 8-slot buffer: what it receives plus what it is told it
/// missed is every post, in order, and the last post always arrives.
private struct LossesCounted: ContractBody {
    let holdsHandler = true

    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let release = DispatchSemaphore(value: 0)
        let last = Signal()
        let received = Collector<(index: Int, missed: Int)>()
        let token = try observer.addObserver(.of(Ping.self), bufferingPolicy: .bufferingNewest(8)) { ping, delivery in
            // Held until every post is out (a safety net of a minute): the
            // rest pile up behind it.
            if ping.index == 0 { _ = release.wait(timeout: .now() + 60) }
            received.append((ping.index, delivery.missed))
            if ping.index == 299 { last.fire() }
        }
        // Posted and released from a thread of its own: where handlers run
        // on the shared pool (in-process), the held one takes one of its two
        // threads, and a release that needed the other (busy with another
        // suite's held handler) would never come.
        let failures = Locked<[TypedNotificationError]>([])
        let posted = startThread {
            for index in 0..<300 {
                do throws(TypedNotificationError) {
                    try poster.post(Ping(index: index))
                } catch {
                    failures.withLock { $0.append(error) }
                }
            }
            release.signal()
        }
        #expect(await waitUntil { posted.wait(nanoseconds: 0) })
        #expect(failures.withLock { $0 }.isEmpty)
        #expect(await last.wait(upTo: safetyNet))
        let values = received.values
        #expect(values.count + values.map(\.missed).reduce(0, +) == 300)
        #expect(values.map(\.index) == values.map(\.index).sorted())
        token.cancel()
    }
}

/// Guarantee 11: forged sequence numbers never trap. A forger sends, through
/// the transport itself, envelopes numbered 2⁶⁴ − 1 and then 1; the observer
/// gets both and lives on: an honest post after them arrives too, and none
/// is counted missed (a step back starts a new run).
private struct ForgedSequenceNumbers: ContractBody {
    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let deliveries = try observer.deliveries(.of(Ping.self))
        let forger = try forgedSender(instance: 9)
        try poster.transport.send(try forgedMessage(Ping(index: 1), from: forger, sequence: .max))
        try poster.transport.send(try forgedMessage(Ping(index: 2), from: forger, sequence: 1))
        try poster.post(Ping(index: 3))
        var seen: [(index: Int, missed: Int)] = []
        for await delivered in deliveries {
            seen.append((delivered.notification.index, delivered.delivery.missed))
            if seen.count == 3 { break }
        }
        #expect(seen.map(\.index) == [1, 2, 3])
        #expect(seen.map(\.missed) == [0, 0, 0])
        #expect(observer.failure == nil)
    }
}

/// Guarantee 5: a cancelled observer and what it captured are released, and
/// a `for await` loop that is left removes its observer.
private struct CancelledObserversReleased: ContractBody {
    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        weak var weakWitness: Witness?
        let seen = Counter()
        let token: ObservationToken
        do {
            let witness = Witness()
            weakWitness = witness
            token = try observer.addObserver(.of(Ping.self)) { [witness] _, _ in
                _ = witness.id
                seen.increment()
            }
        }
        try poster.post(Ping(index: 1))
        let deadline = ContinuousClock.now + safetyNet
        while seen.count == 0 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
        #expect(seen.count == 1)
        #expect(weakWitness != nil)
        await token.cancelAndWait()
        #expect(weakWitness == nil)
        #expect(observer.metrics.activeObservers == 0)

        let deliveries = try observer.notifications(.of(Ping.self))
        #expect(observer.metrics.activeObservers == 1)
        try poster.post(Ping(index: 2))
        for await ping in deliveries where ping.index == 2 { break }
        #expect(observer.metrics.activeObservers == 0)
        withExtendedLifetime(token) {}
    }
}

/// Guarantee 6: bad input is a typed error. An invalid name literal throws
/// `.invalidName` on every use; an envelope whose payload does not decode
/// as the observed type is never delivered, is counted undecodable, and the
/// next delivery reports it missed: to a sequence, and to a handler on the
/// center's executor (which a transport's loop may run inline, as it
/// receives).
private struct BadInputIsATypedError: ContractBody {
    var toHandler = false

    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        for use in ["post", "observe"] {
            do throws(TypedNotificationError) {
                if use == "post" {
                    try poster.post(TypoNotification())
                } else {
                    _ = try observer.deliveries(.of(TypoNotification.self))
                }
                Issue.record("\(use) of an invalid name did not throw")
            } catch {
                #expect(error.code == .invalidName, "\(use)")
            }
        }
        let handled = Collector<(index: Int, missed: Int)>()
        let token =
            toHandler
            ? try observer.addObserver(.of(Ping.self)) { ping, delivery in
                handled.append((ping.index, delivery.missed))
            } : nil
        let deliveries = try observer.deliveries(.of(Ping.self))
        let forger = try forgedSender(instance: 4)
        // Ping's payload is JSON: these bytes are no Ping.
        let garbage = try forgedMessage(
            RawNotification(bytes: Array("not json".utf8)), named: Ping.name, from: forger, sequence: 1)
        try poster.transport.send(garbage)
        try poster.transport.send(try forgedMessage(Ping(index: 7), from: forger, sequence: 2))
        for await delivered in deliveries {
            #expect(delivered.notification.index == 7)
            #expect(delivered.delivery.missed == 1)
            break
        }
        if let token {
            #expect(await handled.wait(forCount: 1, upTo: safetyNet))
            #expect(handled.values.map(\.index) == [7])
            #expect(handled.values.map(\.missed) == [1])
            token.cancel()
        }
        // Counted once per observer that could not decode it.
        #expect(observer.metrics.undecodable == (toHandler ? 2 : 1))
        #expect(observer.failure == nil)
    }
}

/// Expects `body` to throw `.closed`.
private func expectClosed(_ what: String, _ body: () throws(TypedNotificationError) -> Void) {
    do throws(TypedNotificationError) {
        try body()
        Issue.record("a closed transport took a \(what)")
    } catch {
        #expect(error.code == .closed, "\(what): \(error)")
    }
}

/// The one lifecycle: a transport opens once; once closed (by its hub),
/// every later post, subscribe or open throws `.closed`, and a second close
/// does nothing.
private struct OneLifecycle: ContractBody {
    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let transport = observer.transport
        let message = try forgedMessage(Ping(index: 0), from: forgedSender(instance: 3), sequence: 1)
        #expect(throws: TypedNotificationError.self) {
            try transport.open(as: observer.sender, receiver: TransportReceiver { _ in })
        }
        observer.close()
        expectClosed("post") { () throws(TypedNotificationError) in try transport.send(message) }
        expectClosed("subscribe") { () throws(TypedNotificationError) in try transport.subscribe(to: .name(Ping.name)) }
        expectClosed("open") { () throws(TypedNotificationError) in
            try transport.open(as: observer.sender, receiver: TransportReceiver { _ in })
        }
        transport.close()
        #expect(throws: TypedNotificationError.self) { try observer.post(Ping(index: 1)) }
        // The other hub is not touched by it.
        try poster.post(Ping(index: 2))
    }
}

/// A close never waits on another thread: with a handler holding the
/// transport's thread, `close()` returns while the handler is still held
/// (it would wait forever otherwise: the handler is let go only after it
/// returned), `closed(timeout:)` says the close is not done yet, and
/// `closed()` returns once the handler let the thread go.
private struct CloseNeverWaits: ContractBody {
    let holdsHandler = true

    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let entered = Signal()
        let release = OneShotEvent()
        let onLoop = Slot<Bool>()
        let waited = Slot<Bool>()
        // Let go on every way out of this test.
        defer { release.signal() }
        let token = try observer.addObserver(.of(Ping.self)) { _, _ in
            onLoop.set((observer.transport.deliveryExecutor as? EventLoop)?.isCurrent ?? false)
            entered.fire()
            // Ten minutes, only a safety net: in a full parallel run the
            // test's task resumed more than 60 s after `entered` fired, by
            // when a 60 s wait here had ended and the close with it.
            waited.set(release.wait(nanoseconds: 600_000_000_000))
        }
        try poster.post(Ping(index: 0))
        #expect(await entered.wait(upTo: safetyNet))
        observer.close()
        // Still held: only now is it let go.
        if observer.transport.deliveryExecutor != nil {
            // The close waits for the thread the handler holds.
            let done = observer.closed(timeout: .milliseconds(20))
            #expect(
                !done,
                "handler on the loop's thread: \(String(describing: onLoop.current)); its wait returned: \(String(describing: waited.current)); failure: \(String(describing: observer.failure))"
            )
        }
        release.signal()
        await observer.closed()
        #expect(observer.closed(timeout: .zero))
        // The other hub goes on.
        try poster.post(Ping(index: 1))
        token.cancel()
    }
}

/// A hub closed from inside its own handler: the close returns there, the
/// synchronous wait refuses to wait for its own thread, and `closed()`
/// returns once the handler did.
private struct ClosedFromItsHandler: ContractBody {
    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let done = Signal()
        let waitedInHandler = Slot<Bool>()
        let token = try observer.addObserver(.of(Ping.self)) { _, _ in
            observer.close()
            waitedInHandler.set(observer.closed(timeout: .seconds(30)))
            done.fire()
        }
        try poster.post(Ping(index: 0))
        #expect(await done.wait(upTo: safetyNet))
        await observer.closed()
        if observer.transport.deliveryExecutor != nil {
            // It would have waited for its own thread: refused at once.
            #expect(waitedInHandler.current == false)
        }
        #expect(throws: TypedNotificationError.self) { try observer.post(Ping(index: 1)) }
        try poster.post(Ping(index: 2))
        token.cancel()
    }
}

@Suite("The contract: guarantees every transport keeps", .timeLimit(.minutes(10)))
struct ContractTests {
    @Test("1. one poster's notifications arrive in post order", arguments: ContractTransport.available)
    func order(_ kind: ContractTransport) async throws {
        try await runContract(kind, InOrder())
    }

    @Test("2. once addObserver returned, the next post reaches it", arguments: ContractTransport.available)
    func immediateRegistration(_ kind: ContractTransport) async throws {
        try await runContract(kind, ImmediateRegistration())
    }

    @Test(
        "3. no handler run begins after a synchronous cancel, with a slow decoder racing it",
        arguments: ContractTransport.available)
    func exactCancel(_ kind: ContractTransport) async throws {
        try await runContract(kind, ExactSynchronousCancel(placement: .executor, ending: .cancel))
        try await runContract(kind, ExactSynchronousCancel(placement: .actor, ending: .release))
    }

    @Test(
        "4. a held handler with a small buffer: received plus missed is every post, the last one arrives",
        arguments: ContractTransport.available)
    func lossesCounted(_ kind: ContractTransport) async throws {
        try await runContract(kind, LossesCounted())
    }

    @Test(
        "11. envelopes forged with sequence numbers 2⁶⁴ − 1 and 1 arrive, and the observer lives on",
        arguments: ContractTransport.available)
    func forgedSequenceNumbers(_ kind: ContractTransport) async throws {
        try await runContract(kind, ForgedSequenceNumbers())
    }

    @Test("one lifecycle: opened once, and closed for good", arguments: ContractTransport.available)
    func lifecycle(_ kind: ContractTransport) async throws {
        try await runContract(kind, OneLifecycle())
    }

    @Test(
        "a close never waits for a handler on the transport's thread; closed() returns once it let go",
        arguments: ContractTransport.available)
    func closeNeverWaits(_ kind: ContractTransport) async throws {
        try await runContract(kind, CloseNeverWaits())
    }

    @Test("a hub closed from inside its own handler; closed() returns after it", arguments: ContractTransport.available)
    func closedFromItsHandler(_ kind: ContractTransport) async throws {
        try await runContract(kind, ClosedFromItsHandler())
    }

    @Test(
        "5. a cancelled observer and its captures are released; a loop left removes its observer",
        arguments: ContractTransport.available)
    func cancelledObserversReleased(_ kind: ContractTransport) async throws {
        try await runContract(kind, CancelledObserversReleased())
    }

    @Test(
        "6. an invalid name throws invalidName; a payload that does not decode is counted, never delivered",
        arguments: ContractTransport.available)
    func badInput(_ kind: ContractTransport) async throws {
        try await runContract(kind, BadInputIsATypedError())
        try await runContract(kind, BadInputIsATypedError(toHandler: true))
    }
}
