import Foundation
import TypedNotifications
import TypedNotificationsCatalog
import TypedNotificationsRedis

// The fan-out benchmark: from post until the last of N observers has the
// notification, per transport, against its physical floor and its peers,
// measured in the same run. Also the fixed costs (envelope encode/decode,
// post-to-handler) and a memory run. Benchmarks/README.md says how to read it.
//
// Its options are in `usage` below (`--help` prints them).
//
// Roles this executable plays for itself, in child processes:
//   point SPEC-JSON                                  one scenario; prints "result JSON"
//   observe KIND DIR TOTAL STAMPS PAYLOAD INDEX [anatomy]  an observer process
//   soak KIND COUNT                                  the memory run
//   soak-senders COUNT                               the memory run, distinct senders
//   hubs KIND COUNT [URL]                            many hubs in one process, per-hub cost
//   stopped-observer DIR TOTAL                       the observer the stopped section stops
//   idle-observer KIND SHAPE DURABLE PLACE ROOT      an observer the idle section leaves idle

#if DEBUG
    let buildWarning: String? =
        "WARNING: debug build; figures are meaningless. Use `swift run -c release TypedNotificationsBenchmark`."
#else
    let buildWarning: String? = nil
#endif

/// What `--help` prints.
let usage = """
    usage: TypedNotificationsBenchmark [--quick] [--only LIST] [--kinds LIST] [--observers LIST]
                                       [--sizes LIST] [--count N] [--rounds N] [--output DIR]
                                       [--no-anatomy]

    The fan-out benchmark: from post until the last of N observers has the notification,
    per transport, against its physical floor and its peers, measured in the same run;
    the fixed costs (envelope, post-to-handler); and a memory run. A full run takes
    about 7 minutes; --quick about 1. Build it in release: swift run -c release TypedNotificationsBenchmark

      --only       any of envelope, delivery, fanout, posters, stopped, namespaces, idle, memory
                   (default: all)
      --kinds      fan-out scenarios, e.g. socket,raw-datagram (default: all; the Redis ones,
                   redis,raw-redis,redis-pubsub, only where redis-server is installed)
      --observers  observer counts (default 1,4,16)
      --sizes      payload sizes in bytes (default 16,4096)
      --count      measured notifications per point (default 20,000; quick 1,000)
      --rounds     fan-out rounds, interleaved point by point (default 1; the points the
                   targets judge run at least 5, unless --quick)
      --output     where fanout.json and fanout.svg go (default .build/benchmark)
      --no-anatomy leave out the stamped rounds: by default each of our points a target
                   judges runs once more per round with the library stamping every step
                   from post to handler, on and off in turn, and the report prints where
                   the time goes (the anatomy) and what stamping cost
      --help       this text

    Benchmarks/README.md says how to read the figures.
    """

let arguments = CommandLine.arguments
if arguments.contains("--help") || arguments.contains("-h") {
    print(usage)
    exit(0)
}
switch arguments.dropFirst().first {
case "observe":
    try runObserver(arguments.dropFirst(2))
    exit(0)
case "point":
    guard arguments.count == 3, let spec = try? JSONDecoder().decode(PointSpec.self, from: Data(arguments[2].utf8))
    else { fail("usage: point SPEC-JSON") }
    let result = try runPoint(spec)
    say("result " + String(decoding: try JSONEncoder().encode(result), as: UTF8.self))
    exit(0)
case "soak":
    try runSoak(arguments.dropFirst(2))
    exit(0)
case "soak-senders":
    try runSenderSoak(arguments.dropFirst(2))
    exit(0)
case "hubs":
    try runHubs(arguments.dropFirst(2))
    exit(0)
case "stopped-observer":
    try runStoppedObserver(arguments.dropFirst(2))
    exit(0)
case "idle-observer":
    try runIdleObserver(arguments.dropFirst(2))
    exit(0)
case "ns-observer":
    try runNamespaceObserver(arguments.dropFirst(2))
    exit(0)
case "ns-holder":
    try runNamespaceHolder(arguments.dropFirst(2))
    exit(0)
default:
    // Anything but the options above is a mistake: say so rather than start
    // a run of several minutes.
    let valued: Set = ["--only", "--kinds", "--observers", "--sizes", "--count", "--rounds", "--output"]
    var index = 1
    while index < arguments.count {
        let argument = arguments[index]
        if valued.contains(argument), index + 1 < arguments.count {
            index += 2
        } else if argument == "--quick" || argument == "--no-anatomy" {
            index += 1
        } else {
            FileHandle.standardError.write(
                Data("TypedNotificationsBenchmark: unknown argument \(argument)\n\n\(usage)\n".utf8))
            exit(64)
        }
    }
}

