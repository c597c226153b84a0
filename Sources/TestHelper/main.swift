import Foundation
import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform
import TypedNotificationsRedis

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// A process the tests start as an observer or a poster, to test cross-process
// behaviour with real processes. Prints one line per event, flushed at once.
// Where DIR is a redis:// URL, observe, observe-total and fdurable use the
// Redis Streams transport on that server instead:
//
//   tnotify-test-helper observe DIR COUNT        "ready", "progress N" every 100,
//                                                then "done count=… inorder=… missed=…"
//   tnotify-test-helper post DIR COUNT POSTER    posts COUNT pings, flushes, "posted"
//   tnotify-test-helper post-exit DIR COUNT POSTER [SPOOL-LIMIT]
//                                                posts COUNT pings and exits at once, without
//                                                flushing: "posted undelivered=N spooled=N"
//   tnotify-test-helper observe-total DIR TOTAL  like observe, but ends once received plus
//                                                missed reach TOTAL
//   tnotify-test-helper send-forged-pid          sends an envelope claiming pid 1 and the
//                                                endpoint "launchd" on the socket that is its stdin
//   tnotify-test-helper send-forged              sends an envelope claiming uid 12345
//                                                on the socket that is its stdin
//   tnotify-test-helper send-as USER             switches to USER, then sends an
//                                                envelope on the socket that is its stdin
//   tnotify-test-helper connect-as USER PATH     switches to USER, then connects a datagram
//                                                socket to PATH itself: "connected" or "refused ERRNO"
//   tnotify-test-helper fobserve DIR COUNT [ID]  like observe, over the file transport,
//                                                with a durable identity if given; its "ready"
//                                                says "sleeping=true" when its reading thread
//                                                sleeps in the read of its change events
//   tnotify-test-helper fdurable DIR ID LAST sequence|handler
//                                                a durable observer with identity ID: "got INDEX 0|1"
//                                                per handled ping (1: a redelivery), "done" after LAST
//   tnotify-test-helper fobserve-total DIR TOTAL like fobserve, but ends once received plus
//                                                missed reaches TOTAL
//   tnotify-test-helper fobserve-names DIR NAMES COUNT
//                                                observes NAMES names test.many.0 ...: "ready" once
//                                                the first read of all is done, "got N calls=C" per
//                                                delivery (C: system calls since the last), "done"
//                                                after COUNT
//   tnotify-test-helper fobserve-events DIR COUNT like fobserve, but polls only once an hour:
//                                                only change events can wake it
//   tnotify-test-helper fsleepers DIR            opens two file transports on DIR, closes the first
//                                                while still holding it, opens a third:
//                                                "sleeping first=… second=… third=…"
//   tnotify-test-helper fsleepers-scarce USER FREE
//                                                switches to USER, holds every inotify instance the
//                                                user may make but FREE, then opens three file
//                                                transports in a directory of its own: "made 3
//                                                sleeping=…" or "failed N: ERROR"
//   tnotify-test-helper fpost DIR COUNT POSTER [SEGMENT]
//                                                like post, over the file transport,
//                                                starting a segment every SEGMENT bytes
//   tnotify-test-helper ftorn DIR                takes the append lock, writes half a
//                                                framed record, and is killed mid-append
//   tnotify-test-helper fpost-limited DIR BYTES  sets RLIMIT_FSIZE to BYTES and posts
//                                                until refused: "refused CODE after N"
//   tnotify-test-helper hubs socket|file DIR HUBS TOTAL [churn]
//                                                opens HUBS observing hubs in this one process:
//                                                "ready", then "done hubs=H inorder=… missed=…
//                                                threads=T rssKiB=R" (T: the package's threads) once
//                                                each has TOTAL pings; with churn, other hubs on DIR
//                                                open and close meanwhile
//   tnotify-test-helper remove-loop DIR MS FOLDER…
//                                                removes each FOLDER under DIR again and again for
//                                                MS milliseconds: "removed ROUNDS"
//   tnotify-test-helper contract …               the contract suite's roles, over any transport:
//                                                see Contract.swift
//   tnotify-test-helper reaper                   kills the processes listed on its stdin once
//                                                it ends: see Reaper.swift
//   tnotify-test-helper spawn-and-hold           starts a "hold" copy of itself, says
//                                                "grandchild PID", and waits to be killed
//   tnotify-test-helper hold                     waits to be killed

