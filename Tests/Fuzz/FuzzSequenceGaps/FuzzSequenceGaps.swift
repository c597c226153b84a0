import Dispatch
import Synchronization
@_spi(TransportAuthoring) import TypedNotifications

#if canImport(Glibc)
    import Glibc
#endif

/// The notification every forged message carries.
struct Probe: TypedNotification, Codable {
    static let name: NotificationName = "fuzz.gaps"
    var index: Int
}

/// Hands the fuzzer's messages to the hub as a cross-process transport would.
final class InjectingTransport: NotificationTransport {
    private let receiver = Mutex<TransportReceiver?>(nil)
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

/// The gap rule the hub promises, with no bound on memory and 128-bit sums.
struct Model {
    var last: [Int: UInt64] = [:]
    var total: UInt128 = 0

    mutating func note(_ sequence: UInt64, from sender: Int) {
        total += 1
        if let previous = last[sender], sequence > previous { total += UInt128(sequence - previous - 1) }
        last[sender] = sequence
    }
}

/// libFuzzer's entry point. The first byte picks the observer's buffer; then
/// every 9 bytes are one message: a sender (of 4) and a sequence number, any
/// 64-bit value. The messages go through a hub to one observer. A trap is a
/// finding, and so is any notification that is neither delivered nor counted
/// in a later delivery's `missed` (sums saturate at `Int.max`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSequenceGaps(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let first = bytes.first else { return 0 }
    // Newest-keeping policies fold every drop into a delivery that still comes.
    let policy: NotificationBufferingPolicy = first % 9 == 0 ? .unbounded : .bufferingNewest(Int(first % 9))
    do {
        let transport = InjectingTransport()
        let hub = try NotificationHub(endpoint: "fuzz", transport: transport)
        let deliveries = try hub.deliveries(.of(Probe.self), bufferingPolicy: policy)
        let senders = try (1...4).map {
            try NotificationSender(processID: getpid(), userID: getuid(), endpoint: "forger", instance: UInt64($0))
        }
        var model = Model()
        var offset = 1
        var index = 0
        while offset + 9 <= bytes.count {
            let who = Int(bytes[offset] % 4)
            var sequence: UInt64 = 0
            for byte in bytes[(offset + 1)..<(offset + 9)].reversed() { sequence = sequence << 8 | UInt64(byte) }
            offset += 9
            let timestamp = NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
            let encoded = try NotificationEnvelope.encode(
                name: Probe.name, sender: senders[who], sequence: sequence, timestamp: timestamp
            ) { try Probe(index: index).encodePayload(into: &$0) }
            transport.inject(
                TransportMessage(
                    name: Probe.name, sender: senders[who], sequence: sequence, timestamp: timestamp,
                    payload: .encoded(encoded)))
            model.note(sequence, from: who)
            index += 1
        }
        // Closing ends the sequence after what is queued.
        hub.close()
        let accounted = Mutex(0)
        let done = DispatchSemaphore(value: 0)
        Task {
            var sum = 0
            for await delivered in deliveries {
                sum = sum.addingReportingOverflow(1).overflow ? .max : sum + 1
                let (next, overflow) = sum.addingReportingOverflow(delivered.delivery.missed)
                sum = overflow ? .max : next
            }
            accounted.withLock { $0 = sum }
            done.signal()
        }
        done.wait()
        let expected = model.total >= UInt128(Int.max) ? Int.max : Int(model.total)
        let got = accounted.withLock { $0 }
        guard got == expected else {
            fatalError("accounted for \(got) notifications, expected \(expected) (policy \(policy))")
        }
    } catch {
        fatalError("unexpected error: \(error)")
    }
    return 0
}

/// libFuzzer's driver, for programs that bring their own `main`.
@_silgen_name("LLVMFuzzerRunDriver")
private func llvmFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt

/// SwiftPM links an executable target's `main` to this symbol; it hands over
/// to libFuzzer with the command line unchanged.
@_cdecl("FuzzSequenceGaps_main")
public func fuzzerMain(
    _ argc: CInt,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
) -> CInt {
    var argc = argc
    var argv = argv
    return llvmFuzzerRunDriver(&argc, &argv) { data, size in fuzzSequenceGaps(data, size) }
}