/// Writes the JSON file and, when there are fan-out points, the chart.
func write(_ report: Report) throws {
    try FileManager.default.createDirectory(atPath: outputDirectory, withIntermediateDirectories: true)
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    try encoder.encode(report).write(to: URL(fileURLWithPath: outputDirectory + "/fanout.json"))
    if !report.points.isEmpty {
        try chart(report.points, machine: report.machine).write(
            toFile: outputDirectory + "/fanout.svg", atomically: true, encoding: .utf8)
    }
}

func option(_ flag: String) -> String? {
    arguments.firstIndex(of: flag).flatMap { arguments.indices.contains($0 + 1) ? arguments[$0 + 1] : nil }
}
func list(_ flag: String) -> [String]? { option(flag)?.split(separator: ",").map(String.init) }

let quick = arguments.contains("--quick")
let sections = Set(
    list("--only") ?? ["envelope", "delivery", "fanout", "posters", "stopped", "namespaces", "idle", "memory"])
/// Refuses a `--kinds` list, saying why and which kinds there are; never a trap.
func refuseKinds(_ problem: String) -> Never {
    let known = Kind.allCases.map(\.rawValue).joined(separator: ", ")
    FileHandle.standardError.write(Data("TypedNotificationsBenchmark: \(problem); the kinds are \(known)\n".utf8))
    exit(64)
}
var kinds =
    list("--kinds").map { names in
        names.map { name in
            guard let kind = Kind(rawValue: name) else { refuseKinds("unknown kind \(name)") }
            return kind
        }
    } ?? Kind.allCases
// `--kinds ","` chooses nothing: said, rather than a run of everything else.
if kinds.isEmpty { refuseKinds("--kinds names no kind") }
let observerCounts = list("--observers")?.compactMap { Int($0) } ?? [1, 4, 16]
let sizes = list("--sizes")?.compactMap { Int($0) } ?? [16, 4096]
let latencyCount = option("--count").flatMap(Int.init) ?? (quick ? 1_000 : 20_000)
let rounds = max(1, option("--rounds").flatMap(Int.init) ?? 1)
let outputDirectory = option("--output") ?? ".build/benchmark"
let stampsAnatomy = !arguments.contains("--no-anatomy")
/// Whether a fan-out point also runs with the library stamping each step:
/// ours, where a target judges it (and the in-process hub at N=1, 16 B).
func anatomyPoint(_ kind: Kind, observers: Int, size: Int) -> Bool {
    guard stampsAnatomy, kind.isTypedNotifications else { return false }
    return Report.judgesTarget(kind, observers: observers, size: size)
        || (kind == .hubHandlers && observers == 1 && size == 16)
}
let machine = MachineInfo.current(quick: quick)

if let buildWarning { print(buildWarning) }
print("Machine: \(machine.processor), \(machine.cores) cores, \(machine.kernel)\n")

#if !os(Linux)
    // Said, not silently left out: the file floor sleeps in inotify, which only Linux has.
    if kinds.contains(.rawAppend) {
        print("The raw-append floor skipped: it waits in inotify, which Darwin does not have\n")
        kinds.removeAll { $0 == .rawAppend }
    }
#endif

// The Redis scenarios run against a server of this run's own.
var redisServer: BenchRedisServer?
if (kinds.contains(where: \.meetsAtServer) && (sections.contains("fanout") || sections.contains("memory")))
    || sections.contains("namespaces") || sections.contains("idle")
{
    if let executable = BenchRedisServer.executable {
        redisServer = BenchRedisServer(executable: executable)
    } else {
        print("Redis scenarios skipped: redis-server is not installed (apt-get install redis-server)\n")
        kinds.removeAll(where: \.meetsAtServer)
    }
}
defer { redisServer?.stop() }

var micro = MicroResults()
let microCosts = Micro(count: quick ? 50_000 : 1_000_000, runs: quick ? 3 : 5)
if sections.contains("envelope") { micro = try await microCosts.envelopes(sizes: sizes, into: micro) }
if sections.contains("delivery") { micro = try await microCosts.delivery(into: micro) }