/// The notification the helper posts and observes.
struct HelperPing: TypedNotification, Codable {
    static let name: NotificationName = "test.helper.ping"
    var poster: Int
    var index: Int
}

/// Writes one line at once: the output is a pipe the test reads line by line.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("tnotify-test-helper: \(message)\n".utf8))
    exit(1)
}

func observe(directory: String, count: Int, countingMissed: Bool = false) async throws {
    if directory.hasPrefix("redis://") {
        let hub = try NotificationHub(endpoint: "observer", transport: RedisStreamsTransport(url: directory))
        try await observe(hub, count: count, countingMissed: countingMissed)
    } else {
        let hub = try NotificationHub(endpoint: "observer", transport: SocketTransport(directory: directory))
        try await observe(hub, count: count, countingMissed: countingMissed)
    }
}

func observe<Transport: NotificationTransport>(_ hub: NotificationHub<Transport>, count: Int, countingMissed: Bool)
    async throws
{
    let deliveries = try hub.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
    say("ready")
    var received = 0
    var missed = 0
    var inOrder = true
    var next: [Int: Int] = [:]
    for await delivered in deliveries {
        let ping = delivered.notification
        if ping.index != next[ping.poster, default: 0] { inOrder = false }
        next[ping.poster] = ping.index + 1
        missed += delivered.delivery.missed
        received += 1
        if received % 100 == 0 { say("progress \(received)") }
        if received + (countingMissed ? missed : 0) >= count { break }
    }
    say("done count=\(received) inorder=\(inOrder) missed=\(missed)")
    hub.closeAndWait()
}

func observeFiles(
    directory: String, count: Int, identity: String?, pollInterval: Duration = .seconds(1),
    countingMissed: Bool = false
) async throws {
    let transport = try FileSignalTransport(
        directory: directory,
        identity: identity,
        configuration: FileSignalConfiguration(pollInterval: pollInterval)
    )
    let hub = try NotificationHub(endpoint: "observer", transport: transport)
    let deliveries = try hub.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
    say("ready sleeping=\(transport.sleepsInRead)")
    var received = 0
    var missed = 0
    var inOrder = true
    var next: [Int: Int] = [:]
    var first: [Int: Int] = [:]
    for await delivered in deliveries {
        let ping = delivered.notification
        if first[ping.poster] == nil { first[ping.poster] = ping.index }
        if let expected = next[ping.poster], ping.index != expected { inOrder = false }
        next[ping.poster] = ping.index + 1
        missed += delivered.delivery.missed
        received += 1
        if received % 100 == 0 { say("progress \(received)") }
        if received + (countingMissed ? missed : 0) >= count { break }
    }
    let firsts = first.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value)" }.joined(separator: ",")
    say("done count=\(received) inorder=\(inOrder) missed=\(missed) first=\(firsts)")
    hub.closeAndWait()
}

/// Observes `names` names at once and reports, per delivery, the system
/// calls this process made since the previous one: a wake-up's cost.
func observeManyNames(directory: String, names: Int, count: Int) async throws {
    let hub = try NotificationHub(endpoint: "many", transport: FileSignalTransport(directory: directory))
    let (stream, continuation) = AsyncStream.makeStream(of: String.self)
    var tokens: [ObservationToken] = []
    for index in 0..<names {
        let name = try NotificationName(validating: "test.many.\(index)")
        tokens.append(
            try hub.addObserver(.of(RawNotification.self, named: name)) { _, _ in continuation.yield(name.rawValue) })
    }
    // The first read pass of every name (and its watch) is behind us once a
    // post to the last name subscribed has come back.
    let last = try NotificationName(validating: "test.many.\(names - 1)")
    try hub.post(RawNotification(), as: last)
    var iterator = stream.makeAsyncIterator()
    _ = await iterator.next()
    say("ready")
    var before = SystemCalls.made.load(ordering: .relaxed)
    for received in 1...max(1, count) {
        guard let name = await iterator.next() else { break }
        let now = SystemCalls.made.load(ordering: .relaxed)
        say("got \(received) \(name) calls=\(now - before)")
        before = now
    }
    say("done")
    withExtendedLifetime(tokens) {}
    hub.closeAndWait()
}

