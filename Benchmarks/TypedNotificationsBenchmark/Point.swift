import Dispatch
import Foundation
import TypedNotifications
import TypedNotificationsCatalog
@_spi(TransportAuthoring) import TypedNotificationsPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// One scenario, run in a process of its own so that its peak RSS, CPU time
// and allocations are its own: set up N observers, post paced notifications
// (latency), then a back-to-back burst (throughput), then an end marker.

/// How a scenario posts: one call per notification, then flush and close.
struct Poster {
    var post: (BenchTick) throws -> Void
    var flush: () -> Void = {}
    var close: () -> Void = {}
}

/// The message Foundation's `AsyncMessage` baseline posts.
struct BenchMessage: NotificationCenter.AsyncMessage {
    typealias Subject = AnyObject
    var tick: BenchTick
}

extension NotificationCenter.MessageIdentifier where Self == NotificationCenter.BaseMessageIdentifier<BenchMessage> {
    static var benchTick: Self { .init() }
}

/// Runs one scenario and returns its figures, without ratios.
func runPoint(_ spec: PointSpec) throws -> PointResult {
    let primed = Countdown()
    var recorders: [Recorder] = []
    var children: [Child] = []
    let poster: Poster
    if spec.kind.isCrossProcess {
        if spec.kind == .rawAppend {
            guard FileManager.default.createFile(atPath: spec.directory + "/raw.log", contents: nil) else {
                fail("cannot create \(spec.directory)/raw.log")
            }
        }
        children = (0..<spec.observers).map { index in
            Child(
                [
                    // Redis observers get the server's URL where the others get the directory.
                    "observe", spec.kind.rawValue, spec.kind.meetsAtServer ? (spec.redisURL ?? "") : spec.directory,
                    "\(spec.total)",
                    stampsPath(spec, index), "\(spec.payloadBytes)", "\(index)",
                ] + (spec.anatomy == true ? ["anatomy"] : []))
        }
        for child in children { _ = child.expect("ready") }
        if let entry = spec.kind.entry {
            poster = try makeTransportPoster(entry, spec)
        } else {
            poster = try spec.kind.meetsAtServer ? makeRedisPoster(spec) : makeCrossProcessPoster(spec)
        }
    } else {
        recorders = (0..<spec.observers).map { _ in Recorder(total: spec.total, primed: primed) }
        poster = try makeInProcessPoster(spec, recorders)
        // Some observers (AsyncMessage) register only once iterated: post
        // probes until every observer has seen one.
        let deadline = now() + 30_000_000_000
        while primed.arrived < spec.observers {
            guard now() < deadline else { fail("\(spec.kind.rawValue): observers never became ready") }
            try poster.post(BenchTick(index: BenchTick.probeIndex, filler: []))
            usleep(500)
        }
    }

    // Stamped from the first paced post on: probes and setting up are not the path.
    if spec.anatomy == true { Anatomy.start(capacity: anatomyCapacity(total: spec.total)) }
    let filler = BenchTick.filler(forPayloadSize: spec.payloadBytes)
    var postStamps = [UInt64](repeating: 0, count: spec.total)
    var next = now()
    for index in 0..<(spec.warmup + spec.latencyCount) {
        if now() < next { sleep(until: next) }
        let stamp = now()
        postStamps[index] = stamp
        try poster.post(BenchTick(index: UInt64(index), filler: filler))
        next = stamp + spec.gapNanoseconds
    }
    // Let the paced phase's last notifications arrive before the burst.
    sleep(until: now() + 20_000_000)

    let cpuBefore = processCPUNanoseconds()
    let allocationsBefore = allocationCount()
    let callsBefore = SystemCalls.made.load(ordering: .relaxed)
    for index in spec.burst {
        postStamps[index] = now()
        try poster.post(BenchTick(index: UInt64(index), filler: filler))
    }
    let callsAfter = SystemCalls.made.load(ordering: .relaxed)
    poster.flush()
    try poster.post(BenchTick(index: BenchTick.endIndex, filler: []))
    poster.flush()

    // Every observer's receive stamps, and the largest observer peak RSS.
    var observerStamps: [[UInt64]] = []
    var observerPeak: Int?
    var observerCPU: Double?
    var observerAnatomies: [[Anatomy.Stamp]] = []
    if spec.kind.isCrossProcess {
        for (index, child) in children.enumerated() {
            let done = child.expect("done")
            child.wait()
            func figure(_ label: String) -> Int? {
                done.split(separator: " ").first { $0.hasPrefix(label + "=") }.flatMap {
                    Int($0.dropFirst(label.count + 1))
                }
            }
            observerPeak = max(observerPeak ?? 0, figure("rss") ?? 0)
            if let cpu = figure("cpu"), let received = figure("received"), received > 0 {
                observerCPU = (observerCPU ?? 0) + Double(cpu) / Double(received) / Double(children.count)
            }
            observerStamps.append(readStamps(stampsPath(spec, index), count: spec.total))
            if spec.anatomy == true { observerAnatomies.append(readAnatomy(stampsPath(spec, index) + ".anatomy")) }
        }
    } else {
        for recorder in recorders {
            guard recorder.finished.wait(timeout: .now() + 120) == .success else {
                fail("\(spec.kind.rawValue): an observer never saw the end marker")
            }
            observerStamps.append(Array(recorder.stamps))
        }
    }
    let cpuAfter = processCPUNanoseconds()
    let allocationsAfter = allocationCount()
    poster.close()
    var stepsTaken: AnatomyResult?
    if spec.anatomy == true {
        let posterStamps = Anatomy.stop()
        stepsTaken = anatomy(
            poster: posterStamps, observers: spec.kind.isCrossProcess ? observerAnatomies : [posterStamps],
            sampled: spec.measuredLatency)
    }

    // Latency of the paced phase, to each observer and to the last one.
    var toEach: [UInt64] = []
    var toLast: [UInt64] = []
    var lost = 0
    toEach.reserveCapacity(spec.latencyCount * spec.observers)
    for index in spec.measuredLatency {
        var slowest: UInt64? = 0
        for stamps in observerStamps {
            let received = stamps[index]
            guard received != 0 else {
                lost += 1
                slowest = nil
                continue
            }
            let latency = received &- postStamps[index]
            toEach.append(latency)
            slowest = slowest.map { max($0, latency) }
        }
        if let slowest { toLast.append(slowest) }
    }
    // Throughput: the burst, from its first post until the slowest observer had its last.
    var burstEnd: UInt64 = 0
    for stamps in observerStamps {
        for index in spec.burst {
            if stamps[index] == 0 {
                lost += 1
            } else {
                burstEnd = max(burstEnd, stamps[index])
            }
        }
    }
    let burstStart = postStamps[spec.burst.lowerBound]
    let seconds = Double(burstEnd &- burstStart) / 1e9
    let burstCount = Double(spec.burstCount)
    return PointResult(
        kind: spec.kind,
        label: spec.kind.label,
        group: spec.kind.group,
        observers: spec.observers,
        payloadBytes: spec.payloadBytes,
        latencyCount: spec.latencyCount,
        burstCount: spec.burstCount,
        gapNanoseconds: spec.gapNanoseconds,
        latencyToEach: Percentiles(toEach),
        latencyToLast: Percentiles(toLast),
        throughputPerSecond: burstEnd > burstStart ? burstCount / seconds : 0,
        posterCPUNanosecondsPerPost: Double(cpuAfter - cpuBefore) / burstCount,
        systemCallsPerPost: spec.kind.isCrossProcess ? Double(callsAfter - callsBefore) / burstCount : nil,
        allocationsPerPost: allocationsBefore.flatMap { before in
            allocationsAfter.map { Double($0 - before) / burstCount }
        },
        posterPeakRSSKiB: peakResidentKiB(),
        observerPeakRSSKiB: observerPeak,
        observerCPUNanosecondsPerNotification: observerCPU,
        lost: lost,
        anatomy: stepsTaken
    )
}

