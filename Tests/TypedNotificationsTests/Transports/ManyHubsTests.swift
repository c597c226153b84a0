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
        tokens.append(try hub.addObserver(HelperPing.self) { ping, _ in got.append(index * 1_000 + ping.index) })
        hubs.append(hub)
    }
    return (hubs, tokens, got)
}

/// Every hub of one process shares one inotify instance: the kernel allows a
/// user 128 instances by default, and each hub used to hold one (two for a
/// socket hub), so the 128th file hub and the 64th socket hub failed. Only
/// one hub's loop reads each change event; the others hear of it from it.
@Suite("Hundreds of hubs in one process", .serialized, .timeLimit(.minutes(5)))
struct ManyHubsTests {
    static let hubCount = 300

    @Test("300 file hubs in one process each get another process's posts")
    func fileHubs() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let (hubs, tokens, got) = try observingHubs(Self.hubCount) { try FileSignalTransport(directory: directory) }
        defer { for hub in hubs { hub.close() } }
        // One append, one change event, read by one loop: 299 hubs get it
        // only because that loop hands it over.
        let poster = try HelperProcess(["fpost", directory, "2", "1"])
        #expect(await poster.waitForExit() == 0, "\(poster.errors.values)")
        #expect(await got.wait(forCount: 2 * Self.hubCount, upTo: .seconds(60)))
        let expected = (0..<Self.hubCount).flatMap { [$0 * 1_000, $0 * 1_000 + 1] }
        #expect(got.values.sorted() == expected)
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
        #expect(await got.wait(forCount: 2 * Self.hubCount, upTo: .seconds(60)))
        let expected = (0..<Self.hubCount).flatMap { [$0 * 1_000, $0 * 1_000 + 1] }
        #expect(got.values.sorted() == expected)
        for token in tokens { token.cancel() }
    }
}
