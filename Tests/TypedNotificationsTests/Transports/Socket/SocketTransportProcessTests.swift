import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

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

/// Whether a file exists at `path`, without following a final symbolic link.
func fileExists(_ path: String) -> Bool {
    var info = stat()
    return lstat(path, &info) == 0
}

func mode(of path: String) -> mode_t {
    var info = stat()
    return lstat(path, &info) == 0 ? info.st_mode & 0o777 : 0
}

/// Registry entry files for `name` in a socket transport's directory.
func registryEntries(_ directory: String, _ name: NotificationName) -> [String] {
    (try? FileManager.default.contentsOfDirectory(atPath: directory + "/names/" + name.rawValue)) ?? []
}

@Suite("Socket transport between processes", .serialized, .timeLimit(.minutes(10)))
struct SocketTransportProcessTests {
    @Test("one poster process to 4 observer processes: 10,000 each, none lost, in order")
    func fanOutToFourProcesses() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let count = 10_000
        let observers = try (0..<4).map { _ in try HelperProcess(["observe", directory, "\(count)"]) }
        for observer in observers { await observer.waitForLine(startingWith: "ready") }
        // This process observes too, so delivery is checked on both sides of a process boundary.
        let local = try socketHub(directory, endpoint: "local")
        let localDeliveries = try local.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)

        let poster = try HelperProcess(["post", directory, "\(count)", "7"])
        let posterStatus = await poster.waitForExit()
        #expect(posterStatus == 0, "poster: \(poster.lines.values) \(poster.errors.values)")
        for observer in observers {
            let done = parseDone(await observer.waitForLine(startingWith: "done"))
            #expect(done["count"] == "\(count)")
            #expect(done["inorder"] == "true")
            #expect(done["missed"] == "0")
            #expect(await observer.waitForExit() == 0)
        }
        var indices: [Int] = []
        for await delivered in localDeliveries {
            #expect(delivered.notification.poster == 7)
            indices.append(delivered.notification.index)
            if indices.count == count { break }
        }
        #expect(indices == Array(0..<count))
        local.close()
    }

    @Test("a poster reads the registry once per change, not per post, and sees a new observer at once")
    func routeCacheFollowsRegistry() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let transport = try SocketTransport(directory: directory)
        let hub = try NotificationHub(endpoint: "poster", transport: transport)
        // Nobody observes yet: the poster caches an empty route, having
        // listed the name's directory and each of its namespaces' once.
        let directories = SocketRegistry.directories(of: HelperPing.name).count
        #expect(directories == 4, "test.helper.ping, test.*, test.helper.*, test.helper.ping.*")
        for index in 0..<100 { try hub.post(HelperPing(poster: 5, index: index)) }
        #expect(transport.statistics.registryScans == directories)
        #expect(transport.statistics.sent == 0)

        // A process registers; the very next post must reach it.
        let observer = try HelperProcess(["observe", directory, "500"])
        await observer.waitForLine(startingWith: "ready")
        for index in 0..<500 { try hub.post(HelperPing(poster: 6, index: index)) }
        let done = parseDone(await observer.waitForLine(startingWith: "done"))
        #expect(done["count"] == "500")
        #expect(done["inorder"] == "true")
        #expect(done["missed"] == "0")
        // One more scan for the registration, none for the 500 posts.
        #expect(transport.statistics.registryScans == directories + 1)
        hub.close()
    }

    @Test("an observer killed mid-stream is reaped exactly once while the poster goes on")
    func killedObserverIsReaped() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let survivor = try HelperProcess(["observe", directory, "10000"])
        let victim = try HelperProcess(["observe", directory, "10000"])
        await survivor.waitForLine(startingWith: "ready")
        await victim.waitForLine(startingWith: "ready")
        // The victim's entry, found by the pid written in it.
        let names = directory + "/names/" + HelperPing.name.rawValue + "/"
        let victimEntry = try #require(
            registryEntries(directory, HelperPing.name).first { entry in
                (try? String(contentsOfFile: names + entry, encoding: .utf8))?.hasPrefix("\(victim.pid) ") == true
            }
        )
        let victimSocket = directory + "/sockets/" + victimEntry + ".sock"
        #expect(fileExists(victimSocket))

        let transport = try SocketTransport(directory: directory)
        let hub = try NotificationHub(endpoint: "poster", transport: transport)
        // A second poster races the first to reap the dead endpoint.
        let rivalTransport = try SocketTransport(directory: directory)
        let rival = try NotificationHub(endpoint: "rival", transport: rivalTransport)

        for index in 0..<2_000 { try hub.post(HelperPing(poster: 1, index: index)) }
        await victim.waitForLine(startingWith: "progress 1000")
        victim.signal(SIGKILL)
        _ = await victim.waitForExit()

        for index in 2_000..<10_000 {
            try hub.post(HelperPing(poster: 1, index: index))
            if index % 500 == 0 { try rival.post(HelperPing(poster: 2, index: index / 500 - 4)) }
        }
        #expect(transport.flush(timeout: .seconds(60)))
        let done = parseDone(await survivor.waitForLine(startingWith: "done"))
        #expect(done["count"] == "10000")
        #expect(done["missed"] == "0")
        // The dead endpoint's entry and socket are gone, removed once between the two posters.
        #expect(!fileExists(names + victimEntry))
        #expect(!fileExists(victimSocket))
        let reaped = transport.statistics.reapedEndpoints + rivalTransport.statistics.reapedEndpoints
        #expect(reaped == 1)
        hub.close()
        rival.close()
    }

    @Test("a stopped observer gets, on SIGCONT, the 1,000 posted while it slept, in order")
    func stoppedObserverCatchesUp() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try HelperProcess(["observe", directory, "1000"])
        await observer.waitForLine(startingWith: "ready")
        let transport = try SocketTransport(directory: directory)
        let hub = try NotificationHub(endpoint: "poster", transport: transport)

        observer.signal(SIGSTOP)
        for index in 0..<1_000 { try hub.post(HelperPing(poster: 3, index: index)) }
        // The stopped process's socket filled up and the rest went to its
        // spool: every post returned while it was stopped.
        #expect(transport.statistics.spooled > 0)
        #expect(transport.statistics.sent + transport.statistics.spooled == 1_000)
        #expect(transport.endpointsWithUnreadPosts.count == 1)
        #expect(!transport.flush(timeout: .milliseconds(50)))
        observer.signal(SIGCONT)

        let done = parseDone(await observer.waitForLine(startingWith: "done"))
        #expect(done["count"] == "1000")
        #expect(done["inorder"] == "true")
        #expect(done["missed"] == "0")
        #expect(transport.flush(timeout: .seconds(30)))
        #expect(transport.statistics.dropped == 0)
        hub.close()
    }

    @Test("beyond the spool limit, the post names the endpoint and the observer learns how many it missed")
    func boundedSpoolReportsMissed() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try HelperProcess(["observe-total", directory, "501"])
        await observer.waitForLine(startingWith: "ready")
        let transport = try SocketTransport(directory: directory, configuration: .init(spoolLimitPerEndpoint: 4096))
        let hub = try NotificationHub(endpoint: "poster", transport: transport)
        observer.signal(SIGSTOP)
        var refused = 0
        for index in 0..<500 {
            do {
                try hub.post(HelperPing(poster: 4, index: index))
            } catch {
                #expect(error.code == .undelivered)
                #expect(error.undeliveredEndpoints == [.init(endpoint: "observer", processID: observer.pid)])
                refused += 1
            }
        }
        #expect(refused > 0)
        #expect(transport.statistics.dropped == refused)
        // Whatever was refused is still counted as posted, with its sequence number used.
        #expect(hub.metrics.posted == 500)
        observer.signal(SIGCONT)
        #expect(transport.flush(timeout: .seconds(30)))
        try hub.post(HelperPing(poster: 4, index: 500))
        let done = parseDone(await observer.waitForLine(startingWith: "done"))
        #expect(done["count"] == "\(501 - refused)")
        #expect(done["missed"] == "\(refused)")
        hub.close()
    }

    @Test(
        "a datagram from another user is dropped and counted",
        .enabled(if: getuid() == 0, "needs root, to start the sending helper as the user nobody")
    )
    func otherUserRefused() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let transport = try SocketTransport(directory: directory)
        let hub = try NotificationHub(endpoint: "victim", transport: transport)
        let deliveries = try hub.deliveries(.of(HelperPing.self))

        // The helper gets a socket already connected to ours as its standard
        // input, switches to nobody, and sends a well-formed envelope.
        let sent = try await sendFromHelper(["send-as", "nobody"], to: transport)
        #expect(sent)
        try hub.post(HelperPing(poster: 0, index: 1))
        var iterator = deliveries.makeAsyncIterator()
        let first = await iterator.next()
        #expect(first?.notification == HelperPing(poster: 0, index: 1))
        #expect(transport.statistics.refusedForeignSender == 1)
        hub.close()
    }

    @Test("an envelope that claims another user than its sender is dropped and counted")
    func forgedUserRefused() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let transport = try SocketTransport(directory: directory)
        let hub = try NotificationHub(endpoint: "victim", transport: transport)
        let deliveries = try hub.deliveries(.of(HelperPing.self))
        #expect(try await sendFromHelper(["send-forged"], to: transport))
        try hub.post(HelperPing(poster: 0, index: 2))
        var iterator = deliveries.makeAsyncIterator()
        #expect(await iterator.next()?.notification == HelperPing(poster: 0, index: 2))
        #expect(transport.statistics.refusedForeignSender == 1)
        hub.close()
    }

}

