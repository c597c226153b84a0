import Foundation
import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
import TypedNotificationsPlatform

/// What one of many hubs in this process got.
final class HubTally: @unchecked Sendable {
    // Sendable: every `var` is read and written only between `lock.lock()`
    // and `lock.unlock()` (in `got`, `count(of:)` and `summary`), so one
    // thread at a time, each seeing what the one before it wrote.
    private let lock = NSLock()
    private var last: [Int: Int] = [:]
    private var count = 0
    private var perPoster: [Int: Int] = [:]

    /// How many pings of `poster` arrived.
    func count(of poster: Int) -> Int {
        lock.lock()
        defer { lock.unlock() }
        return perPoster[poster] ?? 0
    }
    private var inOrder = true
    private var missed = 0

    func got(_ ping: HelperPing, missed: Int) {
        lock.lock()
        defer { lock.unlock() }
        if let previous = last[ping.poster], ping.index != previous + 1 { inOrder = false }
        if last[ping.poster] == nil, ping.index != 0 { inOrder = false }
        last[ping.poster] = ping.index
        count += 1
        perPoster[ping.poster, default: 0] += 1
        self.missed += missed
    }

    var summary: (count: Int, inOrder: Bool, missed: Int) {
        lock.lock()
        defer { lock.unlock() }
        return (count, inOrder, missed)
    }
}

/// Opens a hub of `kind` ("socket" or "file") on `directory`.
func openHub(_ kind: String, _ directory: String, _ endpoint: String) throws -> AnyObject {
    switch kind {
    case "socket": return try NotificationHub(endpoint: endpoint, transport: SocketTransport(directory: directory))
    case "file": return try NotificationHub(endpoint: endpoint, transport: FileSignalTransport(directory: directory))
    default: fail("KIND must be socket or file")
    }
}

/// Adds a ping observer to a hub from ``openHub(_:_:_:)``.
func observePings(_ hub: AnyObject, _ handler: @escaping @Sendable (HelperPing, Int) -> Void) throws
    -> ObservationToken
{
    if let hub = hub as? NotificationHub<SocketTransport> {
        return try hub.addObserver(.of(HelperPing.self)) { ping, delivery in handler(ping, delivery.missed) }
    }
    guard let hub = hub as? NotificationHub<FileSignalTransport> else { fail("no hub") }
    return try hub.addObserver(.of(HelperPing.self)) { ping, delivery in handler(ping, delivery.missed) }
}

/// Whether the run is over, and how many hubs the churn opened and closed.
final class ChurnState: Sendable {
    let finished = Atomic<Bool>(false)
    let churned = Atomic<Int>(0)
}

/// Opens `hubs` observing hubs in this process and waits until each has `total` pings.
func observeWithManyHubs(kind: String, directory: String, hubs: Int, total: Int, churn: Bool) throws {
    let tallies = (0..<hubs).map { _ in HubTally() }
    var opened: [AnyObject] = []
    var tokens: [ObservationToken] = []
    for index in 0..<hubs {
        let hub = try openHub(kind, directory, "hub\(index)")
        let tally = tallies[index]
        tokens.append(try observePings(hub) { ping, missed in tally.got(ping, missed: missed) })
        opened.append(hub)
    }
    let state = ChurnState()
    if churn {
        Thread.detachNewThread {
            var round = 0
            while !state.finished.load(ordering: .relaxed) {
                round += 1
                if let hub = try? openHub(kind, directory, "churn\(round)"),
                    let token = try? observePings(hub, { _, _ in })
                {
                    token.cancel()
                    state.churned.add(1, ordering: .relaxed)
                }
            }
        }
    }
    say("ready")
    let deadline = Date().addingTimeInterval(120)
    // With HUBS_POSTER=P, each hub must get TOTAL pings of poster P (the
    // last of several), not TOTAL in all.
    let poster = ProcessInfo.processInfo.environment["HUBS_POSTER"].flatMap(Int.init)
    func short(_ tally: HubTally) -> Bool {
        poster.map { tally.count(of: $0) < total } ?? (tally.summary.count < total)
    }
    while tallies.contains(where: short) {
        guard Date() < deadline else {
            state.finished.store(true, ordering: .relaxed)
            say("timeout counts=\(tallies.map { "\($0.summary.count)" }.joined(separator: ","))")
            exit(1)
        }
        usleep(10_000)
    }
    state.finished.store(true, ordering: .relaxed)
    let summaries = tallies.map(\.summary)
    say(
        "done hubs=\(hubs) min=\(summaries.map(\.count).min() ?? 0) max=\(summaries.map(\.count).max() ?? 0)"
            + " inorder=\(summaries.allSatisfy(\.inOrder)) missed=\(summaries.map(\.missed).reduce(0, +))"
            + " churned=\(state.churned.load(ordering: .relaxed))"
            + " threads=\(PackageThreads.count() ?? -1) rssKiB=\(residentKiB() ?? -1)")
    for token in tokens { token.cancel() }
    withExtendedLifetime(opened) {}
}

/// The process's resident set in KiB, from `/proc/self/status`.
func residentKiB() -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
    let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
    return line?.split(separator: " ").dropFirst().first.flatMap { Int($0) }
}