var points: [PointResult] = []
if sections.contains("fanout") {
    print("\nFan-out: \(latencyCount) paced notifications per point for latency, then a burst for throughput")
    // Rounds interleave: every point once, then every point again, so that a
    // slow minute of the machine falls on a floor and its transport alike.
    // The points the targets judge run at least five rounds: a single
    // round's ratio moves by half between rounds on this kind of machine.
    let targetRounds = quick ? rounds : ([rounds] + kinds.map(Report.targetRounds(for:))).max() ?? rounds
    var measured: [String: [PointResult]] = [:]
    var measuredStamped: [String: [PointResult]] = [:]
    var order: [String] = []
    for round in 1...targetRounds {
        if targetRounds > 1 {
            print(
                round <= rounds
                    ? "  round \(round) of \(targetRounds)" : "  round \(round) of \(targetRounds), the targets' points"
            )
        }
        for kind in kinds {
            for size in sizes {
                for observers in observerCounts {
                    guard
                        round <= rounds
                            || (Report.judgesTarget(kind, observers: observers, size: size)
                                && round <= Report.targetRounds(for: kind))
                    else {
                        continue
                    }
                    // Our points that a target judges run once more per round
                    // with the anatomy stamped, on and off in turn first.
                    let stamped = anatomyPoint(kind, observers: observers, size: size)
                    for stamping in stamped ? (round % 2 == 1 ? [false, true] : [true, false]) : [false] {
                        let directory = kind.isCrossProcess ? makeScratchDirectory(kind.rawValue) : ""
                        defer { if kind.isCrossProcess { removeScratchDirectory(directory) } }
                        let spec = PointSpec(
                            kind: kind,
                            observers: observers,
                            payloadBytes: size,
                            warmup: max(100, latencyCount / 10),
                            latencyCount: latencyCount,
                            burstCount: latencyCount,
                            // Light load: the gap grows with N so that 16 observers on
                            // two cores still measure latency, not a queue.
                            gapNanoseconds: 25_000 * UInt64(max(2, observers)),
                            directory: directory,
                            redisURL: redisServer?.url,
                            anatomy: stamping
                        )
                        if kind.meetsAtServer { redisServer?.flush() }
                        let child = Child(["point", String(decoding: try JSONEncoder().encode(spec), as: UTF8.self)])
                        let line = child.expect("result ")
                        child.wait()
                        let point = try JSONDecoder().decode(PointResult.self, from: Data(line.dropFirst(7).utf8))
                        let key = "\(kind.rawValue) \(size) \(observers)"
                        if measured[key] == nil { order.append(key) }
                        if stamping {
                            measuredStamped[key, default: []].append(point)
                        } else {
                            measured[key, default: []].append(point)
                        }
                        print(
                            "  \(padded(kind.label, 26)) N=\(padded("\(observers)", 2)) \(padded("\(size)", 4, right: true)) B: "
                                + "p50 \(microseconds(point.latencyToLast.p50)), p99 \(microseconds(point.latencyToLast.p99)), "
                                + "\(rate(point.throughputPerSecond)), lost \(point.lost)"
                                + (stamping ? " (stamped)" : ""))
                    }
                }
            }
        }
    }
    points = Report.withRatios(
        order.compactMap { key in
            measured[key].map { PointResult.median(of: $0, stamped: measuredStamped[key] ?? []) }
        })
    // Written now too, so a later section's failure cannot lose these figures.
    try write(Report(machine: machine, micro: micro, points: points, memory: nil, targets: []))
}

if sections.contains("posters") {
    let count = quick ? 20_000 : 200_000
    print("\nConcurrent posters: \(count) file-transport posts to one hub, no observer (1 thread is the baseline)")
    var baseline: Double?
    for threads in [1, 2, 4] {
        let result = try measureConcurrentPosters(threads: threads, total: count)
        baseline = baseline ?? result.postsPerSecond
        let ratio = result.postsPerSecond / (baseline ?? result.postsPerSecond)
        print(
            "  \(threads) thread\(threads == 1 ? " " : "s"): \(rate(result.postsPerSecond)) (\(String(format: "%.2f", ratio))× 1 thread), "
                + String(
                    format: "%.1f posts per write, %.2f system calls per post", result.postsPerWrite,
                    result.systemCallsPerPost))
    }
}

