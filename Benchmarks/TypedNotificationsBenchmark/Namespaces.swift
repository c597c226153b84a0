import Foundation
import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform
import TypedNotificationsRedis

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Namespaces, each transport against itself in the same run:
// - socket: a post's cost with 100 namespaces observed on other prefixes,
//   against none (the poster looks a name up by its depth, not by the
//   namespaces);
// - socket, file and Redis: the latency from post to a namespace observer,
//   against a one-name observer of the same posts;
// - socket, file and Redis: a namespace observer's resident memory over
//   1,000 distinct names, after warm-up and at the end of a long run.

/// The notification of this section: its index and when it was posted, 16
/// bytes as the fan-out's ticks are (no JSON in the measured path).
struct NamespaceProbe: TypedNotification {
    static let name: NotificationName = "bench.ns.n0"
    var index: Int
    var posted: UInt64

    init(index: Int, posted: UInt64) {
        self.index = index
        self.posted = posted
    }

    func encodePayload(into buffer: inout [UInt8]) throws {
        withUnsafeBytes(of: UInt64(index).littleEndian) { buffer.append(contentsOf: $0) }
        withUnsafeBytes(of: posted.littleEndian) { buffer.append(contentsOf: $0) }
    }

    var payloadSizeHint: Int? { 16 }

    init(payload bytes: UnsafeRawBufferPointer) throws {
        guard bytes.count == 16 else { throw PayloadDecodingError.outOfRange(type: "NamespaceProbe") }
        index = Int(truncatingIfNeeded: UInt64(littleEndian: bytes.loadUnaligned(as: UInt64.self)))
        posted = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
    }
}

/// `ns-observer KIND PLACE name|namespace TOTAL`: over the transport KIND
/// (socket, file: PLACE a directory; redis: PLACE a URL), observes
/// `bench.ns.n0` by name or the namespace `bench.ns`; prints "ready", then
/// once TOTAL arrived (or were missed) "done P50 P99 RECEIVED MISSED" and the
/// resident set in KiB after each tenth of them.
func runNamespaceObserver(_ arguments: ArraySlice<String>) throws {
    let words = Array(arguments)
    guard words.count == 4, let total = Int(words[3]), ["name", "namespace"].contains(words[2]) else {
        fail("usage: ns-observer socket|file|redis PLACE name|namespace TOTAL")
    }
    switch words[0] {
    case "socket":
        try observeProbes(NotificationHub(endpoint: "ns-observer", transport: SocketTransport(directory: words[1])))
    case "file":
        try observeProbes(
            NotificationHub(endpoint: "ns-observer", transport: FileSignalTransport(directory: words[1])))
    case "redis":
        try observeProbes(NotificationHub(endpoint: "ns-observer", transport: RedisStreamsTransport(url: words[1])))
    default:
        fail("ns-observer: no transport \(words[0])")
    }

    func observeProbes<T: NotificationTransport>(_ hub: NotificationHub<T>) throws {
        let done = DispatchSemaphore(value: 0)
        let warmedUp = total / 10
        let state = Locked((latencies: [UInt64](), missed: 0, count: 0, residents: [Int]()))
        let handler: @Sendable (NamespaceProbe, NotificationDelivery) -> Void = { probe, delivery in
            let latency = now() &- probe.posted
            let finished = state.withLock { state -> Bool in
                // At most 50,000 samples, so that the memory run measures the
                // observer, not this list.
                if state.latencies.count < 50_000 { state.latencies.append(latency) }
                state.missed += delivery.missed
                state.count += 1 + delivery.missed
                if state.count >= warmedUp * (state.residents.count + 1), state.residents.count < 10 {
                    state.residents.append(currentResidentKiB() ?? 0)
                }
                return state.count >= total
            }
            if finished { done.signal() }
        }
        let token =
            words[2] == "name"
            ? try hub.addObserver(
                .of(NamespaceProbe.self, named: NamespaceProbe.name), bufferingPolicy: .unbounded, handler: handler)
            : try hub.addObserver(
                .of(NamespaceProbe.self, in: "bench.ns"), bufferingPolicy: .unbounded, handler: handler)
        say("ready")
        done.wait()
        let final = state.withLock { $0 }
        // Latency over the paced part only: the first tenth is warm-up.
        let latencies = Percentiles(Array(final.latencies.dropFirst(min(warmedUp, final.latencies.count / 10))))
        say(
            "done \(latencies.p50) \(latencies.p99) \(final.count - final.missed) \(final.missed) \(final.residents.map(String.init).joined(separator: " "))"
        )
        token.cancel()
        hub.closeAndWait()
    }
}

