import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Returns once `pid` (a child of this process) has stopped, without reaping it.
func waitUntilStopped(_ pid: pid_t) {
    var info = siginfo_t()
    _ = waitid(P_PID, id_t(pid), &info, WSTOPPED | WNOWAIT)
}

/// ``waitUntilStopped(_:)`` off the cooperative pool, for async tests.
func waitUntilStopped(_ pid: pid_t) async {
    _ = try? await offThePool { waitUntilStopped(pid) }
}

/// Whether `pid` is stopped now (state `T` in `/proc/PID/stat`).
func isStopped(_ pid: pid_t) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let end = stat.lastIndex(of: ")")
    else { return false }
    return stat[stat.index(after: end)...].split(separator: " ").first == "T"
}

/// The identifier of a socket transport's endpoint, from its socket path.
func endpointIdentifier(_ transport: SocketTransport) -> String {
    String((transport.socketPath.split(separator: "/").last ?? "").dropLast(5))
}

/// Returns once every endpoint's spool in a socket transport's `directory`
/// is empty: each file was read and what it held handed to its center.
/// Waits on inotify, not on a clock; the timeout is a safety net.
func waitUntilSpoolsAreRead(_ directory: String, timeout: Duration = .seconds(60)) throws {
    let monitor = try DirectoryMonitor(sharingQueue: false)
    let spools = files(in: directory + "/spool").map { directory + "/spool/" + $0 }
    for spool in spools { _ = try monitor.watch(spool) }
    let deadline = ContinuousClock.now + timeout
    while spools.contains(where: { !files(in: $0).filter { !$0.hasPrefix(".") }.isEmpty }) {
        guard ContinuousClock.now < deadline, let descriptor = monitor.pollDescriptor else {
            Issue.record("spools in \(directory) still hold files after \(timeout)")
            return
        }
        _ = SystemCalls.waitUntilReadable(descriptor, milliseconds: 1_000)
        _ = monitor.changes()
    }
}

/// ``waitUntilSpoolsAreRead(_:timeout:)`` off the cooperative pool, for async tests.
func waitUntilSpoolsAreRead(_ directory: String, timeout: Duration = .seconds(60)) async throws {
    try await offThePool { try waitUntilSpoolsAreRead(directory, timeout: timeout) }
}

/// ``waitUntil(_:changesIn:timeout:_:)`` off the cooperative pool, for async tests.
func waitUntil(
    _ what: String, changesIn directory: String, timeout: Duration = .seconds(60),
    _ condition: @escaping @Sendable () -> Bool
) async throws {
    try await offThePool { try waitUntil(what, changesIn: directory, timeout: timeout, condition) }
}

/// Returns once `condition` holds, looking again whenever something in
/// `directory` changes (inotify; a cursor is replaced by a rename there), not
/// on a clock; the timeout is a safety net.
func waitUntil(
    _ what: String, changesIn directory: String, timeout: Duration = .seconds(60), _ condition: () -> Bool
) throws {
    let monitor = try DirectoryMonitor(sharingQueue: false)
    _ = try monitor.watch(directory)
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        guard ContinuousClock.now < deadline, let descriptor = monitor.pollDescriptor else {
            Issue.record("\(what): not after \(timeout)")
            return
        }
        _ = SystemCalls.waitUntilReadable(descriptor, milliseconds: 1_000)
        _ = monitor.changes()
    }
}