if sections.contains("namespaces") {
    try measureNamespaces(quick: quick, rounds: max(5, rounds), redis: redisServer)
}

if sections.contains("stopped") {
    let count = quick ? 2_000 : 20_000
    print("\nA stopped observer: \(count) socket posts to an observer process running, then \(count) with it stopped")
    let stopped = try measureStoppedObserver(count: count)
    let ratio = Double(stopped.stopped.p50) / Double(max(1, stopped.running.p50))
    print(
        "  post, observer running:  p50 \(microseconds(stopped.running.p50)), p99 \(microseconds(stopped.running.p99)), max \(microseconds(stopped.running.max))"
    )
    print(
        "  post, observer stopped:  p50 \(microseconds(stopped.stopped.p50)), p99 \(microseconds(stopped.stopped.p99)), max \(microseconds(stopped.stopped.max)) "
            + "(p50 \(String(format: "%.2f", ratio))× running; \(stopped.spooled) spooled)")
    print("  close with all of it unread: \(microseconds(stopped.closeNanoseconds))")
    print(
        "  on resume the observer received \(stopped.received) of \(2 * count), missed \(stopped.missed)")
}

if sections.contains("idle") {
    _ = try measureIdle(quick: quick, redis: redisServer)
}

var memory: MemoryResults?
if sections.contains("memory") {
    let notifications = quick ? 100_000 : 1_000_000
    print("\nMemory: RSS over \(notifications) notifications to one observer, after a warm-up tenth")
    var results = MemoryResults()
    for kind in [Kind.hubHandlers] + Kind.transports {
        guard !kind.meetsAtServer || redisServer != nil else { continue }
        redisServer?.flush()
        let child = Child(
            ["soak", kind.rawValue, "\(notifications)"] + (kind.meetsAtServer ? [redisServer?.url ?? ""] : []))
        let line = child.expect("result ")
        child.wait()
        let output = try JSONDecoder().decode(SoakOutput.self, from: Data(line.dropFirst(7).utf8))
        results.series.append(output.series)
        results.heapBytesPerHandlerObserver = output.heapBytesPerHandlerObserver ?? results.heapBytesPerHandlerObserver
        results.heapBytesPerSequenceObserver =
            output.heapBytesPerSequenceObserver ?? results.heapBytesPerSequenceObserver
        let samples = output.series.residentKiB.map(String.init).joined(separator: " ")
        print("  \(padded(kind.label, 26)) RSS KiB by tenth: \(samples)  growth \(output.series.growthKiB) KiB")
        if !output.series.heapKiB.isEmpty {
            print(
                "  \(padded("", 26)) heap KiB by tenth: \(output.series.heapKiB.map(String.init).joined(separator: " "))"
            )
        }
    }
    let senders = Child(["soak-senders", "\(notifications)"])
    let sendersLine = senders.expect("result ")
    senders.wait()
    let distinct = try JSONDecoder().decode(SenderSeries.self, from: Data(sendersLine.dropFirst(7).utf8))
    results.distinctSenders = distinct
    print(
        "  \(padded("\(distinct.senders) distinct senders", 26)) RSS KiB by tenth: "
            + "\(distinct.residentKiB.map(String.init).joined(separator: " "))  growth \(distinct.growthKiB) KiB")
    if !distinct.heapKiB.isEmpty {
        print("  \(padded("", 26)) heap KiB by tenth: \(distinct.heapKiB.map(String.init).joined(separator: " "))")
    }
    let hubCount = quick ? 200 : 1_000
    print("\nHubs: \(hubCount) observing hubs of one transport in one process, then one post to all")
    var hubRuns: [HubsOutput] = []
    for kind in [Kind.hubHandlers] + Kind.transports {
        guard !kind.meetsAtServer || redisServer != nil else { continue }
        let child = Child(
            ["hubs", kind.rawValue, "\(hubCount)"] + (kind.meetsAtServer ? [redisServer?.url ?? ""] : []))
        let line = child.expect("result ")
        child.wait()
        let run = try JSONDecoder().decode(HubsOutput.self, from: Data(line.dropFirst(7).utf8))
        hubRuns.append(run)
        print(
            "  \(padded(kind.label, 26)) \(run.opened) opened in \(String(format: "%.1f", run.openSeconds)) s, "
                + "\(run.delivered) delivered, RSS \(run.residentBeforeKiB) → \(run.residentAfterKiB) KiB: "
                + "\(run.perHubKiB) KiB per hub" + (run.failure.map { "; stopped by: \($0)" } ?? ""))
        if let before = run.threadsBefore, let after = run.threadsAfter {
            print("  \(padded("", 26)) threads \(before) → \(after)", terminator: "")
            if let package = run.packageThreadsAfter { print(" (\(package) of the package's)", terminator: "") }
        }
        if let close = run.closeWithHandlerMicroseconds {
            print(String(format: "; close() with a handler running: %.1f µs", close), terminator: "")
            if let longest = run.closeWithHandlerMicrosecondsLongest, let timed = run.closesTimed {
                print(String(format: " (median of %d; longest %.1f µs)", timed, longest), terminator: "")
            }
        }
        print("")
    }
    results.hubs = hubRuns
    if let handler = results.heapBytesPerHandlerObserver, let sequence = results.heapBytesPerSequenceObserver {
        print("  one more observer on a hub: \(handler) heap bytes (handler), \(sequence) (sequence)")
    }
    memory = results
}