/// `ns-holder DIR COUNT`: observes COUNT namespaces on other prefixes
/// (`bench.other0` …), prints "ready" and waits to be killed.
func runNamespaceHolder(_ arguments: ArraySlice<String>) throws {
    let words = Array(arguments)
    guard words.count == 2, let count = Int(words[1]) else { fail("usage: ns-holder DIR COUNT") }
    let hub = try NotificationHub(endpoint: "ns-holder", transport: SocketTransport(directory: words[0]))
    var tokens: [ObservationToken] = []
    for index in 0..<count {
        let namespace = try NotificationNamespace(validating: "bench.other\(index)")
        tokens.append(try hub.addObserver(.of(RawNotification.self, in: namespace)) { _, _ in })
    }
    say("ready")
    while true { pause() }
}

/// One configuration's figures: the poster's post call and the observer's latency.
struct NamespacePoint: Codable, Sendable {
    var post: Percentiles
    var latencyP50: UInt64
    var latencyP99: UInt64
    var received: Int
    var missed: Int
    /// The observer's resident set after each tenth of the run, in KiB.
    var residentKiB: [Int]
}

/// Posts `count` probes, paced `gap` apart, over `kind` to an `ns-observer`
/// in `mode`, with `holders` namespaces observed elsewhere (socket only);
/// `names` distinct names (1: `bench.ns.n0` only). Redis points use
/// `redis` (the run's server, emptied first).
func measureNamespacePoint(
    kind: String = "socket", mode: String, holders: Int, count: Int, names: Int, gap: UInt64,
    redis: BenchRedisServer? = nil
) throws -> NamespacePoint {
    let directory = makeScratchDirectory("namespaces")
    defer { removeScratchDirectory(directory) }
    var holder: Child?
    if holders > 0 {
        let child = Child(["ns-holder", directory, "\(holders)"])
        _ = child.expect("ready")
        holder = child
    }
    defer { if let holder { kill(holder.processID, SIGKILL) } }
    var place = directory
    if kind == "redis" {
        guard let redis else { fail("a Redis namespace point needs the run's server") }
        redis.flush()
        place = redis.url
    }
    let observer = Child(["ns-observer", kind, place, mode, "\(count)"])
    _ = observer.expect("ready")
    let samples: [UInt64]
    switch kind {
    case "file":
        samples = try postProbes(NotificationHub(endpoint: "poster", transport: FileSignalTransport(directory: place)))
    case "redis":
        samples = try postProbes(NotificationHub(endpoint: "poster", transport: RedisStreamsTransport(url: place)))
    default:
        samples = try postProbes(NotificationHub(endpoint: "poster", transport: SocketTransport(directory: place)))
    }
    let fields = observer.expect("done ").split(separator: " ").dropFirst().compactMap { UInt64($0) }
    observer.wait()
    guard fields.count >= 4 else { fail("ns-observer printed an unreadable result") }
    return NamespacePoint(
        post: Percentiles(Array(samples.dropFirst(count / 10))), latencyP50: fields[0], latencyP99: fields[1],
        received: Int(fields[2]), missed: Int(fields[3]), residentKiB: fields.dropFirst(4).map { Int($0) })

    func postProbes<T: NotificationTransport>(_ hub: NotificationHub<T>) throws -> [UInt64] {
        defer { hub.closeAndWait() }
        let targets = try (0..<names).map { try NotificationName(validating: "bench.ns.n\($0)") }
        var samples: [UInt64] = []
        samples.reserveCapacity(count)
        var next = now()
        for index in 0..<count {
            if gap > 0, now() < next { sleep(until: next) }
            let started = now()
            try hub.post(NamespaceProbe(index: index, posted: started), as: targets[index % names])
            samples.append(now() &- started)
            next = started + gap
            // Unpaced over the socket, in chunks of 5,000 each read before
            // the next, as the memory section's soaks are: steady state, not
            // a backlog. The file and Redis transports keep what is posted.
            if gap == 0, index % 5_000 == 4_999, let socket = hub.transport as? SocketTransport,
                !socket.flush(timeout: .seconds(60))
            {
                fail("the namespace observer did not keep up")
            }
        }
        return samples
    }
}