/// A durable observer that prints `got INDEX 0|1` (1: marked as a
/// redelivery) for each notification it handles, before acknowledging it,
/// and `done` once it has handled index `last`. `mode` is `sequence` (a `for
/// await` loop) or `handler` (a handler on the center's executor).
func observeDurably(directory: String, identity: String, last: Int, mode: String) async throws {
    if directory.hasPrefix("redis://") {
        let hub = try NotificationHub(
            endpoint: "durable", transport: RedisStreamsTransport(url: directory, identity: identity))
        try await observeDurably(hub, last: last, mode: mode)
    } else {
        let hub = try NotificationHub(
            endpoint: "durable", transport: FileSignalTransport(directory: directory, identity: identity))
        try await observeDurably(hub, last: last, mode: mode)
    }
}

func observeDurably<Transport: NotificationTransport>(_ hub: NotificationHub<Transport>, last: Int, mode: String)
    async throws
{
    switch mode {
    case "handler":
        let finished = AsyncStream<Void>.makeStream()
        let token = try hub.addObserver(.of(HelperPing.self), bufferingPolicy: .unbounded) { ping, delivery in
            say("got \(ping.index) \(delivery.isRedelivery ? 1 : 0)")
            if ping.index == last { finished.continuation.finish() }
        }
        say("ready")
        for await _ in finished.stream {}
        say("done")
        withExtendedLifetime(token) {}
    default:
        let deliveries = try hub.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
        say("ready")
        for await delivered in deliveries {
            say("got \(delivered.notification.index) \(delivered.delivery.isRedelivery ? 1 : 0)")
            if delivered.notification.index == last { break }
        }
        say("done")
    }
    hub.closeAndWait()
}

func postFiles(directory: String, count: Int, poster: Int, segmentSize: Int? = nil) throws {
    var configuration = FileSignalConfiguration()
    if let segmentSize { configuration.segmentSize = max(4096, segmentSize) }
    let hub = try NotificationHub(
        endpoint: "poster\(poster)",
        transport: FileSignalTransport(directory: directory, configuration: configuration)
    )
    for index in 0..<count {
        try hub.post(HelperPing(poster: poster, index: index))
    }
    say("posted")
    hub.closeAndWait()
}

/// Writes half an envelope into the log while holding the append lock, then
/// dies by SIGKILL, as a poster killed mid-append would.
func tornAppend(directory: String) throws -> Never {
    let name = HelperPing.name
    let logDirectory = directory + "/logs/" + name.rawValue
    let lock = open(logDirectory + "/lock", O_RDWR | O_CREAT, 0o600)
    guard lock >= 0, flock(lock, LOCK_EX) == 0 else { fail("cannot lock") }
    let segments = (try? FileManager.default.contentsOfDirectory(atPath: logDirectory))?.filter { $0.hasSuffix(".log") }
        .sorted()
    guard let newest = segments?.last else { fail("no segment") }
    let file = open(logDirectory + "/" + newest, O_WRONLY | O_APPEND)
    let sender = try NotificationSender(processID: getpid(), userID: getuid(), endpoint: "torn", instance: 7)
    let encoded = try NotificationEnvelope.encode(
        name: name,
        sender: sender,
        sequence: 1,
        timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
    ) { try HelperPing(poster: 99, index: 0).encodePayload(into: &$0) }
    // Framed as a writer frames it at the segment's end, then cut in half.
    var info = stat()
    guard fstat(file, &info) == 0 else { fail("cannot stat the segment") }
    var framed: [UInt8] = []
    Array(encoded.envelope).withUnsafeBytes {
        _ = LogFormat.appendRecord($0, index: 0, at: Int(info.st_size), to: &framed)
    }
    let half = Array(framed.prefix(framed.count / 2))
    _ = half.withUnsafeBytes { write(file, $0.baseAddress, $0.count) }
    say("torn")
    kill(getpid(), SIGKILL)
    fail("still alive")
}

/// Posts under a file-size limit until a post is refused.
func postLimited(directory: String, bytes: Int) throws {
    var limit = rlimit(rlim_cur: rlim_t(bytes), rlim_max: rlim_t(bytes))
    #if os(Linux)
        let resource = Int32(RLIMIT_FSIZE.rawValue)
    #else
        let resource = RLIMIT_FSIZE
    #endif
    guard setrlimit(resource, &limit) == 0 else { fail("setrlimit: errno \(errno)") }
    let hub = try NotificationHub(endpoint: "limited", transport: FileSignalTransport(directory: directory))
    var index = 0
    while true {
        do {
            try hub.post(HelperPing(poster: 8, index: index))
        } catch {
            say("refused \(error.code) after \(index)")
            hub.closeAndWait()
            return
        }
        index += 1
        if index > 1_000_000 { fail("never refused") }
    }
}

