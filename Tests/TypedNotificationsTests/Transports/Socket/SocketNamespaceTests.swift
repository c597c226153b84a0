import Foundation
import Testing

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The socket transport's namespaces against the processes that break them:
/// a poster that cached its routes before the observer existed, a new
/// process posting a name nobody posted before, an observer killed with
/// SIGKILL, a registry removed by hand, and 10,000 names.
@Suite("Socket transport: a namespace observer between processes", .serialized, .timeLimit(.minutes(10)))
struct SocketNamespaceTests {
    /// The `name` field of each JSON line `watcher` printed.
    private func names(_ watcher: HelperProcess) -> [String] {
        watcher.lines.values.compactMap { line in
            guard line.hasPrefix("{"),
                let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            else { return nil }
            return object["name"] as? String
        }
    }

    @Test(
        "a poster that cached its routes before the observer existed, and a new process posting a new name, both reach it at once; a near miss never"
    )
    func longLivedPosterAndNewProcess() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        // Routes cached with nobody there: every directory of the name listed.
        try poster.post(Ping(index: 0), as: "test.jobs.a")
        #expect(poster.transport.statistics.sent == 0)

        let watcher = try HelperProcess(
            ["watch", "test.jobs.*", "--transport", "socket", "--dir", directory, "--json"],
            executable: HelperProcess.tnotify)
        await watcher.waitForLine(startingWith: "watching", containing: "test.jobs.*")
        // The very next post of the cached name, then a name never posted.
        try poster.post(Ping(index: 1), as: "test.jobs.a")
        try poster.post(Ping(index: 2), as: "test.jobsx")
        try poster.post(Ping(index: 3), as: "test.jobs.never.posted.before")
        let fresh = try await tnotify([
            "post", "test.jobs.from.a.new.process", "--transport", "socket", "--dir", directory, "--text", "new",
        ])
        #expect(fresh.status == 0, "\(fresh.errors)")
        try poster.post(Ping(index: 4), as: "test.jobs")
        await watcher.lines.wait(forCount: 5)
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)
        let seen = names(watcher)
        #expect(
            Set(seen) == ["test.jobs.a", "test.jobs.never.posted.before", "test.jobs.from.a.new.process", "test.jobs"])
        #expect(seen.count == 4, "each once: \(seen)")
        #expect(!seen.contains("test.jobsx"))
        // SIGTERM unregistered the namespace.
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: directory + "/namespaces/test.jobs")) ?? []
        #expect(entries.isEmpty)
    }

    @Test("a namespace observer killed with SIGKILL is reaped by the next post, which goes on to the others")
    func killedObserverReaped() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let victim = try HelperProcess(
            ["watch", "test.jobs.*", "--transport", "socket", "--dir", directory],
            executable: HelperProcess.tnotify)
        await victim.waitForLine(startingWith: "watching")
        let survivor = try socketHub(directory, endpoint: "survivor")
        defer { survivor.close() }
        let got = Collector<String>()
        let token = try survivor.addObserver(.of(Ping.self, in: "test")) { _, delivery in
            got.append(delivery.name.rawValue)
        }
        defer { token.cancel() }
        victim.signal(SIGKILL)
        _ = await victim.waitForExit()
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        try poster.post(Ping(index: 1), as: "test.jobs.done")
        #expect(await got.wait(forCount: 1, upTo: safetyNet))
        #expect(got.values == ["test.jobs.done"])
        #expect(poster.transport.statistics.reapedEndpoints == 1)
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: directory + "/namespaces/test.jobs")) ?? []
        #expect(entries.isEmpty, "the dead endpoint's entry is gone: \(entries)")
    }

    @Test("rm -rf DIR/namespaces/NS under a live namespace observer: made again, and posts reach it again")
    func removedNamespaceEntry() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try socketHub(directory, endpoint: "observer")
        defer { observer.close() }
        let got = Collector<String>()
        let token = try observer.addObserver(.of(Ping.self, in: "test.jobs")) { _, delivery in
            got.append(delivery.name.rawValue)
        }
        defer { token.cancel() }
        let remover = try HelperProcess(["-rf", directory + "/namespaces/test.jobs"], executable: "/bin/rm")
        _ = await remover.waitForExit()
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        // The observer looks once a second; post until it has made the entry again.
        let clock = ContinuousClock()
        let start = clock.now
        var index = 0
        while got.values.isEmpty, clock.now - start < .seconds(60) {
            try poster.post(Ping(index: index), as: "test.jobs.after")
            index += 1
            _ = await got.wait(forCount: 1, upTo: .milliseconds(50))
        }
        #expect(got.values.first == "test.jobs.after")
        #expect(observer.transport.statistics.repairedEntries == 1)
    }

    @Test("10,000 names in a namespace: each arrives once, and the observing hub's state stays bounded")
    func tenThousandNames() async throws {
        await MachineLoad.acquire()
        defer { MachineLoad.release() }
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try socketHub(directory, endpoint: "observer")
        defer { observer.close() }
        let got = Collector<String>()
        let token = try observer.addObserver(.of(Ping.self, in: "test.many"), bufferingPolicy: .unbounded) {
            _, delivery in got.append(delivery.name.rawValue)
        }
        defer { token.cancel() }
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        let clock = ContinuousClock()
        let start = clock.now
        try await offThePool {
            for index in 0..<manyNames {
                try poster.post(Ping(index: index), as: try NotificationName(validating: "test.many.n\(index)"))
            }
        }
        let posted = clock.now - start
        #expect(await got.wait(forCount: manyNames, upTo: .seconds(240)))
        #expect(Set(got.values).count == manyNames)
        #expect(observer.rememberedSenders <= 2 * HubObserverTable.namespaceNameCapacity)
        print(
            "\(manyNames) new names through one namespace: posted in \(posted), \(poster.transport.statistics.registryScans) registry scans"
        )
    }

    @Test("a namespace too long for the registry is refused with invalidName; nothing is registered")
    func tooLong() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try socketHub(directory, endpoint: "observer")
        defer { observer.close() }
        let long = try NotificationNamespace(validating: String(repeating: "a", count: 196))
        do {
            _ = try observer.addObserver(.of(Ping.self, in: long)) { _, _ in }
            Issue.record("a 196-byte namespace was taken")
        } catch {
            #expect(error.code == .invalidName, "\(error)")
        }
        #expect(observer.metrics.activeObservers == 0)
        #expect(access(directory + "/namespaces/" + long.rawValue, F_OK) != 0)
    }
}
