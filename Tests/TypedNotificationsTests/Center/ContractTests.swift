import Dispatch
import Foundation
import Testing
import TypedNotifications
import TypedNotificationsRedis

/// Every transport the center runs on. A guarantee of the README that holds
/// for all of them is written once here and run against each, Redis against
/// a real server; a new transport proves itself by passing. Three variants
/// run on Linux what Apple platforms do differently.
enum ContractTransport: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case inProcess = "in-process"
    case socket
    /// In a directory of 200 bytes, as long as an app group container's
    /// (longer than `sun_path`: reached through a directory descriptor).
    case socketInLongDirectory = "socket, 200-byte directory"
    /// Darwin's path: no kernel credentials, a sender is what it claims,
    /// guarded by the directory's permissions.
    case socketWithoutCredentials = "socket, no kernel credentials"
    case file
    /// What a coalesced or lost notify(3) leaves: no change events, only
    /// the poll interval wakes a reader.
    case fileWithoutChangeEvents = "file, no change events"
    case redis

    var testDescription: String { rawValue }

    /// The transports that run here: Redis only where a server can be
    /// started (CI requires it, see `RedisTestServer.suitesRun`).
    static var available: [ContractTransport] {
        allCases.filter { $0 != .redis || RedisTestServer.suitesRun }
    }

    /// The KIND of `tnotify-test-helper contract … KIND PLACE …`.
    var helperKind: String {
        switch self {
        case .inProcess: "in-process"
        case .socket, .socketInLongDirectory: "socket"
        case .socketWithoutCredentials: "socket-without-credentials"
        case .file: "file"
        case .fileWithoutChangeEvents: "file-without-change-events"
        case .redis: "redis"
        }
    }

    /// A fresh directory for a run of this kind; `remove` deletes it after.
    func makeDirectory() throws -> (path: String, remove: @Sendable () -> Void) {
        let base = try makeTemporaryDirectory()
        let path = self == .socketInLongDirectory ? try makeLongDirectory(in: base, length: 200) : base
        return (path, { removeDirectory(base) })
    }

    /// The socket transport's configuration for this kind.
    var socketConfiguration: SocketTransportConfiguration {
        var configuration = SocketTransportConfiguration()
        if self == .socketWithoutCredentials { configuration.usesKernelCredentials = false }
        return configuration
    }

    /// The file transport's configuration for this kind.
    var fileConfiguration: FileSignalConfiguration {
        self == .fileWithoutChangeEvents ? .withoutChangeEvents : FileSignalConfiguration()
    }
}

extension FileSignalConfiguration {
    /// No change events: only a 20 ms poll wakes readers (what Apple
    /// platforms are left with when a notify(3) post is coalesced or lost).
    static var withoutChangeEvents: FileSignalConfiguration {
        FileSignalConfiguration(pollInterval: .milliseconds(20), usesChangeEvents: false)
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
    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws
}

/// Runs `body` over `kind`: two hubs on one bus, one directory or one Redis
/// server made for this call, closed and removed after it.
func runContract(_ kind: ContractTransport, _ body: some ContractBody) async throws {
    switch kind {
    case .inProcess:
        let bus = InProcessBus()
        let poster = try NotificationHub(endpoint: "poster", transport: InProcessTransport(bus: bus))
        let observer = try NotificationHub(endpoint: "observer", transport: InProcessTransport(bus: bus))
        defer {
            poster.close()
            observer.close()
        }
        try await body.run(poster: poster, observer: observer)
    case .socket, .socketInLongDirectory, .socketWithoutCredentials:
        let directory = try kind.makeDirectory()
        defer { directory.remove() }
        let poster = try socketHub(directory.path, endpoint: "poster", configuration: kind.socketConfiguration)
        let observer = try socketHub(directory.path, endpoint: "observer", configuration: kind.socketConfiguration)
        defer {
            poster.close()
            observer.close()
        }
        try await body.run(poster: poster, observer: observer)
    case .file, .fileWithoutChangeEvents:
        let directory = try kind.makeDirectory()
        defer { directory.remove() }
        let poster = try fileHub(directory.path, endpoint: "poster", configuration: kind.fileConfiguration)
        let observer = try fileHub(directory.path, endpoint: "observer", configuration: kind.fileConfiguration)
        defer {
            poster.close()
            observer.close()
        }
        try await body.run(poster: poster, observer: observer)
    case .redis:
        let server = try await RedisTestServer()
        let poster = try NotificationHub(endpoint: "poster", transport: RedisStreamsTransport(url: server.url()))
        let observer = try NotificationHub(endpoint: "observer", transport: RedisStreamsTransport(url: server.url()))
        defer {
            poster.close()
            observer.close()
        }
        try await body.run(poster: poster, observer: observer)
        await server.kill()
    }
}

/// Guarantee 1: one poster's notifications reach the observer in post order.
private struct InOrder: ContractBody {
    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let got = Collector<Int>()
        let token = try observer.addObserver(Ping.self, bufferingPolicy: .unbounded) { ping, _ in
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
            let token = try observer.addObserver(Ping.self) { ping, _ in got.append(ping.index) }
            try poster.post(Ping(index: round))
            #expect(await got.wait(forCount: 1, upTo: .seconds(30)), "round \(round)")
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
    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let release = DispatchSemaphore(value: 0)
        let last = Signal()
        let received = Collector<(index: Int, missed: Int)>()
        let token = try observer.addObserver(Ping.self, bufferingPolicy: .bufferingNewest(8)) { ping, delivery in
            // Held until every post is out (a safety net of a minute): the
            // rest pile up behind it.
            if ping.index == 0 { _ = release.wait(timeout: .now() + 60) }
            received.append((ping.index, delivery.missed))
            if ping.index == 299 { last.fire() }
        }
        for index in 0..<300 { try poster.post(Ping(index: index)) }
        release.signal()
        #expect(await last.wait(upTo: .seconds(60)))
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
        let deliveries = try observer.deliveries(of: Ping.self)
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
            token = try observer.addObserver(Ping.self) { [witness] _, _ in
                _ = witness.id
                seen.increment()
            }
        }
        try poster.post(Ping(index: 1))
        let deadline = ContinuousClock.now + .seconds(30)
        while seen.count == 0 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
        #expect(seen.count == 1)
        #expect(weakWitness != nil)
        await token.cancelAndWait()
        #expect(weakWitness == nil)
        #expect(observer.metrics.activeObservers == 0)

        let deliveries = try observer.notifications(of: Ping.self)
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
/// next delivery reports it missed.
private struct BadInputIsATypedError: ContractBody {
    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        for use in ["post", "observe"] {
            do throws(TypedNotificationError) {
                if use == "post" {
                    try poster.post(TypoNotification())
                } else {
                    _ = try observer.deliveries(of: TypoNotification.self)
                }
                Issue.record("\(use) of an invalid name did not throw")
            } catch {
                #expect(error.code == .invalidName, "\(use)")
            }
        }
        let deliveries = try observer.deliveries(of: Ping.self)
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
        #expect(observer.metrics.undecodable == 1)
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
        expectClosed("subscribe") { () throws(TypedNotificationError) in try transport.subscribe(to: Ping.name) }
        expectClosed("open") { () throws(TypedNotificationError) in
            try transport.open(as: observer.sender, receiver: TransportReceiver { _ in })
        }
        transport.close()
        #expect(throws: TypedNotificationError.self) { try observer.post(Ping(index: 1)) }
        // The other hub is not touched by it.
        try poster.post(Ping(index: 2))
    }
}

@Suite("The contract: guarantees every transport keeps", .timeLimit(.minutes(5)))
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
    }
}