func stampsPath(_ spec: PointSpec, _ index: Int) -> String { spec.directory + "/stamps-\(index)" }

/// Reads an observer's receive stamps, written as native UInt64s.
func readStamps(_ path: String, count: Int) -> [UInt64] {
    guard let data = FileManager.default.contents(atPath: path), data.count == count * 8 else {
        fail("missing or short stamps file \(path)")
    }
    return data.withUnsafeBytes { Array($0.bindMemory(to: UInt64.self)) }
}

/// The in-process kinds: observers in this process, posting on this thread.
func makeInProcessPoster(_ spec: PointSpec, _ recorders: [Recorder]) throws -> Poster {
    switch spec.kind {
    case .floor:
        // A mutex-guarded table lookup plus a closure call per observer.
        let handlers: [@Sendable (BenchTick) -> Void] = recorders.map { recorder in { recorder.record($0.index) } }
        let table = Locked<[NotificationName: [@Sendable (BenchTick) -> Void]]>([BenchTick.name: handlers])
        return Poster(post: { tick in
            for handler in table.withLock({ $0[BenchTick.name] }) ?? [] { handler(tick) }
        })
    case .foundation:
        let center = NotificationCenter()
        let name = Notification.Name(BenchTick.name.rawValue)
        let observers = recorders.map { recorder in
            center.addObserver(forName: name, object: nil, queue: nil) { note in
                if let tick = note.userInfo?["tick"] as? BenchTick { recorder.record(tick.index) }
            }
        }
        return Poster(
            post: { center.post(name: name, object: nil, userInfo: ["tick": $0]) },
            close: { for observer in observers { center.removeObserver(observer) } }
        )
    case .asyncMessage:
        let center = NotificationCenter()
        let tasks = recorders.map { recorder in
            Task.detached {
                for await message in center.messages(of: AnyObject.self, for: .benchTick, bufferSize: spec.total + 1) {
                    recorder.record(message.tick.index)
                    if message.tick.index == BenchTick.endIndex { break }
                }
            }
        }
        return Poster(post: { center.post(BenchMessage(tick: $0)) }, close: { for task in tasks { task.cancel() } })
    case .hubHandlers:
        let hub = try NotificationHub(endpoint: "bench", transport: InProcessTransport(bus: InProcessBus()))
        let tokens = try recorders.map { recorder in
            try hub.addObserver(.of(BenchTick.self), bufferingPolicy: .unbounded) { tick, _ in
                recorder.record(tick.index)
            }
        }
        return Poster(post: { try hub.post($0) }, close: { for token in tokens { token.cancel() } })
    case .hubSequences:
        let hub = try NotificationHub(endpoint: "bench", transport: InProcessTransport(bus: InProcessBus()))
        let tasks = try recorders.map { recorder in
            let ticks = try hub.notifications(.of(BenchTick.self), bufferingPolicy: .unbounded)
            return Task.detached {
                for await tick in ticks {
                    recorder.record(tick.index)
                    if tick.index == BenchTick.endIndex { break }
                }
            }
        }
        return Poster(post: { try hub.post($0) }, close: { for task in tasks { task.cancel() } })
    default:
        fail("\(spec.kind.rawValue) is not an in-process kind")
    }
}

