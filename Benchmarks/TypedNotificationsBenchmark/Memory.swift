import Dispatch
import Foundation
import TypedNotifications
import TypedNotificationsCatalog
import TypedNotificationsRedis

// The memory run, in a process of its own:
//
//   TypedNotificationsBenchmark soak KIND COUNT
//
// posts COUNT notifications to one observer of the same process in ten
// batches, waits for each batch to be delivered, and samples the resident
// set after each; for the in-process hub it also weighs one observer.
// Prints "result JSON".

/// Counts deliveries and wakes the poster at the end of each chunk.
///
/// `@unchecked Sendable`: `delivered` is written only by the one handler
/// (serial) and never read elsewhere; the poster only waits on `batchDone`.
final class BatchCounter: @unchecked Sendable {
    private var delivered = 0
    let batchSize: Int
    let batchDone = DispatchSemaphore(value: 0)
    init(batchSize: Int) { self.batchSize = batchSize }
    func deliver() {
        delivered += 1
        if delivered % batchSize == 0 { batchDone.signal() }
    }
}

struct SoakOutput: Codable {
    var series: MemoryResults.Series
    var heapBytesPerHandlerObserver: Int?
    var heapBytesPerSequenceObserver: Int?
}

func runSoak(_ arguments: ArraySlice<String>) throws {
    let values = Array(arguments)
    guard values.count == 2 || values.count == 3, let kind = Kind(rawValue: values[0]), let count = Int(values[1]),
        count >= 10
    else {
        fail("usage: soak hub-handlers|TRANSPORT COUNT [URL]")
    }
    let directory = makeScratchDirectory("soak")
    defer { removeScratchDirectory(directory) }
    var output: SoakOutput
    if kind == .hubHandlers {
        output = SoakOutput(series: try soak(InProcessTransport(bus: InProcessBus()), kind: kind, count: count))
        (output.heapBytesPerHandlerObserver, output.heapBytesPerSequenceObserver) = try observerCost()
    } else if let entry = kind.entry, !kind.meetsAtServer || values.count == 3 {
        // What is kept by count is trimmed, so a server stays small over a long run.
        let transport = try entry.make(
            entry.place(kind.meetsAtServer ? values[2] : directory), TransportRequest(keepAtMost: 10_000))
        output = SoakOutput(series: try soak(transport, kind: kind, count: count))
    } else {
        fail("soak runs hub-handlers or a transport of the catalog (with a URL where it needs a server)")
    }
    let encoder = JSONEncoder()
    encoder.outputFormatting = .sortedKeys
    say("result " + String(decoding: try encoder.encode(output), as: UTF8.self))
}

/// Posts `count` notifications in tenths and samples RSS after each; a
/// warm-up tenth comes first and is not sampled. Each tenth goes out in
/// chunks that fit a socket poster's queue, each delivered before the next,
/// so the run measures steady state rather than a growing backlog.
func soak<T: NotificationTransport>(_ transport: T, kind: Kind, count: Int) throws -> MemoryResults.Series {
    let hub = try NotificationHub(endpoint: "soak", transport: transport)
    defer { hub.closeAndWait() }
    let batch = count / 10
    let chunk = batch % 5000 == 0 ? 5000 : batch
    let counter = BatchCounter(batchSize: chunk)
    let token = try hub.addObserver(.of(BenchTick.self), bufferingPolicy: .unbounded) { _, _ in counter.deliver() }
    defer { token.cancel() }
    let filler = BenchTick.filler(forPayloadSize: 16)
    var index: UInt64 = 0
    var samples: [Int] = []
    var heap: [Int] = []
    for round in 0...10 {
        for _ in 0..<(batch / chunk) {
            for _ in 0..<chunk {
                try hub.post(BenchTick(index: index, filler: filler))
                index += 1
            }
            guard counter.batchDone.wait(timeout: .now() + 120) == .success else {
                fail("soak \(kind.rawValue): tenth \(round) was not delivered")
            }
        }
        if round > 0 {
            samples.append(currentResidentKiB() ?? 0)
            if let bytes = heapBytesInUse() { heap.append(bytes / 1024) }
        }
    }
    return MemoryResults.Series(
        kind: kind,
        notifications: batch * 10,
        residentKiB: samples,
        growthKiB: (samples.last ?? 0) - (samples.first ?? 0),
        heapKiB: heap
    )
}

/// Heap bytes per observer: registers 1,000 handlers, then 1,000 sequences,
/// on a fresh hub and weighs the heap before and after.
func observerCost() throws -> (handler: Int?, sequence: Int?) {
    let observers = 1000
    let hub = try NotificationHub(endpoint: "weigh", transport: InProcessTransport(bus: InProcessBus()))
    // The first registration builds the hub's tables; weigh from the second.
    let first = try hub.addObserver(.of(BenchTick.self)) { _, _ in }
    guard let before = heapBytesInUse() else { return (nil, nil) }
    var tokens: [ObservationToken] = []
    for _ in 0..<observers { tokens.append(try hub.addObserver(.of(BenchTick.self)) { _, _ in }) }
    let afterHandlers = heapBytesInUse() ?? before
    var sequences: [NotificationSequence<BenchTick>] = []
    for _ in 0..<observers { sequences.append(try hub.notifications(.of(BenchTick.self))) }
    let afterSequences = heapBytesInUse() ?? afterHandlers
    for token in tokens { token.cancel() }
    first.cancel()
    withExtendedLifetime(sequences) {}
    hub.closeAndWait()
    return ((afterHandlers - before) / observers, (afterSequences - afterHandlers) / observers)
}
