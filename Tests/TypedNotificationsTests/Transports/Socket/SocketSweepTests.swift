import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Makes an empty file at `path`, given as bytes that need not be UTF-8.
func createFile(bytes path: [UInt8]) -> Bool {
    let descriptor = (path.map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer { bytes in
        bytes.baseAddress.map { open($0, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600) } ?? -1
    }
    guard descriptor >= 0 else { return false }
    close(descriptor)
    return true
}

@Suite("Socket transport: what dead endpoints leave is swept")
struct SocketSweepTests {
    /// Starts an observer in another process, stops it, posts to it until
    /// its spool holds files, and kills it: its socket, registry entry and
    /// spool stay behind. Returns its endpoint identifier.
    private func killedObserverWithSpool(_ directory: String) async throws -> String {
        let victim = try HelperProcess(["observe", directory, "1000000"])
        await victim.waitForLine(startingWith: "ready")
        let id = try #require(files(in: directory + "/spool").first)
        victim.signal(SIGSTOP)
        await waitUntilStopped(victim.pid)
        let poster = try socketHub(directory, endpoint: "poster")
        for index in 0..<100 { try poster.post(HelperPing(poster: 1, index: index)) }
        poster.close()
        await poster.closed()
        #expect(files(in: directory + "/spool/" + id).contains { $0 != ".registration" })
        victim.signal(SIGKILL)
        #expect(await victim.waitForExit() == 128 + SIGKILL)
        return id
    }

    @Test(
        "an endpoint killed inside its close, its socket unlinked and its spool not yet: the next transport removes the spool, and so does gc"
    )
    func killedInsideClose() async throws {
        for reaper in ["transport", "gc"] {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            let id = try await killedObserverWithSpool(directory)
            // What its close had done when it died: the registry entries
            // removed, then the socket; the spool is the last step.
            for entry in registryEntries(directory, HelperPing.name) {
                try FileManager.default.removeItem(atPath: directory + "/names/\(HelperPing.name.rawValue)/" + entry)
            }
            try FileManager.default.removeItem(atPath: directory + "/sockets/\(id).sock")
            #expect(files(in: directory + "/spool") == [id])
            if reaper == "transport" {
                // Its open sweeps, before it returns.
                let next = try socketHub(directory, endpoint: "next")
                #expect(files(in: directory + "/spool") == [next.transport.identifier], "\(reaper)")
                next.close()
                await next.closed()
            } else {
                let gc = try await tnotify(["gc", "--transport", "socket", "--dir", directory])
                #expect(gc.output.first == "socket transport: reaped 1 dead endpoint(s)")
                #expect(files(in: directory + "/spool").isEmpty, "\(reaper)")
            }
        }
    }

    /// The registry's generation (`names/.generation`), as another
    /// process reads it: the host-order 64-bit integer at its start.
    private func generation(_ directory: String) throws -> UInt64 {
        let bytes = try #require(FileManager.default.contents(atPath: directory + "/names/.generation"))
        try #require(bytes.count >= 8)
        return bytes.prefix(8).withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
    }

    @Test("a dead endpoint's entries reaped by a poster, or by gc, bump the registry's generation as any removal does")
    func reapingBumpsTheGeneration() async throws {
        for reaper in ["poster", "gc"] {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            let victim = try HelperProcess(["observe", directory, "1000000"])
            await victim.waitForLine(startingWith: "ready")
            #expect(registryEntries(directory, HelperPing.name).count == 1)
            victim.signal(SIGKILL)
            #expect(await victim.waitForExit() == 128 + SIGKILL)
            let before = try generation(directory)
            if reaper == "poster" {
                let poster = try socketHub(directory, endpoint: "poster")
                // The post finds the socket dead and reaps what it left.
                try? poster.post(HelperPing(poster: 1, index: 0))
                poster.close()
                await poster.closed()
            } else {
                let gc = try await tnotify(["gc", "--transport", "socket", "--dir", directory])
                #expect(gc.output.first == "socket transport: reaped 1 dead endpoint(s)")
            }
            #expect(registryEntries(directory, HelperPing.name).isEmpty, "\(reaper)")
            #expect(try generation(directory) > before, "\(reaper): the entry went and the generation stood still")
        }
    }

    /// The review of stop 77: `tnotify gc` on a directory whose `spool/`
    /// or `names/` another process had swapped for a link deleted the
    /// files of the link's target (removals followed every folder but the
    /// last). Anyone who may write the directory can make the swap: in a
    /// group-shared one, another member, at any time.
    @Test(
        "spool/ swapped for a link while a poster and an observer run: the poster reaps its dead peer and closes, and nothing at the link's target goes; gc refuses it"
    )
    func swappedSpoolFolder() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let outside = try makeTemporaryDirectory()
        defer { removeDirectory(outside) }
        // The poster first: its open would sweep a dead peer made before it.
        let poster = try socketHub(directory, endpoint: "poster")
        let victim = try HelperProcess(["observe", directory, "1000000"])
        await victim.waitForLine(startingWith: "ready")
        let id = try #require(files(in: directory + "/spool").first { $0 != poster.transport.identifier })
        victim.signal(SIGSTOP)
        await waitUntilStopped(victim.pid)
        for index in 0..<100 { try poster.post(HelperPing(poster: 1, index: index)) }
        victim.signal(SIGKILL)
        #expect(await victim.waitForExit() == 128 + SIGKILL)
        let spooled = files(in: directory + "/spool/" + id).filter { $0 != ".registration" }
        #expect(!spooled.isEmpty)
        // Another process moves the spools out and leaves a link behind.
        #expect(rename(directory + "/spool", outside + "/spool") == 0)
        try FileManager.default.createSymbolicLink(
            atPath: directory + "/spool", withDestinationPath: outside + "/spool")
        let gc = try await tnotify(["gc", "--transport", "socket", "--dir", directory])
        #expect(gc.status == 77, "\(gc)")
        #expect(gc.errors.joined().contains("is not a directory (a symbolic link or a file is refused)"), "\(gc)")
        // The poster finds its peer dead and reaps it: the entry and the
        // socket go, through real folders; its spool is not reached.
        try poster.post(HelperPing(poster: 1, index: 100))
        #expect(await waitUntil { poster.transport.statistics.reapedEndpoints >= 1 })
        #expect(!files(in: directory + "/sockets").contains(id + ".sock"))
        #expect(!registryEntries(directory, HelperPing.name).contains(id))
        poster.close()
        await poster.closed()
        #expect(files(in: outside + "/spool").sorted() == [id, poster.transport.identifier].sorted())
        #expect(files(in: outside + "/spool/" + id).filter { $0 != ".registration" } == spooled)
    }

    @Test(
        "names/ or spool/ a link: gc exits 77 naming it, and removes nothing anywhere", arguments: ["names", "spool"])
    func gcRefusesALinkedFolder(folder: String) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let outside = try makeTemporaryDirectory()
        defer { removeDirectory(outside) }
        let id = try await killedObserverWithSpool(directory)
        #expect(rename(directory + "/" + folder, outside + "/" + folder) == 0)
        try FileManager.default.createSymbolicLink(
            atPath: directory + "/" + folder, withDestinationPath: outside + "/" + folder)
        let before = try FileManager.default.subpathsOfDirectory(atPath: outside).sorted()
        let gc = try await tnotify(["gc", "--transport", "socket", "--dir", directory])
        #expect(gc.status == 77, "\(gc)")
        #expect(gc.errors.joined().contains(directory + "/" + folder + " is not a directory"), "\(gc)")
        #expect(try FileManager.default.subpathsOfDirectory(atPath: outside).sorted() == before)
        #expect(files(in: directory + "/sockets") == [id + ".sock"])
    }

    @Test(
        "a dead endpoint's spool holding names that are not UTF-8, a folder and a link is removed whole; the link's target stays"
    )
    func hostileNamesInADeadSpool() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let outside = try makeTemporaryDirectory()
        defer { removeDirectory(outside) }
        #expect(FileManager.default.createFile(atPath: outside + "/kept", contents: Data("kept".utf8)))
        let id = try await killedObserverWithSpool(directory)
        let spool = Array((directory + "/spool/" + id + "/").utf8)
        #expect(createFile(bytes: spool + Array("caf".utf8) + [0xE9]))
        #expect(createFile(bytes: spool + [UInt8](repeating: 0xFF, count: 255)))
        #expect(createFile(bytes: spool + [0xC3]))
        try FileManager.default.createDirectory(
            atPath: directory + "/spool/\(id)/folder/inner", withIntermediateDirectories: true)
        #expect(createFile(bytes: spool + Array("folder/inner/".utf8) + [0x80, 0x81]))
        try FileManager.default.createSymbolicLink(
            atPath: directory + "/spool/\(id)/link", withDestinationPath: outside)
        // Listed by name, a name that is not UTF-8 comes back repaired and
        // names no file: the old removal left such a spool for ever.
        let next = try socketHub(directory, endpoint: "next")
        #expect(files(in: directory + "/spool") == [next.transport.identifier])
        #expect(files(in: directory + "/sockets") == ["\(next.transport.identifier).sock"])
        #expect(files(in: outside) == ["kept"])
        next.close()
        await next.closed()
    }

    @Test(
        "transports opened beside a process that opens and closes hubs without pause (each open sweeps) keep their spools, and each registers"
    )
    func bornBesideASweeper() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // One observing hub, and a thread opening, observing with and
        // closing hubs as fast as it can: every open sweeps the directory.
        let sweeper = try HelperProcess(["hubs", "socket", directory, "1", "1", "churn"])
        await sweeper.waitForLine(startingWith: "ready")
        // 300 rounds, or as many as 30 s hold on a busy machine: the
        // sweeper's observer waits 120 s for its ping, posted after them.
        let clock = ContinuousClock()
        let started = clock.now
        var closing: [NotificationHub<SocketTransport>] = []
        var slowest = Duration.zero
        for round in 0..<300 where clock.now - started < .seconds(30) {
            let roundStarted = clock.now
            defer { slowest = max(slowest, clock.now - roundStarted) }
            let transport = try SocketTransport(directory: directory)
            // A spool listed with no socket beside it is swept: one made
            // before its socket was bound could go between the two.
            #expect(
                FileManager.default.fileExists(atPath: transport.spoolDirectory),
                "round \(round): the spool of a transport being born was swept")
            let hub = try NotificationHub(endpoint: "born\(round)", transport: transport)
            #expect(FileManager.default.fileExists(atPath: transport.spoolDirectory), "round \(round), opened")
            let token = try hub.addObserver(.of(HelperPing.self)) { _, _ in }
            token.cancel()
            hub.close()
            closing.append(hub)
        }
        #expect(closing.count >= 5, "\(closing.count) rounds in 30 s, the slowest \(slowest)")
        // The sweeper's observer gets the one ping it waits for, and ends.
        let poster = try socketHub(directory, endpoint: "poster")
        try poster.post(HelperPing(poster: 0, index: 0))
        let done = await sweeper.waitForLine(startingWith: "done")
        #expect(done.contains("churned="))
        #expect(!done.contains("churned=0 "))
        for hub in closing { await hub.closed() }
        poster.close()
        await poster.closed()
        #expect(await sweeper.waitForExit() == 0)
    }
}
