import Dispatch
import Foundation
import Synchronization
import TypedNotifications
import TypedNotificationsCatalog
import TypedNotificationsPlatform
import TypedNotificationsRedis

// The hubs run, in a process of its own:
//
//   TypedNotificationsBenchmark hubs KIND COUNT [URL]
//
// opens COUNT hubs of KIND in this process, each with one observer of the
// same name, posts one notification from one more hub and waits until every
// observer has it. Prints "result JSON": how many hubs opened, whether all
// got the post, and the resident set before and after, per hub.

/// What one hubs run measured.
struct HubsOutput: Codable {
    var kind: Kind
    /// Hubs asked for.
    var requested: Int
    /// Hubs that opened (and observed) before the first failure, if any.
    var opened: Int
    /// Observers that got the one post.
    var delivered: Int
    var residentBeforeKiB: Int
    var residentAfterKiB: Int
    /// (after − before) / opened.
    var perHubKiB: Int
    /// Seconds to open the hubs and add their observers.
    var openSeconds: Double
    /// The error that stopped opening, if one did.
    var failure: String?
    /// The process's threads before the hubs opened (the warm-up pair
    /// closed) and with every hub open (`nil` where `/proc` is missing).
    var threadsBefore: Int?
    var threadsAfter: Int?
    /// The package's own threads with every hub open (`PackageThreads`:
    /// the loop group's, the first hubs' receiving threads, the watchers').
    var packageThreadsAfter: Int?
    /// How long `close()` of a hub took while a handler of it was
    /// running, held until `close()` returned, in microseconds: the median
    /// of ``closesTimed`` hubs, one at a time, and the longest of them.
    var closeWithHandlerMicroseconds: Double?
    var closeWithHandlerMicrosecondsLongest: Double?
    var closesTimed: Int?
}

/// How many threads this process has now, from `/proc/self/task`.
func currentThreadCount() -> Int? {
    try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count
}

/// Counts the observers that got the post; the last one signals.
final class DeliveryTally: Sendable {
    private let count = Atomic<Int>(0)
    let target: Int
    let allDelivered = DispatchSemaphore(value: 0)
    init(target: Int) { self.target = target }
    func deliver() {
        if count.add(1, ordering: .relaxed).newValue == target { allDelivered.signal() }
    }
    var delivered: Int { count.load(ordering: .relaxed) }
}

func runHubs(_ arguments: ArraySlice<String>) throws {
    let values = Array(arguments)
    guard values.count == 2 || values.count == 3, let kind = Kind(rawValue: values[0]), let count = Int(values[1]),
        count >= 1
    else {
        fail("usage: hubs hub-handlers|TRANSPORT COUNT [URL]")
    }
    let directory = makeScratchDirectory("hubs")
    defer { removeScratchDirectory(directory) }
    let output: HubsOutput
    if kind == .hubHandlers {
        let bus = InProcessBus()
        output = measureHubs(kind: kind, count: count) { InProcessTransport(bus: bus) }
    } else if let entry = kind.entry, !kind.meetsAtServer || values.count == 3 {
        let place = entry.place(kind.meetsAtServer ? values[2] : directory)
        output = measureHubs(kind: kind, count: count, first: try entry.make(place, TransportRequest())) {
            try entry.make(place, TransportRequest())
        }
    } else {
        fail("hubs runs hub-handlers or a transport of the catalog (with a URL where it needs a server)")
    }
    let encoder = JSONEncoder()
    encoder.outputFormatting = .sortedKeys
    say("result " + String(decoding: try encoder.encode(output), as: UTF8.self))
}

/// ``measureHubs(kind:count:make:)`` for a catalog transport: `first` fixes
/// the type, and `make` must make more of it.
func measureHubs<T: NotificationTransport>(
    kind: Kind, count: Int, first: T, make: () throws -> any NotificationTransport
) -> HubsOutput {
    var first: T? = first
    return measureHubs(kind: kind, count: count) { () throws -> T in
        if let made = first {
            first = nil
            return made
        }
        guard let made = try make() as? T else { fail("hubs \(kind.rawValue): the catalog made another type") }
        return made
    }
}

