import Foundation
import Testing

@_spi(TransportAuthoring) @testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Runs `rm -rf path` as a person would, in a process of its own.
///
/// `rm` may fail for one reason only: the observer's once-a-second look
/// made an entry again between `rm`'s unlink and its rmdir, so the
/// directory was not empty. Then the path is there again; anything else is
/// a failure of the test itself.
private func removeWithRM(_ path: String) async throws {
    let remover = try HelperProcess(["-rf", path], executable: "/bin/rm")
    let status = await remover.waitForExit()
    if status != 0 {
        #expect(access(path, F_OK) == 0, "rm -rf \(path) failed, and no repair made the path again")
    }
}

/// Observes `count` names `prefix0`, `prefix1`, … on `hub`, each text into one collector.
private func observeMany(_ count: Int, named prefix: String, on hub: NotificationHub<SocketTransport>) throws -> (
    names: [NotificationName], observed: Collector<String>, tokens: [ObservationToken]
) {
    let names = try (0..<count).map { try NotificationName(validating: prefix + "\($0)") }
    let observed = Collector<String>()
    let tokens = try names.map { name in
        try hub.addObserver(.of(String.self, named: name)) { text, _ in observed.append(text) }
    }
    return (names, observed, tokens)
}

@Suite("A socket observer whose registry entry is removed under it", .serialized, .timeLimit(.minutes(10)))
struct RegistryRepairTests {
    /// Posts `index` and on every 50 ms until `observed` has it, from
    /// `poster` or, without one, from a new `tnotify post` process each time;
    /// returns how long it took from the first post.
    private func postUntilSeen(
        _ name: NotificationName, in directory: String, by poster: NotificationHub<SocketTransport>?,
        observed: Collector<String>, text: String
    ) async throws -> Duration {
        let clock = ContinuousClock()
        let start = clock.now
        while clock.now - start < .seconds(60) {
            if let poster {
                try poster.post(text, as: name)
            } else {
                let result = try await tnotify([
                    "post", name.rawValue, "--transport", "socket", "--dir", directory, "--text", text,
                ])
                #expect(result.status == 0)
            }
            if await observed.wait(forCount: observed.values.count + 1, upTo: .milliseconds(50)),
                observed.values.contains(text)
            {
                return clock.now - start
            }
            if observed.values.contains(text) { return clock.now - start }
        }
        Issue.record("\(text) never reached the observer")
        return clock.now - start
    }

    /// A `tnotify watch` process of `name` over the socket transport,
    /// once it watches.
    private func startWatcher(_ name: NotificationName, in directory: String) async throws -> HelperProcess {
        let watcher = try HelperProcess(
            ["watch", name.rawValue, "--transport", "socket", "--dir", directory], executable: HelperProcess.tnotify)
        await watcher.waitForLine(startingWith: "watching")
        return watcher
    }

    @Test("rm -rf DIR/names/NAME under a live observer: a long-lived poster and new processes reach it again")
    func removedNameDirectory() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let name: NotificationName = "test.repair.name"
        let observer = try socketHub(directory, endpoint: "observer")
        defer { observer.close() }
        let observed = Collector<String>()
        let token = try observer.addObserver(.of(String.self, named: name)) { text, _ in observed.append(text) }
        defer { token.cancel() }
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        _ = try await postUntilSeen(name, in: directory, by: poster, observed: observed, text: "before")