/// Files in `path`, or none.
func files(in path: String) -> [String] {
    (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
}

@Suite("Socket transport: nothing lost to a suspended observer", .serialized, .timeLimit(.minutes(10)))
struct SocketSpoolTests {
    @Test("200 short-lived tnotify post processes to a stopped watcher: all 200 arrive in order on SIGCONT")
    func shortLivedPostersToStoppedWatcher() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watcher = try HelperProcess(
            ["watch", "s.x", "--transport", "socket", "--dir", directory, "--json"],
            executable: HelperProcess.tnotify
        )
        await watcher.waitForLine(startingWith: "watching")
        watcher.signal(SIGSTOP)
        await waitUntilStopped(watcher.pid)
        let count = 200
        var slowest: Duration = .zero
        for index in 1...count {
            let started = ContinuousClock.now
            let post = try await tnotify([
                "post", "s.x", "--transport", "socket", "--dir", directory, "--json", #"{"i":\#(index)}"#,
            ])
            slowest = max(slowest, ContinuousClock.now - started)
            #expect(post.status == 0, "post \(index): \(post.errors)")
        }
        // Every post ended while the watcher was still stopped: none waited
        // for it. How long a post takes is the benchmark's to measure (a
        // loaded machine starts processes slowly); this is for the log.
        #expect(isStopped(watcher.pid))
        print("200 short-lived posts to a stopped watcher: slowest process, start to exit, \(slowest)")
        watcher.signal(SIGCONT)
        await watcher.lines.wait(forCount: count + 1)
        var indices: [Int] = []
        var missed = 0
        for line in watcher.lines.values.dropFirst() {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            indices.append((object["payload"] as? [String: Any])?["i"] as? Int ?? -1)
            missed += object["missed"] as? Int ?? -1
        }
        #expect(indices == Array(1...count))
        #expect(missed == 0)
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)
    }

    @Test("beyond the spool limit, an exited poster's drops reach the stopped observer as missed, and the poster heard")
    func exitingPosterBeyondTheLimit() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try HelperProcess(["observe-total", directory, "20001"])
        await observer.waitForLine(startingWith: "ready")
        observer.signal(SIGSTOP)
        await waitUntilStopped(observer.pid)
        // 64 KiB of spool: about 600 of the 20,000 fit.
        let poster = try HelperProcess(["post-exit", directory, "20000", "9", "65536"])
        let line = await poster.waitForLine(startingWith: "posted")
        let posted = parseDone(line)
        #expect(await poster.waitForExit() == 0)
        let undelivered = try #require(Int(posted["undelivered"] ?? ""))
        #expect(undelivered > 15_000)
        // The helper prints each undelivered endpoint's label and process.
        #expect(line.contains("endpoints=observer(\(observer.pid))"), "\(line)")
        observer.signal(SIGCONT)
        // A loss rides on the next delivery: once the spool is read, post one more.
        try await waitUntilSpoolsAreRead(directory)
        let late = try socketHub(directory, endpoint: "late")
        try late.post(HelperPing(poster: 10, index: 0))
        let done = parseDone(await observer.waitForLine(startingWith: "done"))
        #expect(done["count"] == "\(20_001 - undelivered)")
        #expect(done["missed"] == "\(undelivered)")
        late.close()
        #expect(await observer.waitForExit() == 0)
    }

    @Test(
        "an observer killed while a long-lived poster spools for it is reaped by that poster: no later post is refused"
    )
    func killedWhileSpooled() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // The only observer: a live one beyond this small spool limit would
        // rightly be refused posts too (the contract suite has the witness).
        let victim = try HelperProcess(["observe", directory, "100000"])
        await victim.waitForLine(startingWith: "ready")
        // A spool of 64 KiB holds about 600 of these.
        let transport = try SocketTransport(directory: directory, configuration: .init(spoolLimitPerEndpoint: 65536))
        let hub = try NotificationHub(endpoint: "poster", transport: transport)
        defer { hub.close() }
        victim.signal(SIGSTOP)
        await waitUntilStopped(victim.pid)
        for index in 0..<300 { try hub.post(HelperPing(poster: 1, index: index)) }
        #expect(transport.statistics.spooled > 0)
        victim.signal(SIGKILL)
        #expect(await victim.waitForExit() == 128 + SIGKILL)
        // Far past what the dead endpoint's spool could hold: had this poster
        // gone on spooling for it, these would be refused as undelivered.
        for index in 300..<3000 { try hub.post(HelperPing(poster: 1, index: index)) }
        #expect(transport.statistics.dropped == 0)
        #expect(transport.statistics.reapedEndpoints == 1)
        #expect(transport.endpointsWithUnreadPosts.isEmpty)
    }

    @Test(
        "a poster spooling for an observer that was killed reaps it within milliseconds, long before its spool is full")
    func killedWhileSpooledIsNoticedEarly() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let victim = try HelperProcess(["observe", directory, "1000000"])
        await victim.waitForLine(startingWith: "ready")
        let transport = try SocketTransport(directory: directory)
        let hub = try NotificationHub(endpoint: "poster", transport: transport)
        defer { hub.close() }
        victim.signal(SIGSTOP)
        await waitUntilStopped(victim.pid)
        for index in 0..<100 { try hub.post(HelperPing(poster: 1, index: index)) }
        #expect(transport.statistics.spooled > 0)
        victim.signal(SIGKILL)
        #expect(await victim.waitForExit() == 128 + SIGKILL)
        // The default spool (16 MiB) holds about 150,000 of these: checked
        // only when it is full, the dead endpoint would be noticed after
        // that many. It is looked at every 20 ms while spooled for.
        var posted = 0
        while transport.statistics.reapedEndpoints == 0 && posted < 200_000 {
            try hub.post(HelperPing(poster: 1, index: 100 + posted))
            posted += 1
        }
        #expect(transport.statistics.reapedEndpoints == 1)
        #expect(posted < 50_000, "posts spooled for a dead endpoint: \(posted)")
    }

    @Test("posts from two threads of one hub finish while the only observer is stopped; it gets them all")
    func hubPostsNeverWaitForAStoppedObserver() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try HelperProcess(["observe", directory, "10000"])
        await observer.waitForLine(startingWith: "ready")
        observer.signal(SIGSTOP)
        await waitUntilStopped(observer.pid)
        let transport = try SocketTransport(directory: directory)
        let hub = try NotificationHub(endpoint: "poster", transport: transport)
        await withThrowingTaskGroup(of: Void.self) { group in
            for poster in 0..<2 {
                group.addTask {
                    for index in 0..<5_000 { try hub.post(HelperPing(poster: poster, index: index)) }
                }
            }
        }
        #expect(isStopped(observer.pid))
        #expect(transport.statistics.sent + transport.statistics.spooled == 10_000)
        // Only the post that first found the socket full waited (at most
        // fullSocketWait); every later one went to the spool at once.
        #expect(transport.statistics.fullSocketWaits == 1)
        // Closing with everything still unread takes no waiting either; the spool keeps it.
        hub.close()
        #expect(isStopped(observer.pid))
        observer.signal(SIGCONT)
        let done = parseDone(await observer.waitForLine(startingWith: "done"))
        #expect(done["count"] == "10000")
        #expect(done["inorder"] == "true")
        #expect(done["missed"] == "0")
    }

    @Test("tnotify post exits 75 naming the endpoint when its spool is full, and --wait waits for a reader")
    func tnotifyReportsUndelivered() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watcher = try HelperProcess(
            ["watch", "s.full", "--transport", "socket", "--dir", directory],
            executable: HelperProcess.tnotify
        )
        await watcher.waitForLine(startingWith: "watching")
        // A running watcher reads at once: --wait returns 0.
        #expect(
            try await tnotify(["post", "s.full", "--dir", directory, "--text", "first", "--wait", "30s"]).status == 0)
        _ = await watcher.waitForLine(startingWith: "20", containing: " first")
        watcher.signal(SIGSTOP)
        await waitUntilStopped(watcher.pid)
        // A stopped watcher: the post is taken (socket or spool) and succeeds...
        #expect(try await tnotify(["post", "s.full", "--dir", directory, "--text", "second"]).status == 0)
        // ...but one that waits for it to be read says, after the time given, who has not.
        let waited = try await tnotify(["post", "s.full", "--dir", directory, "--text", "third", "--wait", "200ms"])
        #expect(waited.status == 75)
        #expect(waited.errors.first?.contains("tnotify-watch(\(watcher.pid)) [") == true, "\(waited.errors)")
        // Fill the watcher's spool past the default 16 MiB limit from a library poster.
        let filler = try SocketTransport(
            directory: directory, configuration: .init(spoolLimitPerEndpoint: 64 * 1024 * 1024))
        let hub = try NotificationHub(
            endpoint: "filler", transport: filler,
            configuration: .init(maximumPayloadSize: NotificationHubConfiguration.payloadSizeHardLimit))
        let chunk = RawNotification(bytes: [UInt8](repeating: UInt8(ascii: "a"), count: 60_000))
        let name = try NotificationName(validating: "s.full")
        for _ in 0..<300 { try hub.post(chunk, as: name) }
        hub.close()
        let refused = try await tnotify(["post", "s.full", "--dir", directory, "--text", "fourth"])
        #expect(refused.status == 75)
        #expect(refused.errors.first?.contains("tnotify-watch(\(watcher.pid)) [") == true, "\(refused.errors)")
        #expect(refused.errors.first?.contains("spool is full") == true, "\(refused.errors)")
        // On resume, everything that was taken arrives, and the next delivery
        // counts the one that was not.
        watcher.signal(SIGCONT)
        try await waitUntilSpoolsAreRead(directory)
        #expect(
            try await tnotify(["post", "s.full", "--dir", directory, "--text", "fifth", "--wait", "60s"]).status == 0)
        _ = await watcher.waitForLine(startingWith: "20", containing: " fifth")
        let lines = watcher.lines.values
        for text in ["second", "third"] { #expect(lines.contains { $0.hasSuffix(" " + text) }) }
        #expect(!lines.contains { $0.hasSuffix(" fourth") })
        #expect(lines.filter { $0.hasSuffix(String(repeating: "a", count: 100)) }.count == 300)
        let missed = lines.compactMap { line in
            line.split(separator: " ").first { $0.hasPrefix("missed=") }.flatMap { Int($0.dropFirst(7)) }
        }
        #expect(missed == [1])
        watcher.signal(SIGTERM)
        _ = await watcher.waitForExit()
    }

    @Test("sockets of processes ended by SIGTERM are listed, reaped by gc, and by the next transport")
    func terminatedEndpointsAreReaped() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let victims = try (0..<3).map { _ in try HelperProcess(["observe", directory, "1000000"]) }
        for victim in victims { await victim.waitForLine(startingWith: "ready") }
        for victim in victims {
            victim.signal(SIGTERM)
            #expect(await victim.waitForExit() == 128 + SIGTERM)
        }
        #expect(files(in: directory + "/sockets").count == 3)
        let list = try await tnotify(["ls", "--transport", "socket", "--dir", directory])
        for victim in victims {
            #expect(list.output.contains { $0.contains("observer pid \(victim.pid) dead") })
        }
        // An unregistered socket (a poster's) shows too.
        let stray = directory + "/sockets/00000000000000aa.sock"
        let socket = try SystemCalls.datagramSocket().get()
        try SystemCalls.bindSocket(socket, toSocketPath: stray).get()
        _ = consume socket
        #expect(
            try await tnotify(["ls", "--transport", "socket", "--dir", directory]).output.contains {
                $0.contains("00000000000000aa  unregistered dead")
            })
        let gc = try await tnotify(["gc", "--transport", "socket", "--dir", directory])
        #expect(gc.output.first == "socket transport: reaped 4 dead endpoint(s)")
        #expect(files(in: directory + "/sockets").isEmpty)
        #expect(files(in: directory + "/spool").isEmpty)
        #expect(registryEntries(directory, HelperPing.name).isEmpty)

        // Without gc: the next transport sweeps dead sockets when it starts,
        // and its first post to the name reaps the dead registration.
        let victim = try HelperProcess(["observe", directory, "1000000"])
        await victim.waitForLine(startingWith: "ready")
        victim.signal(SIGTERM)
        _ = await victim.waitForExit()
        let hub = try socketHub(directory, endpoint: "next")
        let deliveries = try hub.deliveries(.of(HelperPing.self))
        try hub.post(HelperPing(poster: 1, index: 1))
        var iterator = deliveries.makeAsyncIterator()
        #expect(await iterator.next()?.notification.index == 1)
        #expect(files(in: directory + "/sockets") == [hub.socketTransportPathComponent])
        #expect(registryEntries(directory, HelperPing.name).count == 1)
        hub.close()
        await hub.closed()
    }

    @Test("a name directory removed and created again is watched again: posts reach its new observers")
    func recreatedNameDirectory() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let posterTransport = try SocketTransport(directory: directory)
        let poster = try NotificationHub(endpoint: "poster", transport: posterTransport)
        let first = try socketHub(directory, endpoint: "first")
        let atFirst = try first.deliveries(.of(HelperPing.self))
        try poster.post(HelperPing(poster: 1, index: 1))
        var firstIterator = atFirst.makeAsyncIterator()
        #expect(await firstIterator.next()?.notification.index == 1)
        let scans = posterTransport.statistics.registryScans

        // The whole name directory goes (an administrator's rm -rf), and comes back.
        first.close()
        await first.closed()
        removeDirectory(directory + "/names/" + HelperPing.name.rawValue)
        let second = try socketHub(directory, endpoint: "second")
        let atSecond = try second.deliveries(.of(HelperPing.self))
        let sentBefore = posterTransport.statistics.sent
        try poster.post(HelperPing(poster: 1, index: 2))
        // Sent to the new observer (a stale route would send to nobody, and the wait below would never end).
        try #require(posterTransport.statistics.sent == sentBefore + 1)
        var secondIterator = atSecond.makeAsyncIterator()
        #expect(await secondIterator.next()?.notification.index == 2)
        #expect(posterTransport.statistics.registryScans > scans)
        // And it is watched again: a third observer is seen at once too.
        let third = try socketHub(directory, endpoint: "third")
        let atThird = try third.deliveries(.of(HelperPing.self))
        try poster.post(HelperPing(poster: 1, index: 3))
        try #require(posterTransport.statistics.sent == sentBefore + 3)
        var thirdIterator = atThird.makeAsyncIterator()
        #expect(await thirdIterator.next()?.notification.index == 3)
        poster.close()
        second.close()
        third.close()
    }

    @Test(
        "a symbolic link planted at sockets/ID.sock is never connected to, in a short and a 200-byte directory",
        arguments: [0, 200])
    func plantedSocketLinkRefused(length: Int) async throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        let parent = length == 0 ? base : try makeLongDirectory(in: base, length: length - "/shared".utf8.count)
        let directory = parent + "/shared"
        let elsewhere = parent + "/elsewhere"
        // The socket the link points to: a real observer in another directory.
        let outside = try SocketTransport(directory: elsewhere)
        let target = try NotificationHub(endpoint: "outside", transport: outside)
        let atTarget = try target.deliveries(.of(HelperPing.self))
        let poster = try socketHub(directory, endpoint: "poster")
        _ = try poster.deliveries(.of(Note.self))  // creates the registry
        let id = "00000000000000bb"
        let names = directory + "/names/" + HelperPing.name.rawValue
        try FileManager.default.createDirectory(
            atPath: names, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        #expect(
            FileManager.default.createFile(atPath: names + "/" + id, contents: Data("1 \(getuid()) planted\n".utf8)))
        chmod(names + "/" + id, 0o600)
        #expect(symlink(outside.socketPath, directory + "/sockets/" + id + ".sock") == 0)

        try poster.post(HelperPing(poster: 6, index: 666))
        let transport = poster.transport
        #expect(transport.statistics.refusedEndpoints == 1)
        #expect(transport.statistics.sent == 0)
        // The outside observer's first delivery is a post made after: nothing came through the link.
        let outsidePoster = try socketHub(elsewhere, endpoint: "outside-poster")
        try outsidePoster.post(HelperPing(poster: 7, index: 1))
        var iterator = atTarget.makeAsyncIterator()
        #expect(await iterator.next()?.notification.poster == 7)
        poster.close()
        outsidePoster.close()
        target.close()
    }

    @Test("an envelope claiming another process than the kernel says sent it is dropped and counted")
    func forgedProcessRefused() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let transport = try SocketTransport(directory: directory)
        let hub = try NotificationHub(endpoint: "victim", transport: transport)
        let deliveries = try hub.deliveries(.of(HelperPing.self))
        let socket = try SystemCalls.datagramSocket().get()
        try SystemCalls.connectSocket(socket, toSocketPath: transport.socketPath).get()
        let helper = try HelperProcess(["send-forged-pid"], standardInput: socket.rawValue)
        #expect(await helper.waitForExit() == 0)
        #expect(helper.lines.values.contains("sent"))
        try hub.post(HelperPing(poster: 0, index: 3))
        var iterator = deliveries.makeAsyncIterator()
        #expect(await iterator.next()?.notification == HelperPing(poster: 0, index: 3))
        #expect(transport.statistics.refusedForeignSender == 1)
        hub.close()
    }

    @Test("hostile files in a spool are refused without stalling, and a torn spool gives its whole records")
    func hostileSpoolFiles() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let transport = try SocketTransport(directory: directory)
        let hub = try NotificationHub(endpoint: "victim", transport: transport)
        let deliveries = try hub.deliveries(.of(HelperPing.self))
        let spool = directory + "/spool/" + endpointIdentifier(transport)

        // Garbage under a valid name; a FIFO, which would block a blocking open; a link; a stray name.
        #expect(
            FileManager.default.createFile(
                atPath: spool + "/00000000000000a1-00000000.spool", contents: Data("garbage".utf8)))
        #expect(mkfifo(spool + "/00000000000000a2-00000000.spool", 0o600) == 0)
        #expect(symlink("/etc/passwd", spool + "/00000000000000a3-00000000.spool") == 0)
        #expect(FileManager.default.createFile(atPath: spool + "/not-a-spool", contents: Data()))
        // Last, a real spool file cut mid-record: two whole envelopes and half of a third.
        let sender = try NotificationSender(processID: getpid(), userID: getuid(), endpoint: "torn", instance: 1)
        var bytes = Spool.magic
        for index in 1...3 {
            let encoded = try NotificationEnvelope.encode(
                name: HelperPing.name, sender: sender, sequence: UInt64(index),
                timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
            ) { try HelperPing(poster: 5, index: index).encodePayload(into: &$0) }
            bytes.append(Spool.envelopeKind)
            bytes.append(contentsOf: index < 3 ? Array(encoded.envelope) : Array(encoded.envelope.prefix(20)))
        }
        let torn = spool + "/00000000000000ff-00000000.spool"
        #expect(FileManager.default.createFile(atPath: spool + "/.staging", contents: Data(bytes)))
        #expect(rename(spool + "/.staging", torn) == 0)
        // As a poster does once it started a spool file.
        try nudge(transport)

        var iterator = deliveries.makeAsyncIterator()
        #expect(await iterator.next()?.notification == HelperPing(poster: 5, index: 1))
        #expect(await iterator.next()?.notification == HelperPing(poster: 5, index: 2))
        // Everything planted was dealt with in the pass that read the torn
        // file: the refused entries removed, every refusal counted (files
        // that were read are unlinked just after their records are handed over).
        let left = Set(files(in: spool).filter { !$0.hasPrefix(".") })
        #expect(left.isSubset(of: ["00000000000000a1-00000000.spool", "00000000000000ff-00000000.spool"]), "\(left)")
        #expect(transport.statistics.refusedMalformed == 5)
        // The thread is not stuck on the FIFO: live posts still arrive.
        try hub.post(HelperPing(poster: 0, index: 9))
        #expect(await iterator.next()?.notification == HelperPing(poster: 0, index: 9))
        hub.close()
    }

    @Test(
        "a 64 GiB file planted in a spool is read only up to the spool limit; its whole records arrive, the watcher lives"
    )
    func hugeSpoolFile() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let limit = 64 * 1024
        let transport = try SocketTransport(
            directory: directory, configuration: SocketTransportConfiguration(spoolLimitPerEndpoint: limit))
        let hub = try NotificationHub(endpoint: "victim", transport: transport)
        let deliveries = try hub.deliveries(.of(HelperPing.self))
        let spool = directory + "/spool/" + endpointIdentifier(transport)
        // One whole record, then a sparse 64 GiB: no poster ever writes more than the limit.
        let sender = try NotificationSender(processID: getpid(), userID: getuid(), endpoint: "huge", instance: 1)
        let encoded = try NotificationEnvelope.encode(
            name: HelperPing.name, sender: sender, sequence: 1,
            timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
        ) { try HelperPing(poster: 6, index: 1).encodePayload(into: &$0) }
        let staging = spool + "/.staging"
        #expect(
            FileManager.default.createFile(
                atPath: staging, contents: Data(Spool.magic + [Spool.envelopeKind] + Array(encoded.envelope))))
        #expect(truncate(staging, 64 << 30) == 0)
        #expect(rename(staging, spool + "/00000000000000b1-00000000.spool") == 0)
        try nudge(transport)
        try hub.post(HelperPing(poster: 0, index: 0))
        var iterator = deliveries.makeAsyncIterator()
        var received: [HelperPing] = []
        for _ in 0..<2 {
            if let next = await iterator.next()?.notification { received.append(next) }
        }
        #expect(received.count == 2)
        #expect(received.contains(HelperPing(poster: 6, index: 1)))
        #expect(received.contains(HelperPing(poster: 0, index: 0)))
        #expect(transport.statistics.refusedMalformed >= 1)
        hub.close()
    }

    @Test("spool parsing never traps: random bytes, every prefix of a valid file, every bit flipped")
    func spoolParsingIsTotal() throws {
        let sender = try NotificationSender(processID: 42, userID: getuid(), endpoint: "p", instance: 1)
        var file = Spool.magic
        var boundaries = [file.count]
        for index in 1...3 {
            let encoded = try NotificationEnvelope.encode(
                name: HelperPing.name, sender: sender, sequence: UInt64(index),
                timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
            ) { try HelperPing(poster: 1, index: index).encodePayload(into: &$0) }
            file.append(Spool.envelopeKind)
            file.append(contentsOf: encoded.envelope)
            boundaries.append(file.count)
        }
        let marker = try #require(
            Spool.dropMarker(
                for: TransportMessage(
                    name: HelperPing.name, sender: sender, sequence: 9,
                    timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0),
                    payload: .encoded(
                        try NotificationEnvelope.encode(
                            name: HelperPing.name, sender: sender, sequence: 9,
                            timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
                        ) { _ in })
                )))
        file.append(contentsOf: Spool.dropRecord(count: 6, marker: marker))
        boundaries.append(file.count)
        var decoder = EnvelopeDecoder(maximumPayloadSize: 1 << 16)

        let whole = Spool.parse(file, decoder: &decoder)
        #expect(!whole.malformed)
        #expect(whole.records.count == 4)
        #expect(
            whole.records.last?.report
                == MissedNotifications(count: 6, name: HelperPing.name, sender: sender, lastSequence: 9))

        for length in 0...file.count {
            let parsed = Spool.parse(Array(file.prefix(length)), decoder: &decoder)
            let whole = boundaries.filter { $0 <= length }.count - 1
            #expect(parsed.records.count == max(0, whole))
            #expect(parsed.malformed == (length > 0 && !boundaries.contains(length)))
        }
        for bit in 0..<(file.count * 8) {
            var flipped = file
            flipped[bit / 8] ^= 1 << (bit % 8)
            let parsed = Spool.parse(flipped, decoder: &decoder)
            // A flipped bit is caught: the record it falls in is never returned.
            let record = boundaries.lastIndex { $0 <= bit / 8 } ?? 0
            #expect(parsed.malformed)
            #expect(parsed.records.count <= record)
        }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5_000 {
            let length = Int.random(in: 0...300, using: &generator)
            var bytes = Spool.magic + (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            if length > 0 && Bool.random(using: &generator) { bytes[Spool.magic.count] = Spool.dropKind }
            _ = Spool.parse(bytes, decoder: &decoder)
        }
    }
}

extension NotificationHub<SocketTransport> {
    /// The file name of this hub's socket in `sockets/`.
    fileprivate var socketTransportPathComponent: String {
        transport.socketPath.split(separator: "/").last.map(String.init) ?? ""
    }
}

/// Sends `transport` a nudge, the empty datagram with which a poster says
/// it started a spool file: an endpoint looks at its spool when told, never
/// on a timer.
private func nudge(_ transport: SocketTransport) throws {
    let socket = try SystemCalls.datagramSocket().get()
    try SystemCalls.connectSocket(socket, toSocketPath: transport.socketPath).get()
    _ = try SystemCalls.sendDatagram(socket, UnsafeRawBufferPointer(start: nil, count: 0)).get()
}