// One poster to Redis, no observer: each post waiting for its acknowledgement,
// then post(contentsOf:) in batches of 1,000 (pipelined 64 at a time).
var redisPosting: (single: Double, pipelined: Double)?
if sections.contains("fanout"), kinds.contains(.redis), let redisServer {
    let count = quick ? 20_000 : 200_000
    redisServer.flush()
    print(
        "\nRedis posts from one poster: \(count) one at a time, then \(count) with post(contentsOf:) in batches of 1,000"
    )
    let transport = try RedisStreamsTransport(
        url: redisServer.url, configuration: RedisStreamsConfiguration(maximumLength: 10_000))
    let hub = try NotificationHub(endpoint: "poster", transport: transport)
    let filler = BenchTick.filler(forPayloadSize: 16)
    var start = now()
    for index in 0..<count { try hub.post(BenchTick(index: UInt64(index), filler: filler)) }
    let single = Double(count) / (Double(now() - start) / 1e9)
    start = now()
    for batch in stride(from: 0, to: count, by: 1_000) {
        let ticks = (batch..<min(count, batch + 1_000)).map { BenchTick(index: UInt64($0), filler: filler) }
        try hub.post(contentsOf: ticks)
    }
    let pipelined = Double(count) / (Double(now() - start) / 1e9)
    hub.closeAndWait()
    redisPosting = (single, pipelined)
    print(
        "  one at a time: \(rate(single)); post(contentsOf:): \(rate(pipelined)) (\(String(format: "%.1f", pipelined / single))×)"
    )
}

var targets = Report.targets(points: points, micro: micro, memory: memory)
if let redisPosting {
    targets.append(
        TargetResult(
            target: "redis: ≥ 50,000 posts/s from one poster with pipelining (post(contentsOf:))",
            measured: String(
                format: "%.0f/s (one at a time, each acknowledged: %.0f/s)", redisPosting.pipelined,
                redisPosting.single),
            met: redisPosting.pipelined >= 50_000))
}
let report = Report(machine: machine, micro: micro, points: points, memory: memory, targets: targets)
if !points.isEmpty {
    print("\nFan-out results (latency: post until the last observer has it; × base: against the group's baseline)")
    print(table(points))
    let anatomies = anatomyTable(points)
    if !anatomies.isEmpty {
        print("\nThe anatomy: each step from post to handler (stamped rounds, the median one), and each side's CPU")
        print(anatomies)
    }
    if rounds > 1 {
        print("\nEvery round's p50 to the last observer (each point above is its median round)")
        for point in points {
            let p50s = (point.roundLatencyP50s ?? []).map(microseconds).joined(separator: ", ")
            print(
                "  \(padded(point.label, 26)) N=\(padded("\(point.observers)", 2)) \(padded("\(point.payloadBytes)", 4, right: true)) B: \(p50s)"
            )
        }
    }
}
if !targets.isEmpty {
    print("\nTargets (reported, never asserted)")
    for target in targets { print("  [\(target.met ? "met" : "MISSED")] \(target.target): \(target.measured)") }
}
if sections.contains("fanout") || sections.contains("memory") {
    try write(report)
    print("\nWrote \(outputDirectory)/fanout.json" + (points.isEmpty ? "" : " and fanout.svg"))
}
if let buildWarning { print(buildWarning) }