func post(directory: String, count: Int, poster: Int) throws {
    let transport = try SocketTransport(directory: directory)
    let hub = try NotificationHub(endpoint: "poster\(poster)", transport: transport)
    for index in 0..<count {
        try hub.post(HelperPing(poster: poster, index: index))
    }
    guard transport.flush(timeout: .seconds(60)) else { fail("could not deliver everything within 60 s") }
    say("posted \(transport.statistics)")
    hub.closeAndWait()
}

/// Posts and exits at once: what the socket did not take waits in the spool,
/// which outlives this process.
func postAndExit(directory: String, count: Int, poster: Int, spoolLimit: Int?) throws {
    var configuration = SocketTransportConfiguration()
    if let spoolLimit { configuration.spoolLimitPerEndpoint = spoolLimit }
    let transport = try SocketTransport(directory: directory, configuration: configuration)
    let hub = try NotificationHub(endpoint: "poster\(poster)", transport: transport)
    var undelivered = 0
    var named = Set<String>()
    for index in 0..<count {
        do {
            try hub.post(HelperPing(poster: poster, index: index))
        } catch {
            guard error.code == .undelivered else { throw error }
            undelivered += 1
            named.formUnion(error.undeliveredEndpoints.map { "\($0.endpoint)(\($0.processID))" })
        }
    }
    let statistics = transport.statistics
    say(
        "posted undelivered=\(undelivered) spooled=\(statistics.spooled) dropped=\(statistics.dropped) endpoints=\(named.sorted().joined(separator: ","))"
    )
    hub.closeAndWait()
}

/// Sends one valid envelope on standard input, which the test connected to an
/// observer's socket.
func sendOnStandardInput(claimingUser: UInt32, claimingProcess: Int32? = nil, endpoint: String = "intruder") throws {
    let sender = try NotificationSender(
        processID: claimingProcess ?? getpid(),
        userID: claimingUser,
        endpoint: endpoint,
        instance: 99
    )
    let encoded = try NotificationEnvelope.encode(
        name: HelperPing.name,
        sender: sender,
        sequence: 1,
        timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
    ) { try HelperPing(poster: 666, index: 0).encodePayload(into: &$0) }
    let bytes = Array(encoded.envelope)
    let sent = bytes.withUnsafeBytes { send(0, $0.baseAddress, $0.count, 0) }
    guard sent == bytes.count else { fail("send failed: errno \(errno)") }
    say("sent")
}

