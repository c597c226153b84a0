import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotifications
import TypedNotificationsCatalog

/// The transports whose hubs observe namespaces today; the others refuse
/// one with ``TypedNotificationError/Code/unsupported`` and keep nothing.
private let servingNamespaces: Set<String> = SelectorContractTests.servingNamespaces

private let jobs: NotificationNamespace = "test.jobs"

/// Observes `jobs` with `make`; on a transport that cannot, checks that the
/// refusal is typed and left nothing behind, and returns `nil`.
private func namespaceObserver<T: NotificationTransport, Observed>(
    on observer: NotificationHub<T>, poster: NotificationHub<T>, serves: Bool,
    _ make: () throws(TypedNotificationError) -> Observed
) async throws -> Observed? {
    do throws(TypedNotificationError) {
        let observed = try make()
        #expect(serves, "\(T.self) took a namespace")
        return observed
    } catch {
        #expect(error.code == .unsupported, "\(error)")
        #expect(!serves, "\(T.self) refused: \(error)")
        #expect(observer.metrics.activeObservers == 0, "a refused namespace keeps no observer")
        // The names in it are observed by name as before.
        let got = Collector<Int>()
        let token = try observer.addObserver(.of(Ping.self, named: "test.jobs.one")) { ping, _ in got.append(ping.index)
        }
        try poster.post(Ping(index: 7), as: "test.jobs.one")
        #expect(await got.wait(forCount: 1, upTo: safetyNet))
        #expect(got.values == [7])
        token.cancel()
        return nil
    }
}

/// Immediate registration: a name never posted before, posted just after the
/// observer returned, reaches it; 40 fresh observers, each a fresh name.
private struct NewNameAtOnce: ContractBody {
    let serves: Bool

    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        for round in 0..<40 {
            let got = Collector<String>()
            let made = try await namespaceObserver(on: observer, poster: poster, serves: serves) {
                () throws(TypedNotificationError) in
                try observer.addObserver(.of(Ping.self, in: jobs)) { ping, delivery in
                    got.append("\(delivery.name)=\(ping.index)")
                }
            }
            guard let token = made else { return }
            let name = try NotificationName(validating: "test.jobs.round\(round).first-seen")
            try poster.post(Ping(index: round), as: name)
            #expect(await got.wait(forCount: 1, upTo: safetyNet), "round \(round)")
            #expect(got.values == ["\(name)=\(round)"], "\(logsOf(observer, got.values))")
            token.cancel()
        }
    }
}

/// For a failure's message: the file logs of the names `values` name, each
/// segment's size and first bytes, and the observer's counters.
private func logsOf<T: NotificationTransport>(_ hub: NotificationHub<T>, _ values: [String]) -> String {
    guard let file = hub.transport as? FileSignalTransport else { return "" }
    var lines = ["\(file.statistics)"]
    for value in values {
        let name = String(value.prefix { $0 != "=" })
        let directory = file.directory + "/logs/" + name
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for entry in entries.sorted() {
            let path = directory + "/" + entry
            let bytes = FileManager.default.contents(atPath: path) ?? Data()
            let head = bytes.prefix(48).map { String($0, radix: 16) }.joined(separator: " ")
            lines.append("\(name)/\(entry): \(bytes.count) bytes: \(head)")
        }
    }
    return lines.joined(separator: "\n")
}

/// Every form sees every name in the namespace, each element saying its
/// name, and never a label-boundary near miss.
private struct EveryFormWholeLabels: ContractBody {
    let serves: Bool

    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let byClosure = Collector<String>()
        guard
            let token = try await namespaceObserver(
                on: observer, poster: poster, serves: serves,
                { () throws(TypedNotificationError) in
                    try observer.addObserver(.of(Ping.self, in: jobs)) { ping, delivery in
                        byClosure.append("\(delivery.name)=\(ping.index)")
                    }
                })
        else { return }
        defer { token.cancel() }
        let named = try observer.deliveries(.of(Ping.self, in: jobs))
        let raw = try observer.deliveries(.of(RawNotification.self, in: jobs))
        let inside: [NotificationName] = ["test.jobs", "test.jobs.a", "test.jobs.b.c", "test.jobs.a"]
        let outside: [NotificationName] = ["test.jobsx", "test", "test.job", "other.test.jobs"]
        for (index, name) in zip(inside, outside).flatMap({ [$0.1, $0.0] }).enumerated() {
            try poster.post(Ping(index: index), as: name)
        }
        try poster.post(Ping(index: 99), as: "test.jobs.end")
        // Order is per poster per name: the file transport keeps a log per
        // name, and reads two names' logs in either order.
        let expected = ["test.jobs=1", "test.jobs.a=3", "test.jobs.b.c=5", "test.jobs.a=7", "test.jobs.end=99"]
        #expect(await byClosure.wait(forCount: 5, upTo: safetyNet))
        #expect(Self.byName(byClosure.values) == Self.byName(expected))
        var fromSequence: [String] = []
        for await posted in named {
            let (name, ping) = (posted.name, posted.notification)
            fromSequence.append("\(name)=\(ping.index)")
            if fromSequence.count == expected.count { break }
        }
        #expect(Self.byName(fromSequence) == Self.byName(expected))
        var rawNames: [String] = []
        for await posted in raw {
            rawNames.append("\(posted.name)=")
            #expect(posted.notification.bytes.count > 0)
            if rawNames.count == expected.count { break }
        }
        #expect(rawNames.sorted() == expected.map { String($0.prefix { $0 != "=" }) + "=" }.sorted())
    }

    /// Each name's elements in the order they came.
    static func byName(_ values: [String]) -> [String: [String]] {
        Dictionary(grouping: values) { String($0.prefix { $0 != "=" }) }
    }
}