/// Starts the helper with a socket connected to `transport`'s as its
/// standard input; returns whether it reported sending.
private func sendFromHelper(_ arguments: [String], to transport: SocketTransport) async throws -> Bool {
    let socket = try SystemCalls.datagramSocket().get()
    try SystemCalls.connectSocket(socket, toSocketPath: transport.socketPath).get()
    let helper = try HelperProcess(arguments, standardInput: socket.rawValue)
    let status = await helper.waitForExit()
    return status == 0 && helper.lines.values.contains("sent")
}

/// Darwin's path, run on Linux: no kernel credentials on a datagram (xnu
/// attaches none), so a sender is what its envelope claims, and the
/// directory's permissions decide who can claim anything at all.
@Suite("Socket transport without kernel credentials (Darwin's path)", .timeLimit(.minutes(10)))
struct SocketWithoutCredentialsTests {
    private func transport(_ directory: String) throws -> SocketTransport {
        var configuration = SocketTransportConfiguration()
        configuration.usesKernelCredentials = false
        return try SocketTransport(directory: directory, configuration: configuration)
    }

    @Test(
        "another user cannot reach an owner-only socket at all: the directory refuses the connect",
        .enabled(if: getuid() == 0, "needs root, to start the connecting helper as the user nobody")
    )
    func otherUserCannotConnect() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let transport = try transport(directory)
        let hub = try NotificationHub(endpoint: "victim", transport: transport)
        _ = try hub.deliveries(.of(HelperPing.self))
        let helper = try HelperProcess(["connect-as", "nobody", transport.socketPath])
        #expect(await helper.waitForExit() == 0, "\(helper.errors.values)")
        #expect(helper.lines.values == ["refused \(EACCES)"])
        hub.close()
    }

    @Test("in an owner-only directory, an envelope claiming another user is a forgery: dropped and counted")
    func forgedUserRefused() async throws {
        let (first, statistics) = try await firstDelivery(after: ["send-forged"])
        #expect(first?.notification == HelperPing(poster: 0, index: 2))
        #expect(statistics.refusedForeignSender == 1)
    }

    @Test("the process id is the sender's claim: checked by nobody, as the security model says")
    func processIDIsAClaim() async throws {
        let (first, statistics) = try await firstDelivery(after: ["send-forged-pid"])
        #expect(first?.delivery.sender.processID == 1)
        #expect(first?.delivery.sender.endpoint == "launchd")
        #expect(statistics.refusedForeignSender == 0)
    }

    /// What a hub without kernel credentials delivers first once the helper
    /// (run with `arguments`) sent its envelope and the hub posted its own
    /// ping (poster 0, index 2); and the transport's statistics then.
    private func firstDelivery(after arguments: [String]) async throws -> (
        DeliveredNotification<HelperPing>?, SocketTransportStatistics
    ) {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let transport = try transport(directory)
        let hub = try NotificationHub(endpoint: "victim", transport: transport)
        defer { hub.close() }
        let deliveries = try hub.deliveries(.of(HelperPing.self))
        #expect(try await sendFromHelper(arguments, to: transport))
        try hub.post(HelperPing(poster: 0, index: 2))
        var iterator = deliveries.makeAsyncIterator()
        return (await iterator.next(), transport.statistics)
    }
}