        try await removeWithRM(directory + "/names/" + name.rawValue)
        // New processes find no entry until the observer's look, which the
        // removal wakes, makes it again.
        let fromProcess = try await postUntilSeen(name, in: directory, by: nil, observed: observed, text: "new process")
        // And a poster that lived through it sees the directory come back.
        _ = try await postUntilSeen(name, in: directory, by: poster, observed: observed, text: "long-lived")
        // A figure, not a bound: about a second alone, but up to 12 s in a
        // whole test run, where each `tnotify post` and each wake of this
        // test waits its turn among 480 tests on two cores.
        print("after rm -rf: a new process reached the observer again in \(fromProcess)")
        #expect(observer.transport.statistics.repairedEntries == 1)
    }

    @Test("one entry of 10,000 removed, and the registration file too: both made again, and later removals found")
    func oneOfManyNames() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try socketHub(directory, endpoint: "observer")
        defer { observer.close() }
        let (names, observed, tokens) = try observeMany(10_000, named: "test.many.n", on: observer)
        defer { for token in tokens { token.cancel() } }
        let victim = names[4_321]
        let identifier = endpointIdentifier(observer.transport)
        let entry = SocketRegistry.entryPath(directory, victim, identifier)
        #expect(unlink(entry) == 0)
        #expect(unlink(SocketRegistry.registrationPath(directory, identifier)) == 0)
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        _ = try await postUntilSeen(victim, in: directory, by: poster, observed: observed, text: "victim")
        #expect(observer.transport.statistics.repairedEntries == 1)
        #expect(access(SocketRegistry.registrationPath(directory, identifier), F_OK) == 0)
        // A second removal is found as well.
        #expect(unlink(SocketRegistry.entryPath(directory, names[7], identifier)) == 0)
        _ = try await postUntilSeen(names[7], in: directory, by: poster, observed: observed, text: "seventh")
        #expect(observer.transport.statistics.repairedEntries == 2)
    }

    @Test("an unsubscribed name is not registered again by a repair")
    func unsubscribedStaysGone() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try socketHub(directory, endpoint: "observer")
        defer { observer.close() }
        let kept: NotificationName = "test.repair.kept"
        let dropped: NotificationName = "test.repair.dropped"
        let observed = Collector<String>()
        let keptToken = try observer.addObserver(.of(String.self, named: kept)) { text, _ in observed.append(text) }
        defer { keptToken.cancel() }
        let droppedToken = try observer.addObserver(.of(String.self, named: dropped)) { _, _ in }
        let identifier = endpointIdentifier(observer.transport)
        try await removeWithRM(directory + "/names/" + kept.rawValue)
        droppedToken.cancel()
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        _ = try await postUntilSeen(kept, in: directory, by: poster, observed: observed, text: "kept")
        #expect(access(SocketRegistry.entryPath(directory, dropped, identifier), F_OK) != 0)
    }

    @Test("mv DIR/names and mv DIR/namespaces, twice each: every time, a new process reaches the observer again")
    func registryMovedAway() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let name: NotificationName = "test.moved.name"
        let inNamespace: NotificationName = "test.spaced.name"
        let observer = try socketHub(directory, endpoint: "observer")
        defer { observer.close() }
        let observed = Collector<String>()
        let tokens = [
            try observer.addObserver(.of(String.self, named: name)) { text, _ in observed.append(text) },
            try observer.addObserver(.of(String.self, in: "test.spaced")) { text, _ in observed.append(text) },
        ]
        defer { for token in tokens { token.cancel() } }
        _ = try await postUntilSeen(name, in: directory, by: nil, observed: observed, text: "before")
        // No entry's link goes: only the folder's own move, and then the
        // new folder's, can tell the observer.
        for round in 1...2 {
            for (folder, posted) in [("names", name), ("namespaces", inNamespace)] {
                let mover = try HelperProcess(
                    [directory + "/" + folder, directory + "/\(folder).old\(round)"], executable: "/bin/mv")
                #expect(await mover.waitForExit() == 0)
                _ = try await postUntilSeen(
                    posted, in: directory, by: nil, observed: observed, text: "after mv \(folder) \(round)")
            }
        }
        #expect(observer.failure == nil)
        #expect(observer.transport.statistics.repairedEntries == 4)
    }

    @Test(
        "the registry removed again and again by another process while observers start: none fails, and each is reached"
    )
    func registryRemovedWhileStarting() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        for round in 0..<24 {
            // Removes both registry folders 30 times in a row, as fast as it can.
            let remover = try HelperProcess(
                ["-c", "for i in $(seq 30); do rm -rf '\(directory)/names' '\(directory)/namespaces'; done"],
                executable: "/bin/sh")
            let observer = try socketHub(directory, endpoint: "observer")
            defer { observer.close() }
            let observed = Collector<String>()
            let name = try NotificationName(validating: "test.starting.n\(round)")
            let tokens = [
                try observer.addObserver(.of(String.self, named: name)) { text, _ in observed.append(text) },
                try observer.addObserver(
                    .of(String.self, in: NotificationNamespace(validating: "test.spaced\(round)"))
                ) { text, _ in observed.append(text) },
            ]
            defer { for token in tokens { token.cancel() } }
            // Its `rm` may fail on a folder the observer filled meanwhile.
            _ = await remover.waitForExit()
            _ = try await postUntilSeen(name, in: directory, by: nil, observed: observed, text: "named \(round)")
            let inNamespace = try NotificationName(validating: "test.spaced\(round).x")
            _ = try await postUntilSeen(
                inNamespace, in: directory, by: nil, observed: observed, text: "spaced \(round)")
            #expect(observer.failure == nil, "round \(round)")
        }
    }

    @Test(
        "the registry removed as fast as a process can for two seconds fails many looks in a row: the observer lives through it"
    )
    func burstOfRemovals() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try socketHub(directory, endpoint: "observer")
        defer { observer.close() }
        let observed = Collector<String>()
        let name: NotificationName = "test.burst.name"
        let tokens = [
            try observer.addObserver(.of(String.self, named: name)) { text, _ in observed.append(text) },
            try observer.addObserver(.of(String.self, in: "test.burst.spaced")) { text, _ in observed.append(text) },
        ]
        defer { for token in tokens { token.cancel() } }
        // Each removal wakes a look, and a look whose folder goes again
        // while it repairs fails: many fail in a row, microseconds apart
        // (a CI run under TSan failed five so with a forked `rm` in a loop).
        let remover = try HelperProcess(["remove-loop", directory, "2000", "names", "namespaces"])
        #expect(await remover.waitForExit() == 0)
        _ = try await postUntilSeen(name, in: directory, by: nil, observed: observed, text: "after the burst")
        _ = try await postUntilSeen(
            "test.burst.spaced.x", in: directory, by: nil, observed: observed, text: "spaced after the burst")
        #expect(observer.failure == nil)
    }

    @Test(
        "a name's folder replaced by a file while the observer is stopped: it ends with that error, after four seconds of retries"
    )
    func lastingRepairFailure() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let name: NotificationName = "test.repair.blocked"
        let watcher = try await startWatcher(name, in: directory)
        // Stopped, so that it cannot make its entry again before the file is there.
        watcher.signal(SIGSTOP)
        try await removeWithRM(directory + "/names")
        #expect(mkdir(directory + "/names", 0o700) == 0)
        let planted = directory + "/names/" + name.rawValue
        #expect(FileManager.default.createFile(atPath: planted, contents: Data()))
        chmod(planted, 0o600)
        let clock = ContinuousClock()
        let resumed = clock.now
        watcher.signal(SIGCONT)
        let status = await watcher.waitForExit()
        let lasted = clock.now - resumed
        #expect(status != 0)
        #expect(
            watcher.errors.values.contains { $0.contains(planted) && $0.contains("not a directory") },
            "\(watcher.errors.values)")
        // Tried again a second apart, four times at least, before it gave up.
        #expect(lasted >= .seconds(4), "gave up after \(lasted)")
    }

    @Test("rm -rf DIR/names: a poster that started before the repair reaches the observer once it is made again")
    func wholeRegistryRemoved() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let name: NotificationName = "test.repair.whole"
        let observer = try socketHub(directory, endpoint: "observer")
        defer { observer.close() }
        let observed = Collector<String>()
        let token = try observer.addObserver(.of(String.self, named: name)) { text, _ in observed.append(text) }
        defer { token.cancel() }
        try await removeWithRM(directory + "/names")
        // Started with the registry gone: it maps a new generation file,
        // which the observer's repair must bump.
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        _ = try await postUntilSeen(name, in: directory, by: poster, observed: observed, text: "after")
        #expect(observer.failure == nil)
    }

    @Test("rm -rf DIR/names while the observer process is stopped: a long-lived poster reaches it once repaired")
    func wholeRegistryRemovedUnderLivePoster() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let name: NotificationName = "test.repair.stopped"
        let watcher = try await startWatcher(name, in: directory)
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        /// Posts `text` every 50 ms until the watcher prints it (20 s at most).
        func postUntilPrinted(_ text: String) async throws -> Bool {
            let clock = ContinuousClock()
            let start = clock.now
            while clock.now - start < .seconds(60) {
                let printed = watcher.lines.values.count
                try poster.post(text, as: name)
                _ = await watcher.lines.wait(forCount: printed + 1, upTo: .milliseconds(50))
                if watcher.lines.values.contains(where: { $0.contains(text) }) { return true }
            }
            return false
        }
        #expect(try await postUntilPrinted("before"))
        // Stopped, the observer cannot make its entry again before the
        // poster looks for it: the poster's watch of the name's directory
        // fails, since the directory it would be made in is gone too.
        watcher.signal(SIGSTOP)
        try await removeWithRM(directory + "/names")
        #expect(await waitUntil { poster.transport.registryGeneration?.value == nil })
        try poster.post("while stopped", as: name)
        watcher.signal(SIGCONT)
        #expect(try await postUntilPrinted("after"), "the poster never found the repaired entry")
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)
    }

    @Test("the only entry and the registration file removed: a new registration file, and posts arrive again")
    func registrationRemovedWithEveryEntry() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let name: NotificationName = "test.repair.only"
        let observer = try socketHub(directory, endpoint: "observer")
        defer { observer.close() }
        let observed = Collector<String>()
        let token = try observer.addObserver(.of(String.self, named: name)) { text, _ in observed.append(text) }
        defer { token.cancel() }
        let identifier = endpointIdentifier(observer.transport)
        try await removeWithRM(directory + "/names/" + name.rawValue)
        #expect(unlink(SocketRegistry.registrationPath(directory, identifier)) == 0)
        _ = try await postUntilSeen(name, in: directory, by: nil, observed: observed, text: "again")
        #expect(observer.failure == nil)
        // Made again at a look, as the entry is; not necessarily at the
        // same one: when a look fell between the removal of the entry and
        // that of the registration file (gate run 8 of 10 at 420b579), the
        // entry was back before the file went, and the file is linked back
        // from it at the next look.
        #expect(await waitUntil { access(SocketRegistry.registrationPath(directory, identifier), F_OK) == 0 })
    }

    @Test("more links to the registration file (a cp -al backup) do not hide a removal; a copied entry is replaced")
    func extraLinksAndCopies() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try socketHub(directory, endpoint: "observer")
        defer { observer.close() }
        let first: NotificationName = "test.repair.first"
        let second: NotificationName = "test.repair.second"
        let observed = Collector<String>()
        let tokens = try [first, second].map { name in
            try observer.addObserver(.of(String.self, named: name)) { text, _ in observed.append(text) }
        }
        defer { for token in tokens { token.cancel() } }
        let identifier = endpointIdentifier(observer.transport)
        // A backup of the registry made of hard links (`cp -al`): two more
        // links to the registration file, and then one entry removed.
        let backup = directory + "/backup"
        let copier = try HelperProcess(["-al", directory + "/names", backup], executable: "/bin/cp")
        #expect(await copier.waitForExit() == 0)
        try await removeWithRM(directory + "/names/" + second.rawValue)
        _ = try await postUntilSeen(second, in: directory, by: nil, observed: observed, text: "second")

        // An entry replaced by a copy of itself (cp, rm, cp back): made a link again.
        let entry = SocketRegistry.entryPath(directory, first, identifier)
        let copy = try Data(contentsOf: URL(fileURLWithPath: entry))
        #expect(unlink(entry) == 0)
        try copy.write(to: URL(fileURLWithPath: entry))
        chmod(entry, 0o600)
        let registration = try #require(
            try? FileManager.default.attributesOfItem(atPath: SocketRegistry.registrationPath(directory, identifier))[
                .systemFileNumber] as? Int)
        #expect(
            await waitUntil {
                (try? FileManager.default.attributesOfItem(atPath: entry)[.systemFileNumber] as? Int) == registration
            })
        #expect(observer.failure == nil)
        _ = try await postUntilSeen(first, in: directory, by: nil, observed: observed, text: "first")
    }

    @Test("an rm -rf of the registry over and over while 3,000 names are observed never ends the observer")
    func repeatedRemoval() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try socketHub(directory, endpoint: "observer")
        defer { observer.close() }
        let (names, observed, tokens) = try observeMany(3_000, named: "test.churn.n", on: observer)
        defer { for token in tokens { token.cancel() } }
        let before = observer.transport.statistics.repairedEntries
        for _ in 0..<12 {
            try await removeWithRM(directory + "/names")
            #expect(observer.failure == nil)
        }
        _ = try await postUntilSeen(names[1_234], in: directory, by: nil, observed: observed, text: "survived")
        #expect(observer.failure == nil)
        #expect(observer.transport.statistics.repairedEntries > before)
    }

    @Test(
        "in a directory of exactly the longest length, for the longest name and namespace: register, repair, reap and gc each work, with real processes"
    )
    func everyRegistryWriteAtTheLimit() async throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        let directory = try makeLongDirectory(in: base, length: SocketRegistry.maximumDirectoryLength())
        let socket = ["--transport", "socket", "--dir", directory]
        // The deepest entries: a 200-byte name's, and the longest namespace's.
        let name = try NotificationName(validating: String(repeating: "n", count: NotificationName.maximumLength))
        let namespace = try NotificationNamespace(
            validating: String(repeating: "s", count: SocketRegistry.longestNamespace))
        let inNamespace = try NotificationName(validating: namespace.rawValue + ".x")
        #expect(SocketRegistry.entryPath(directory, .name(name), "0123456789abcdef").utf8.count == 4_095)
        #expect(SocketRegistry.entryPath(directory, .namespace(namespace), "0123456789abcdef").utf8.count == 4_095)

        // Register: an observer process of each.
        let watcher = try HelperProcess(
            ["watch", name.rawValue, namespace.rawValue + ".*"] + socket, executable: HelperProcess.tnotify)
        await watcher.waitForLine(startingWith: "watching")
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        try poster.post("registered", as: name)
        try poster.post("registered", as: inNamespace)
        #expect(await watcher.lines.wait(forCount: 3, upTo: safetyNet))

        // Repair: each entry replaced by a copy of itself, as a backup's
        // restore would, is made a link to the registration file again.
        for selector in [NotificationSelector.name(name), .namespace(namespace)] {
            let folder = SocketRegistry.nameDirectory(directory, selector)
            let entries = try FileManager.default.contentsOfDirectory(atPath: folder)
            let entry = folder + "/" + (try #require(entries.first))
            let copy = try Data(contentsOf: URL(fileURLWithPath: entry))
            #expect(unlink(entry) == 0)
            try copy.write(to: URL(fileURLWithPath: entry))
            chmod(entry, 0o600)
            #expect(
                await waitUntil {
                    var info = stat()
                    return lstat(entry, &info) == 0 && info.st_nlink > 1
                }, "\(selector) was not repaired: \(watcher.errors.values)")
        }
        try poster.post("repaired", as: name)
        try poster.post("repaired", as: inNamespace)
        #expect(await watcher.lines.wait(forCount: 5, upTo: safetyNet), "\(watcher.errors.values)")

        // Reap: the watcher killed, the next post removes its entries.
        watcher.signal(SIGKILL)
        _ = await watcher.waitForExit()
        try? poster.post("to nobody", as: name)
        try? poster.post("to nobody", as: inNamespace)
        #expect(poster.transport.statistics.reapedEndpoints > 0)
        #expect(registryEntries(directory, name).isEmpty)
        #expect(
            (try? FileManager.default.contentsOfDirectory(
                atPath: SocketRegistry.nameDirectory(directory, .namespace(namespace)))) ?? [] == [])

        // gc: another watcher killed, its entries removed by `tnotify gc`.
        let second = try HelperProcess(
            ["watch", name.rawValue, namespace.rawValue + ".*"] + socket, executable: HelperProcess.tnotify)
        await second.waitForLine(startingWith: "watching")
        second.signal(SIGKILL)
        _ = await second.waitForExit()
        let gc = try await tnotify(["gc"] + socket)
        #expect(gc.status == 0, "\(gc.errors)")
        #expect(gc.output.first == "socket transport: reaped 1 dead endpoint(s)")
        #expect(registryEntries(directory, name).isEmpty)
    }
}