/// One of our transports posting, from the catalog: this process posts,
/// observer processes are running. No drops: what a slower reader has not
/// taken yet waits (a socket's spool), with room for far more than a burst.
func makeTransportPoster(_ entry: TransportEntry, _ spec: PointSpec) throws -> Poster {
    let place = entry.place(spec.kind.meetsAtServer ? (spec.redisURL ?? "") : spec.directory)
    return try makeTransportPoster(entry.make(place, TransportRequest(backlogBytes: 1 << 30)))
}

private func makeTransportPoster<T: NotificationTransport>(_ transport: T) throws -> Poster {
    let hub = try NotificationHub(endpoint: "poster", transport: transport)
    guard let waiting = transport as? any WaitsForReaders else {
        return Poster(post: { try hub.post($0) }, close: { hub.closeAndWait() })
    }
    return Poster(
        post: { try hub.post($0) },
        flush: { _ = waiting.flush(timeout: .seconds(120)) },
        close: { hub.closeAndWait() }
    )
}

/// The floors: this process posts, observer processes are running.
func makeCrossProcessPoster(_ spec: PointSpec) throws -> Poster {
    switch spec.kind {
    case .rawDatagram, .rawDatagramEpoll:
        // The floor: a blocking datagram per observer, no framing, no registry.
        let sockets = (0..<spec.observers).map { index in
            let descriptor = rawSocket(AF_UNIX, stream: false)
            guard descriptor >= 0,
                (try? SystemCalls.connectSocket(raw: descriptor, toSocketPath: rawSocketPath(spec.directory, index))
                    .get()) != nil
            else {
                fail("raw datagram connect: errno \(errno)")
            }
            return descriptor
        }
        let buffer = RawRecord(size: spec.payloadBytes)
        return Poster(
            post: { tick in
                buffer.set(tick.index)
                for descriptor in sockets {
                    // Counted with the library's calls, for the per-post figure.
                    SystemCalls.count()
                    guard buffer.bytes.withUnsafeBytes({ send(descriptor, $0.baseAddress, $0.count, 0) }) >= 0 else {
                        fail("raw datagram send: errno \(errno)")
                    }
                }
            },
            close: { for descriptor in sockets { closeDescriptor(descriptor) } }
        )
    case .rawAppend:
        // The floor: one append per post to one file every observer watches.
        let descriptor = open(spec.directory + "/raw.log", O_WRONLY | O_APPEND | O_CLOEXEC)
        guard descriptor >= 0 else { fail("raw append open: errno \(errno)") }
        let buffer = RawRecord(size: spec.payloadBytes)
        return Poster(
            post: { tick in
                buffer.set(tick.index)
                SystemCalls.count()
                guard
                    buffer.bytes.withUnsafeBytes({ write(descriptor, $0.baseAddress, $0.count) }) == buffer.bytes.count
                else { fail("raw append: errno \(errno)") }
            },
            close: { closeDescriptor(descriptor) }
        )
    default:
        fail("\(spec.kind.rawValue) is not a socket or file kind")
    }
}

func rawSocketPath(_ directory: String, _ index: Int) -> String { directory + "/raw-\(index).sock" }

/// The bytes of one raw baseline record: the index, then filler.
final class RawRecord {
    var bytes: [UInt8]
    init(size: Int) { bytes = [UInt8](repeating: 0x5A, count: max(8, size)) }
    func set(_ index: UInt64) {
        bytes.withUnsafeMutableBytes { $0.storeBytes(of: index.littleEndian, as: UInt64.self) }
    }
}
