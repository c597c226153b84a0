import Foundation
import Testing
import TypedNotifications

/// Opens `count` hubs on `make()`'s transports, each with one observer of
/// ``HelperPing``; returns the hubs, their tokens and what they collect.
private func observingHubs<T: NotificationTransport>(
    _ count: Int, _ make: () throws -> T
) throws -> (hubs: [NotificationHub<T>], tokens: [ObservationToken], got: Collector<Int>) {
    let got = Collector<Int>()
    var hubs: [NotificationHub<T>] = []
    var tokens: [ObservationToken] = []
    for index in 0..<count {
        let hub = try NotificationHub(endpoint: "hub\(index)", transport: make())
        tokens.append(try hub.addObserver(.of(HelperPing.self)) { ping, _ in got.append(index * 1_000 + ping.index) })
        hubs.append(hub)
    }
    return (hubs, tokens, got)
}

/// Every hub of one process shares one inotify instance: the kernel allows a
/// user 128 instances by default, and each hub used to hold one (two for a
/// socket hub), so the 128th file hub and the 64th socket hub failed. Only
/// one hub's loop reads each change event; the others hear of it from it.
@Suite("Hundreds of hubs in one process", .serialized, .timeLimit(.minutes(10)))
struct ManyHubsTests {
    static let hubCount = 300

    @Test("300 file hubs in one process each get another process's posts")
    func fileHubs() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let (hubs, tokens, got) = try observingHubs(Self.hubCount) { try FileSignalTransport(directory: directory) }
        defer { for hub in hubs { hub.close() } }
        // One append, one change event on the shared instance, read by one
        // loop: the other sharing hubs get it only because that loop hands it over.
        let poster = try HelperProcess(["fpost", directory, "2", "1"])
        #expect(await poster.waitForExit() == 0, "\(poster.errors.values)")
        #expect(await got.wait(forCount: 2 * Self.hubCount, upTo: safetyNet))
        let expected = (0..<Self.hubCount).flatMap { [$0 * 1_000, $0 * 1_000 + 1] }
        #expect(got.values.sorted() == expected)
        for token in tokens { token.cancel() }
    }

    @Test("120 file hubs: a log removed twice while they watch it, each removal followed by a new poster")
    func logRemovedTwice() async throws {
        // A watch re-added by one hub just as its directory went, whose end
        // another hub's loop had already handed out, left that hub listening
        // to a dead watch; and a directory held open by a reader's segment
        // sends no end of its own until the reader lets go.
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let thirdPoster = Collector<Int>()
        var hubs: [NotificationHub<FileSignalTransport>] = []
        var tokens: [ObservationToken] = []
        for index in 0..<120 {
            let hub = try fileHub(directory, endpoint: "hub\(index)")
            tokens.append(
                try hub.addObserver(.of(HelperPing.self), bufferingPolicy: .unbounded) { ping, _ in
                    if ping.poster == 3 { thirdPoster.append(index) }
                })
            hubs.append(hub)
        }
        defer { for hub in hubs { hub.close() } }
        let logs = directory + "/logs"
        for poster in 1...3 {
            let process = try HelperProcess(["fpost", directory, "100", "\(poster)"])
            #expect(await process.waitForExit() == 0, "\(process.errors.values)")
            if poster == 1 {
                try FileManager.default.removeItem(atPath: logs + "/" + HelperPing.name.rawValue)
                // The adversary's schedule, not a synchronisation: the hubs
                // take in the removal before the next poster makes the log.
                try await Task.sleep(for: .milliseconds(300))
            }
            if poster == 2 { try FileManager.default.removeItem(atPath: logs) }
        }
        // Every hub gets all of the last poster's 100, from the log made last.
        #expect(await thirdPoster.wait(forCount: 120 * 100, upTo: safetyNet))
        let perHub = Dictionary(grouping: thirdPoster.values, by: { $0 }).mapValues(\.count)
        #expect(perHub.count == 120 && perHub.values.allSatisfy { $0 == 100 })
        for token in tokens { token.cancel() }
    }

    @Test("300 socket hubs in one process each get another process's posts")
    func socketHubs() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let (hubs, tokens, got) = try observingHubs(Self.hubCount) { try SocketTransport(directory: directory) }
        defer { for hub in hubs { hub.close() } }
        let poster = try HelperProcess(["post", directory, "2", "1"])
        #expect(await poster.waitForExit() == 0, "\(poster.errors.values)")
        #expect(await got.wait(forCount: 2 * Self.hubCount, upTo: safetyNet))
        let expected = (0..<Self.hubCount).flatMap { [$0 * 1_000, $0 * 1_000 + 1] }
        #expect(got.values.sorted() == expected)
        for token in tokens { token.cancel() }
    }

    /// The package's own threads in a process of 1,000 observing hubs: the
    /// first two of a kind sleep in a receive call of their own thread, the
    /// rest share the loop group's (one thread per processor, at most four),
    /// beside the path watcher and the sleepers' timer. 1,000 hubs held
    /// 1,001 threads before the group.
    @Test(
        "1,000 hubs of one local transport in one process: at most 8 package threads, and every hub gets the post",
        arguments: ["socket", "file"])
    func thousandHubsFewThreads(kind: String) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let hubs = try HelperProcess(["hubs", kind, directory, "1000", "1"])
        await hubs.waitForLine(startingWith: "ready")
        let poster = try HelperProcess([kind == "socket" ? "post" : "fpost", directory, "1", "1"])
        #expect(await poster.waitForExit() == 0, "\(poster.errors.values)")
        #expect(await hubs.waitForExit() == 0, "\(hubs.lines.values) \(hubs.errors.values)")
        let done = hubs.lines.values.first { $0.hasPrefix("done ") } ?? ""
        var fields: [String: String] = [:]
        for field in done.split(separator: " ") {
            let parts = field.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
        }
        #expect(fields["hubs"] == "1000" && fields["min"] == "1", "\(done)")
        let threads = fields["threads"].flatMap { Int($0) }
        #expect(threads.map { (1...8).contains($0) } == true, "\(done)")
    }
}