let arguments = Array(CommandLine.arguments.dropFirst())
do {
    switch arguments.first {
    case "observe" where arguments.count == 3:
        guard let count = Int(arguments[2]) else { fail("COUNT must be a number") }
        try await observe(directory: arguments[1], count: count)
    case "post" where arguments.count == 4:
        guard let count = Int(arguments[2]), let poster = Int(arguments[3]) else {
            fail("COUNT and POSTER must be numbers")
        }
        try post(directory: arguments[1], count: count, poster: poster)
    case "observe-total" where arguments.count == 3:
        guard let total = Int(arguments[2]) else { fail("TOTAL must be a number") }
        try await observe(directory: arguments[1], count: total, countingMissed: true)
    case "post-exit" where arguments.count == 4 || arguments.count == 5:
        guard let count = Int(arguments[2]), let poster = Int(arguments[3]) else {
            fail("COUNT and POSTER must be numbers")
        }
        try postAndExit(
            directory: arguments[1], count: count, poster: poster,
            spoolLimit: arguments.count == 5 ? Int(arguments[4]) : nil)
    case "fobserve" where arguments.count == 3 || arguments.count == 4:
        guard let count = Int(arguments[2]) else { fail("COUNT must be a number") }
        try await observeFiles(
            directory: arguments[1], count: count, identity: arguments.count == 4 ? arguments[3] : nil)
    case "fobserve-total" where arguments.count == 3:
        guard let total = Int(arguments[2]) else { fail("TOTAL must be a number") }
        try await observeFiles(directory: arguments[1], count: total, identity: nil, countingMissed: true)
    case "fobserve-names" where arguments.count == 4:
        guard let names = Int(arguments[2]), let count = Int(arguments[3]), names > 0 else {
            fail("NAMES and COUNT must be numbers")
        }
        try await observeManyNames(directory: arguments[1], names: names, count: count)
    case "fobserve-events" where arguments.count == 3:
        guard let count = Int(arguments[2]) else { fail("COUNT must be a number") }
        try await observeFiles(directory: arguments[1], count: count, identity: nil, pollInterval: .seconds(3600))
    case "fdurable" where arguments.count == 5:
        guard let last = Int(arguments[3]) else { fail("LAST must be a number") }
        try await observeDurably(directory: arguments[1], identity: arguments[2], last: last, mode: arguments[4])
    case "fpost" where arguments.count == 4 || arguments.count == 5:
        guard let count = Int(arguments[2]), let poster = Int(arguments[3]) else {
            fail("COUNT and POSTER must be numbers")
        }
        let segmentSize = arguments.count == 5 ? Int(arguments[4]) : nil
        try postFiles(directory: arguments[1], count: count, poster: poster, segmentSize: segmentSize)
    case "ftorn" where arguments.count == 2:
        try tornAppend(directory: arguments[1])
    case "fpost-limited" where arguments.count == 3:
        guard let bytes = Int(arguments[2]) else { fail("BYTES must be a number") }
        try postLimited(directory: arguments[1], bytes: bytes)
    case "send-forged" where arguments.count == 1:
        try sendOnStandardInput(claimingUser: 12345)
    case "send-forged-pid" where arguments.count == 1:
        try sendOnStandardInput(claimingUser: getuid(), claimingProcess: 1, endpoint: "launchd")
    case "send-as" where arguments.count == 2:
        guard let user = getpwnam(arguments[1]) else { fail("no user \(arguments[1])") }
        let (uid, gid) = (user.pointee.pw_uid, user.pointee.pw_gid)
        guard setgid(gid) == 0, setuid(uid) == 0 else { fail("cannot switch to \(arguments[1]): errno \(errno)") }
        try sendOnStandardInput(claimingUser: UInt32(uid))
    case "connect-as" where arguments.count == 3:
        guard let user = getpwnam(arguments[1]) else { fail("no user \(arguments[1])") }
        let (uid, gid) = (user.pointee.pw_uid, user.pointee.pw_gid)
        guard setgid(gid) == 0, setuid(uid) == 0 else { fail("cannot switch to \(arguments[1]): errno \(errno)") }
        let socket = try SystemCalls.datagramSocket().get()
        switch SystemCalls.connectSocket(socket, toSocketPath: arguments[2]) {
        case .success: say("connected")
        case .failure(let error): say("refused \(error.rawValue)")
        }
    case "remove-loop" where arguments.count >= 4:
        guard let milliseconds = Int(arguments[2]) else { fail("MS must be a number") }
        removeRepeatedly(in: arguments[1], folders: Array(arguments.dropFirst(3)), milliseconds: milliseconds)
    case "contract":
        try await runContractCommand(arguments.dropFirst())
    case "reaper" where arguments.count == 1:
        runReaper()
    case "spawn-and-hold" where arguments.count == 1:
        spawnGrandchildAndHold()
    case "hold" where arguments.count == 1:
        holdForever()
    case "fsleepers" where arguments.count == 2:
        sleepersAfterClose(directory: arguments[1])
    case "fsleepers-scarce" where arguments.count == 3:
        guard let free = Int32(arguments[2]) else { fail("FREE must be a number") }
        sleepersWithScarceInstances(user: arguments[1], free: free)
    case "hubs" where arguments.count == 5 || arguments.count == 6:
        guard let hubs = Int(arguments[3]), let total = Int(arguments[4]) else {
            fail("HUBS and TOTAL must be numbers")
        }
        try observeWithManyHubs(
            kind: arguments[1], directory: arguments[2], hubs: hubs, total: total,
            churn: arguments.count == 6 && arguments[5] == "churn")
    default:
        fail(
            "usage: observe | observe-total | post | post-exit | send-forged | send-forged-pid | send-as"
                + " | fobserve | fobserve-total | fobserve-names | fobserve-events | fdurable | fpost | ftorn"
                + " | fsleepers | fsleepers-scarce"
                + " | fpost-limited | hubs | remove-loop | contract | reaper | spawn-and-hold | hold (arguments: see the comment at the top of Sources/TestHelper/main.swift)"
        )
    }
} catch {
    fail("\(error)")
}
