import Foundation
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// The distinct-senders memory run, in a process of its own:
//
//   TypedNotificationsBenchmark soak-senders COUNT
//
// One long-lived observer of a name that COUNT short-lived senders post to,
// each once, as a cron job's CLI would: every message comes from a new sender
// identity. The envelopes are injected where a cross-process transport hands
// them to the hub, so the run weighs the hub's per-sender state alone.
// Samples the resident set after each tenth; prints "result JSON".

/// Hands envelopes to the hub as a transport's receive thread would.
final class InjectingTransport: NotificationTransport {
    private let receiver = Locked<TransportReceiver?>(nil)
    var payloadForm: TransportPayloadForm { .encoded }
    func open(as sender: NotificationSender, receiver: TransportReceiver) throws(TypedNotificationError) {
        self.receiver.withLock { $0 = receiver }
    }
    func subscribe(to selector: NotificationSelector) throws(TypedNotificationError) {}
    func unsubscribe(from selector: NotificationSelector) {}
    func send(_ message: TransportMessage) throws(TypedNotificationError) {}
    func close() { receiver.withLock { $0 = nil } }
    func inject(_ message: TransportMessage) { receiver.withLock { $0 }?.receive(message) }
}

/// Resident set over a run of distinct senders.
struct SenderSeries: Codable, Sendable {
    var senders: Int
    var residentKiB: [Int]
    var growthKiB: Int
    /// The allocator's bytes in use after each tenth, in KiB (empty where
    /// it cannot say): live heap, as opposed to pages the allocator keeps.
    var heapKiB: [Int] = []
}

func runSenderSoak(_ arguments: ArraySlice<String>) throws {
    guard arguments.count == 1, let count = Int(arguments[arguments.startIndex]), count >= 10 else {
        fail("usage: soak-senders COUNT")
    }
    let transport = InjectingTransport()
    let hub = try NotificationHub(endpoint: "soak", transport: transport)
    defer { hub.closeAndWait() }
    let tenth = count / 10
    // In chunks, each delivered before the next (as the other memory runs
    // do), so the run measures steady state rather than a backlog's size.
    let chunk = tenth % 5000 == 0 ? 5000 : tenth
    let counter = BatchCounter(batchSize: chunk)
    let token = try hub.addObserver(.of(BenchTick.self), bufferingPolicy: .unbounded) { _, _ in counter.deliver() }
    defer { token.cancel() }
    let filler = BenchTick.filler(forPayloadSize: 16)
    let pid = Int32(truncatingIfNeeded: ProcessInfo.processInfo.processIdentifier)
    var samples: [Int] = []
    var heap: [Int] = []
    var instance: UInt64 = 0
    // A warm-up tenth, not sampled, then ten sampled tenths.
    for round in 0...10 {
        for _ in 0..<(tenth / chunk) {
            for _ in 0..<chunk {
                instance += 1
                let sender = try NotificationSender(processID: pid, userID: 0, endpoint: "cron", instance: instance)
                let timestamp = NotificationTimestamp(
                    wallClockNanoseconds: SystemClock.wallClockNanoseconds(),
                    monotonicNanoseconds: SystemClock.monotonicNanoseconds())
                let encoded = try NotificationEnvelope.encode(
                    name: BenchTick.name, sender: sender, sequence: 1, timestamp: timestamp
                ) { try BenchTick(index: instance, filler: filler).encodePayload(into: &$0) }
                transport.inject(
                    TransportMessage(
                        name: BenchTick.name, sender: sender, sequence: 1, timestamp: timestamp,
                        payload: .encoded(encoded)))
            }
            guard counter.batchDone.wait(timeout: .now() + 120) == .success else {
                fail("soak-senders: tenth \(round) was not delivered")
            }
        }
        if round > 0 {
            samples.append(currentResidentKiB() ?? 0)
            if let bytes = heapBytesInUse() { heap.append(bytes / 1024) }
        }
    }
    let series = SenderSeries(
        senders: tenth * 10, residentKiB: samples, growthKiB: (samples.last ?? 0) - (samples.first ?? 0),
        heapKiB: heap)
    say("result " + String(decoding: try JSONEncoder().encode(series), as: UTF8.self))
}