/// Losses are counted per name: a held handler with an 8-slot buffer while
/// 240 posts alternate between two names and 60 more go to a third (the
/// adversary that once reported one name's drops on another's delivery).
/// Then one more post of each name. For each name, what arrives plus what
/// its own deliveries say was missed is every post of it, in order.
private struct LossesCountedAcrossNames: ContractBody {
    let holdsHandler = true
    let serves: Bool

    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        let release = DispatchSemaphore(value: 0)
        let finals = Collector<Int>()
        let received = Collector<(name: String, index: Int, missed: Int)>()
        guard
            let token = try await namespaceObserver(
                on: observer, poster: poster, serves: serves,
                { () throws(TypedNotificationError) in
                    try observer.addObserver(.of(Ping.self, in: jobs), bufferingPolicy: .bufferingNewest(8)) {
                        ping, delivery in
                        if ping.index == 0 { _ = release.wait(timeout: .now() + 60) }
                        received.append((delivery.name.rawValue, ping.index, delivery.missed))
                        if ping.index >= 1_000 { finals.append(ping.index) }
                    }
                })
        else { return }
        defer { token.cancel() }
        let names: [NotificationName] = ["test.jobs.a", "test.jobs.b", "test.jobs.c.d"]
        var posted: [String: Int] = [:]
        try await offThePool {
            for index in 0..<300 {
                let name = index < 240 ? names[index % 2] : names[2]
                try poster.post(Ping(index: index), as: name)
            }
            release.signal()
        }
        for index in 0..<240 { posted[names[index % 2].rawValue, default: 0] += 1 }
        posted[names[2].rawValue, default: 0] += 60
        // Once the flood is handled, one more of each name carries what is left.
        #expect(await received.wait(forCount: 8, upTo: safetyNet))
        for (offset, name) in names.enumerated() {
            try poster.post(Ping(index: 1_000 + offset), as: name)
            posted[name.rawValue, default: 0] += 1
        }
        #expect(await finals.wait(forCount: 3, upTo: safetyNet))
        let values = received.values
        for name in names {
            let own = values.filter { $0.name == name.rawValue }
            let missed = own.reduce(0) { $0 + $1.missed }
            #expect(
                own.count + missed == posted[name.rawValue],
                "\(name): \(own.count) received, \(missed) missed, of \(posted[name.rawValue] ?? 0)")
            #expect(own.map(\.index) == own.map(\.index).sorted(), "\(name) out of order")
        }
    }
}

/// Cancel is exact: once `cancel()` returns, no handler run begins, with a
/// burst to three names of the namespace still being decoded (200 µs each).
private struct ExactCancel: ContractBody {
    let serves: Bool

    func run<T: NotificationTransport>(poster: NotificationHub<T>, observer: NotificationHub<T>) async throws {
        guard serves else {
            #expect(throws: TypedNotificationError.self) {
                try observer.deliveries(.of(RawNotification.self, in: jobs))
            }
            return
        }
        let late = try await lateRunsAfterSynchronousEnd(
            poster: poster, observer: observer, placement: .executor, ending: .cancel, rounds: 20, in: jobs)
        #expect(late == 0)
    }
}

@Suite("A hub observes a namespace with the guarantees of a name", .timeLimit(.minutes(10)))
struct NamespaceContractTests {
    static let kinds = ContractTransport.available.filter { $0.directoryLength == nil }

    private func serves(_ kind: ContractTransport) -> Bool { servingNamespaces.contains(kind.entry.name) }

    @Test("a name never posted before reaches an observer registered just before", arguments: kinds)
    func newName(kind: ContractTransport) async throws {
        try await runContract(kind, NewNameAtOnce(serves: serves(kind)))
    }

    @Test("every form, each element with its name; a label near miss never", arguments: kinds)
    func everyForm(kind: ContractTransport) async throws {
        try await runContract(kind, EveryFormWholeLabels(serves: serves(kind)))
    }

    @Test("a full buffer's losses are counted across names, each name in order", arguments: kinds)
    func losses(kind: ContractTransport) async throws {
        try await runContract(kind, LossesCountedAcrossNames(serves: serves(kind)))
    }

    @Test("cancel is exact while names across the namespace keep arriving", arguments: kinds)
    func cancel(kind: ContractTransport) async throws {
        try await runContract(kind, ExactCancel(serves: serves(kind)))
    }
}
