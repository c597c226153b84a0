import Foundation
import NotificationPlatform
import TypedNotifications

// In-process delivery cost: post until the handler has run, per notification,
// for the typed hub and for baselines measured in the same run; and the cost
// of encoding and decoding one envelope. The fan-out benchmark across
// transports and processes builds on this harness.
//
//   TypedNotificationsBenchmark [--quick] [--count N]
//       [--only envelope|encode|decode|delivery] [--size BYTES]

struct Tick: TypedNotification, Codable {
    static let name: NotificationName = "bench.tick"
    var index: Int
}

#if DEBUG
    let buildWarning: String? =
        "WARNING: debug build; figures are meaningless. Use `swift run -c release TypedNotificationsBenchmark`."
#else
    let buildWarning: String? = nil
#endif

let arguments = CommandLine.arguments
let quick = arguments.contains("--quick")
func option(_ flag: String) -> String? {
    arguments.firstIndex(of: flag).flatMap { arguments.indices.contains($0 + 1) ? arguments[$0 + 1] : nil }
}
let count = option("--count").flatMap(Int.init) ?? (quick ? 50_000 : 1_000_000)
let runs = quick ? 3 : 5
let only = option("--only")

/// Runs `body` once to warm up, then `runs` times; returns the best
/// nanoseconds per notification.
func measure(_ label: String, _ body: () async throws -> Int) async rethrows -> Double {
    var best = Double.infinity
    var checksum = 0
    _ = try await body()
    for _ in 0..<runs {
        let start = SystemClock.monotonicNanoseconds()
        checksum &+= try await body()
        let elapsed = SystemClock.monotonicNanoseconds() - start
        best = min(best, Double(elapsed) / Double(count))
    }
    // Printing the checksum keeps the optimizer from deleting the work.
    print(String(format: "%-44@ %9.1f ns/notification  (checksum %d)", label as NSString, best, checksum))
    return best
}

/// The floor: a lock-guarded table lookup plus a closure call.
func floorRun() -> Int {
    let table = Locked<[NotificationName: [@Sendable (Tick) -> Int]]>([Tick.name: [{ $0.index }]])
    var sum = 0
    for index in 0..<count {
        let handlers = table.withLock { $0[Tick.name] } ?? []
        for handler in handlers { sum &+= handler(Tick(index: index)) }
    }
    return sum
}

func hubHandlerRun() async throws -> Int {
    let hub = try NotificationHub(endpoint: "bench", transport: InProcessTransport(bus: InProcessBus()))
    let done = AsyncStream<Int>.makeStream()
    let token = try hub.addObserver(Tick.self, bufferingPolicy: .unbounded) { tick, _ in
        if tick.index == count - 1 { done.continuation.yield(tick.index) }
    }
    for index in 0..<count { try hub.post(Tick(index: index)) }
    var iterator = done.stream.makeAsyncIterator()
    let last = await iterator.next() ?? 0
    await token.cancel()
    return last
}

func hubSequenceRun() async throws -> Int {
    let hub = try NotificationHub(endpoint: "bench", transport: InProcessTransport(bus: InProcessBus()))
    let ticks = try hub.notifications(of: Tick.self, bufferingPolicy: .unbounded)
    let reader = Task {
        var sum = 0
        for await tick in ticks {
            sum &+= tick.index
            if tick.index == count - 1 { break }
        }
        return sum
    }
    for index in 0..<count { try hub.post(Tick(index: index)) }
    return await reader.value
}

func foundationBlockRun() -> Int {
    let center = NotificationCenter()
    let name = Notification.Name(Tick.name.rawValue)
    let sum = Locked(0)
    let observer = center.addObserver(forName: name, object: nil, queue: nil) { note in
        let index = note.userInfo?["index"] as? Int ?? 0
        sum.withLock { $0 &+= index }
    }
    for index in 0..<count { center.post(name: name, object: nil, userInfo: ["index": index]) }
    center.removeObserver(observer)
    return sum.withLock { $0 }
}

/// Encodes `count` envelopes with a payload of `size` bytes.
func envelopeEncodeRun(size: Int) throws -> Int {
    let sender = try NotificationSender(processID: 1, userID: 0, endpoint: "bench", instance: 7)
    let payload = [UInt8](repeating: 0x5A, count: size)
    let timestamp = NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
    var sum = 0
    for index in 0..<count {
        let encoded = try NotificationEnvelope.encode(
            name: Tick.name,
            sender: sender,
            sequence: UInt64(index + 1),
            timestamp: timestamp,
            payloadSizeHint: payload.payloadSizeHint
        ) { $0.append(contentsOf: payload) }
        sum &+= encoded.envelopeRange.count
    }
    return sum
}

/// Decodes `count` envelopes received as separate buffers, as a transport would.
func envelopeDecodeRun(size: Int) throws -> Int {
    let sender = try NotificationSender(processID: 1, userID: 0, endpoint: "bench", instance: 7)
    let wire = Array(
        try NotificationEnvelope.encode(
            name: Tick.name,
            sender: sender,
            sequence: 1,
            timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
        ) { $0.append(contentsOf: [UInt8](repeating: 0x5A, count: size)) }.envelope
    )
    var decoder = EnvelopeDecoder()
    var sum = 0
    for _ in 0..<count {
        // Each message arrives in a buffer of its own (the one allocation).
        let received = wire.withUnsafeBufferPointer { [UInt8]($0) }
        let message = try decoder.decode(received)
        sum &+= Int(truncatingIfNeeded: message.sequence)
    }
    return sum
}

if let buildWarning { print(buildWarning) }
let sizes = option("--size").flatMap(Int.init).map { [$0] } ?? [16, 4096]
if only == "encode" {
    for size in sizes { _ = try await measure("encode, \(size) B payload") { try envelopeEncodeRun(size: size) } }
} else if only == "decode" {
    for size in sizes { _ = try await measure("decode, \(size) B payload") { try envelopeDecodeRun(size: size) } }
} else if only == nil || only == "envelope" {
    print("Envelope encode and decode, \(count) messages, best of \(runs) runs")
    for size in sizes {
        let encode = try await measure("encode, \(size) B payload") { try envelopeEncodeRun(size: size) }
        let decode = try await measure("decode, \(size) B payload") { try envelopeDecodeRun(size: size) }
        let bytes = Double(
            NotificationEnvelope.size(
                nameLength: Tick.name.rawValue.utf8.count,
                endpointLength: 5,
                payloadLength: size
            )
        )
        print(String(format: "  %.2f GB/s encode, %.2f GB/s decode", bytes / encode, bytes / decode))
    }
}
guard only == nil || only == "delivery" else { exit(0) }
print("In-process delivery, \(count) notifications, best of \(runs) runs, one observer")
let floor = await measure("floor: locked lookup + closure call", floorRun)
let handler = try await measure("NotificationHub, handler on its executor", hubHandlerRun)
let sequence = try await measure("NotificationHub, for await sequence", hubSequenceRun)
let foundation = await measure("Foundation NotificationCenter, block observer", foundationBlockRun)
print(
    String(
        format: "ratios: handler/floor %.1f×, sequence/floor %.1f×, Foundation/handler %.2f×",
        handler / floor, sequence / floor, foundation / handler))