/// The namespaces section: `rounds` interleaved rounds of the socket's
/// three configurations and each other transport's two, each reported as
/// its median, then the memory runs. Redis runs where `redis` is given.
func measureNamespaces(quick: Bool, rounds: Int, redis: BenchRedisServer?) throws {
    let count = quick ? 2_000 : 20_000
    let gap: UInt64 = 50_000
    print(
        "\nNamespaces: \(count) posts paced 50 µs per point, median of \(rounds) interleaved rounds"
    )
    let kinds = ["socket", "file"] + (redis == nil ? [] : ["redis"])
    var none: [NamespacePoint] = []
    var hundred: [NamespacePoint] = []
    var named: [String: [NamespacePoint]] = [:]
    var namespace: [String: [NamespacePoint]] = [:]
    for _ in 0..<rounds {
        hundred.append(try measureNamespacePoint(mode: "name", holders: 100, count: count, names: 1, gap: gap))
        for kind in kinds {
            named[kind, default: []].append(
                try measureNamespacePoint(
                    kind: kind, mode: "name", holders: 0, count: count, names: 1, gap: gap, redis: redis))
            namespace[kind, default: []].append(
                try measureNamespacePoint(
                    kind: kind, mode: "namespace", holders: 0, count: count, names: 1, gap: gap, redis: redis))
        }
    }
    none = named["socket"] ?? []
    func median(_ values: [UInt64]) -> UInt64 { values.sorted()[values.count / 2] }
    func ratio(_ value: UInt64, _ base: UInt64) -> String {
        String(format: "%.2f", Double(value) / Double(max(1, base)))
    }
    func list(_ points: [NamespacePoint], _ figure: (NamespacePoint) -> UInt64) -> String {
        points.map { microseconds(figure($0)) }.joined(separator: " ")
    }
    let postNone = median(none.map(\.post.p50))
    let postHundred = median(hundred.map(\.post.p50))
    let everything = hundred + named.values.joined() + namespace.values.joined()
    let lost = everything.reduce(0) { $0 + $1.missed + max(0, count - $1.received - $1.missed) }
    print(
        "  socket post p50, 0 namespaces observed elsewhere:   \(microseconds(postNone)) (rounds: \(list(none) { $0.post.p50 }))"
    )
    print(
        "  socket post p50, 100 namespaces on other prefixes: \(microseconds(postHundred)) (\(ratio(postHundred, postNone))× none; rounds: \(list(hundred) { $0.post.p50 }))"
    )
    for kind in kinds {
        let one = median((named[kind] ?? []).map(\.latencyP50))
        let prefix = median((namespace[kind] ?? []).map(\.latencyP50))
        print(
            "  \(kind) latency p50 to a one-name observer:  \(microseconds(one)) (rounds: \(list(named[kind] ?? []) { $0.latencyP50 }))"
        )
        print(
            "  \(kind) latency p50 to a namespace observer: \(microseconds(prefix)) (\(ratio(prefix, one))× one name; rounds: \(list(namespace[kind] ?? []) { $0.latencyP50 }))"
        )
    }
    print("  lost or missed in every point above: \(lost)")

    let long = quick ? 100_000 : 1_000_000
    for kind in kinds {
        let memory = try measureNamespacePoint(
            kind: kind, mode: "namespace", holders: 0, count: long, names: 1_000, gap: 0, redis: redis)
        let resident = memory.residentKiB
        print(
            "  \(kind): a namespace observer over 1,000 names, \(long) notifications: received \(memory.received), missed \(memory.missed);"
                + " RSS after each tenth (KiB): \(resident.map(String.init).joined(separator: " "))"
                + " (last minus second: \((resident.last ?? 0) - (resident.dropFirst().first ?? 0)) KiB)"
        )
    }
}