/// Opens `count` observing hubs, then posts once to all of them. A warm-up
/// pair of hubs posts and delivers first, so the baseline holds the code and
/// the shared state every hub uses (the change queue, the runtime's caches).
func measureHubs<T: NotificationTransport>(kind: Kind, count: Int, make: () throws -> T) -> HubsOutput {
    var output = HubsOutput(
        kind: kind, requested: count, opened: 0, delivered: 0, residentBeforeKiB: 0, residentAfterKiB: 0,
        perHubKiB: 0, openSeconds: 0)
    do {
        let warmTally = DeliveryTally(target: 1)
        let warmObserver = try NotificationHub(endpoint: "warm-observer", transport: make())
        let warmToken = try warmObserver.addObserver(.of(BenchTick.self)) { _, _ in warmTally.deliver() }
        let poster = try NotificationHub(endpoint: "poster", transport: make())
        try poster.post(BenchTick(index: 0, filler: BenchTick.filler(forPayloadSize: 16)))
        guard warmTally.allDelivered.wait(timeout: .now() + 60) == .success else {
            fail("hubs \(kind.rawValue): the warm-up post was not delivered")
        }
        warmToken.cancel()
        warmObserver.closeAndWait()
        output.residentBeforeKiB = currentResidentKiB() ?? 0
        output.threadsBefore = currentThreadCount()

        let tally = DeliveryTally(target: count)
        var hubs: [NotificationHub<T>] = []
        var tokens: [ObservationToken] = []
        let start = now()
        do {
            for index in 0..<count {
                let hub = try NotificationHub(endpoint: "hub-\(index)", transport: make())
                tokens.append(try hub.addObserver(.of(BenchTick.self)) { _, _ in tally.deliver() })
                hubs.append(hub)
            }
        } catch {
            output.failure = "hub \(hubs.count + 1): \(error)"
        }
        output.openSeconds = Double(now() - start) / 1e9
        output.opened = hubs.count
        if !hubs.isEmpty {
            try poster.post(BenchTick(index: 1, filler: BenchTick.filler(forPayloadSize: 16)))
            // Every observer, or a minute. When fewer hubs opened than asked,
            // the tally (made for `count`) never signals: 5 s for stragglers.
            _ = tally.allDelivered.wait(timeout: .now() + (hubs.count == count ? 60 : 5))
        }
        output.delivered = tally.delivered
        output.residentAfterKiB = currentResidentKiB() ?? 0
        output.threadsAfter = currentThreadCount()
        output.packageThreadsAfter = PackageThreads.count()
        output.perHubKiB = hubs.isEmpty ? 0 : (output.residentAfterKiB - output.residentBeforeKiB) / hubs.count
        for token in tokens { token.cancel() }
        // One close is one sample of a thread's scheduling: nine, the
        // last hubs opened, each with its own handler held.
        var closes: [Double] = []
        for held in hubs.suffix(9) { closes.append(try timeCloseWithHandlerRunning(held, poster: poster)) }
        closes.sort()
        if !closes.isEmpty {
            output.closeWithHandlerMicroseconds = closes[closes.count / 2]
            output.closeWithHandlerMicrosecondsLongest = closes.last
            output.closesTimed = closes.count
        }
        for hub in hubs { hub.closeAndWait() }
        poster.closeAndWait()
    } catch {
        output.failure = "\(error)"
    }
    return output
}

/// Times `hub.close()` while a handler of `hub` runs: the handler is held
/// until `close()` returned, so a close that waited for it would never
/// return (the run then fails on its time limit).
func timeCloseWithHandlerRunning<T: NotificationTransport, P: NotificationTransport>(
    _ hub: NotificationHub<T>, poster: NotificationHub<P>
) throws -> Double {
    let entered = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)
    let token = try hub.addObserver(.of(BenchTick.self)) { _, _ in
        entered.signal()
        release.wait()
    }
    try poster.post(BenchTick(index: 2, filler: BenchTick.filler(forPayloadSize: 16)))
    guard entered.wait(timeout: .now() + 60) == .success else { fail("the held handler never ran") }
    let start = now()
    hub.close()
    let took = Double(now() - start) / 1e3
    release.signal()
    guard hub.closed(timeout: .seconds(60)) else { fail("the close never ended after the handler returned") }
    token.cancel()
    return took
}