@Suite("Socket transport limits and security", .timeLimit(.minutes(10)))
struct SocketTransportSecurityTests {
    @Test("a socket path longer than sockets reach is a typed error naming the path and the limit")
    func pathTooLong() throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        // One byte past the longest directory whose every path (a registry
        // entry for a 200-byte name, the deepest) fits in PATH_MAX; longer
        // than sun_path is not too long any more (see UnixSocketAddressTests).
        let limit = SocketRegistry.maximumDirectoryLength()
        let longest = try makeLongDirectory(in: base, length: limit)
        let deep = longest + "d"
        do {
            _ = try SocketTransport(directory: deep)
            Issue.record("expected pathTooLong")
        } catch {
            #expect(error.code == .pathTooLong)
            #expect(error.message.contains(deep))
            #expect(error.message.contains("at most \(limit)"))
        }
        // Nothing was created for the refused transport.
        #expect(!fileExists(deep))
    }

    @Test("every path the registry and spool make, temporary ones included, fits in PATH_MAX at the longest directory")
    func everyPathFits() throws {
        let directory = "/" + String(repeating: "d", count: SocketRegistry.maximumDirectoryLength() - 1)
        let id = "0123456789abcdef"
        let name = try NotificationName(validating: String(repeating: "n", count: NotificationName.maximumLength))
        let namespace = try NotificationNamespace(
            validating: String(repeating: "s", count: SocketRegistry.longestNamespace))
        let spool = Spool.directory(directory, endpoint: id)
        let paths = [
            SocketRegistry.socketPath(directory, id),
            SocketRegistry.generationPath(directory),
            SocketRegistry.entryPath(directory, .name(name), id),
            SocketRegistry.entryPath(directory, .namespace(namespace), id),
            SocketRegistry.registrationPath(directory, id),
            spool + "/" + SocketRegistry.stagingName(),
            spool + "/." + Spool.fileName(poster: id, generation: .max),
            spool + "/" + Spool.fileName(poster: id, generation: .max),
        ]
        for path in paths {
            #expect(path.utf8.count <= SystemCalls.maximumPathLength, "\(path.utf8.count): \(path.suffix(60))")
        }
        // The deepest are the entries, as the limit was computed for.
        #expect(
            paths.map(\.utf8.count).max() == SocketRegistry.maximumDirectoryLength() + SocketRegistry.longestSuffix)
    }

    @Test("the longest directory it takes holds every path it makes: the longest name, a stopped observer's spool")
    func longestDirectory() async throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        let directory = try makeLongDirectory(in: base, length: SocketRegistry.maximumDirectoryLength())
        // The deepest path: a registry entry for a 200-byte name.
        let longName = try NotificationName(validating: String(repeating: "n", count: NotificationName.maximumLength))
        // Asked to sleep in its receive whatever else the process runs.
        var configuration = SocketTransportConfiguration()
        configuration.sleepsInReceiveBeyondLimit = true
        let hub = try socketHub(directory, endpoint: "longest", configuration: configuration)
        defer { hub.close() }
        #if os(Linux)
            // Its wake-up socket reaches its own socket at this length too:
            // the thread sleeps in its receive, as in a short directory.
            #expect(hub.transport.receiveCall != nil)
        #endif
        let named = try hub.deliveries(.of(String.self, named: longName))
        try hub.post("deepest", as: longName)
        var iterator = named.makeAsyncIterator()
        #expect(await iterator.next()?.notification == "deepest")
        // A stopped observer process: what a poster sends past its socket's
        // queue goes to the spool, a deeper path than the socket's.
        let observer = try HelperProcess(["contract", "observe", "socket", directory, "300"])
        await observer.waitForLine(startingWith: "ready")
        observer.signal(SIGSTOP)
        await waitUntilStopped(observer.pid)
        for index in 0..<300 { try hub.post(HelperPing(poster: 1, index: index)) }
        #expect(hub.transport.statistics.spooled > 0)
        observer.signal(SIGCONT)
        let done = parseDone(await observer.waitForLine(startingWith: "done"))
        #expect(done["count"] == "300" && done["inorder"] == "true" && done["missed"] == "0", "\(done)")
        #expect(await observer.waitForExit() == 0)
    }

    @Test("directories are 0700, sockets and registry entries 0600; closing removes them")
    func ownerOnlyModes() throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        let directory = base + "/shared"
        let transport = try SocketTransport(directory: directory)
        let hub = try NotificationHub(endpoint: "app", transport: transport)
        let token = try hub.addObserver(.of(HelperPing.self)) { _, _ in }
        #expect(mode(of: directory) == 0o700)
        #expect(mode(of: directory + "/sockets") == 0o700)
        #expect(mode(of: transport.socketPath) == 0o600)
        let entries = registryEntries(directory, HelperPing.name)
        #expect(entries.count == 1)
        let entry = directory + "/names/" + HelperPing.name.rawValue + "/" + (entries.first ?? "")
        #expect(mode(of: entry) == 0o600)
        #expect((try? String(contentsOfFile: entry, encoding: .utf8))?.contains("app") == true)
        token.cancel()
        #expect(registryEntries(directory, HelperPing.name).isEmpty)
        hub.close()
        #expect(!fileExists(transport.socketPath))
    }

    @Test("a symbolic link or an open directory is refused; foreign registry files are ignored")
    func hostileDirectories() async throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        let target = base + "/target"
        mkdir(target, 0o700)
        symlink(target, base + "/link")
        #expect {
            try SocketTransport(directory: base + "/link")
        } throws: { error in
            (error as? TypedNotificationError)?.code == .insecureDirectory
        }
        let open = base + "/open"
        mkdir(open, 0o700)
        chmod(open, 0o777)
        #expect {
            try SocketTransport(directory: open)
        } throws: { error in
            (error as? TypedNotificationError)?.code == .insecureDirectory
        }

        let directory = base + "/ok"
        let transport = try SocketTransport(directory: directory)
        let hub = try NotificationHub(endpoint: "app", transport: transport)
        let deliveries = try hub.deliveries(.of(HelperPing.self))
        let names = directory + "/names/" + HelperPing.name.rawValue
        // Planted: a stray file, a symbolic link with a valid-looking name, a directory.
        #expect(FileManager.default.createFile(atPath: names + "/not-an-endpoint", contents: Data()))
        symlink(transport.socketPath, names + "/00000000000000ff")
        mkdir(names + "/00000000000000fe", 0o700)
        try hub.post(HelperPing(poster: 0, index: 1))
        var iterator = deliveries.makeAsyncIterator()
        #expect(await iterator.next()?.notification.index == 1)
        #expect(transport.statistics.ignoredRegistryFiles == 3)
        hub.close()
    }

    @Test("a 64 KiB payload goes through whole; one larger than a datagram fails before anything is sent")
    func payloadSizes() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let transport = try SocketTransport(directory: directory)
        let hub = try NotificationHub(
            endpoint: "big",
            transport: transport,
            configuration: .init(maximumPayloadSize: NotificationHubConfiguration.payloadSizeHardLimit)
        )
        let deliveries = try hub.notifications(.of(Blob.self))
        let large = Blob(bytes: (0..<65_536).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try hub.post(large)
        var iterator = deliveries.makeAsyncIterator()
        #expect(await iterator.next() == large)

        let sentBefore = transport.statistics.sent
        let huge = Blob(bytes: [UInt8](repeating: 1, count: transport.maximumEnvelopeSize + 1))
        #expect {
            try hub.post(huge)
        } throws: { error in
            guard let error = error as? TypedNotificationError else { return false }
            return error.code == .payloadTooLarge && error.message.contains("datagram")
        }
        #expect(transport.statistics.sent == sentBefore)
        hub.close()
    }

    @Test("deliversToSelf: false keeps a transport's own posts from its own observers")
    func skipSelf() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let quiet = try socketHub(directory, endpoint: "quiet", configuration: .init(deliversToSelf: false))
        let other = try socketHub(directory, endpoint: "other")
        let atQuiet = try quiet.deliveries(.of(HelperPing.self))
        try quiet.post(HelperPing(poster: 1, index: 1))
        try other.post(HelperPing(poster: 2, index: 2))
        var iterator = atQuiet.makeAsyncIterator()
        #expect(await iterator.next()?.notification.poster == 2)
        quiet.close()
        other.close()
    }
}

/// Raw bytes as a payload of their own.
struct Blob: TypedNotification, Equatable {
    static let name: NotificationName = "test.blob"
    var bytes: [UInt8]
    init(bytes: [UInt8]) { self.bytes = bytes }
    func encodePayload(into buffer: inout [UInt8]) throws { buffer.append(contentsOf: bytes) }
    var payloadSizeHint: Int? { bytes.count }
    init(payload: UnsafeRawBufferPointer) throws { bytes = Array(payload) }
}
