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

func fileHub(
    _ directory: String,
    endpoint: String = "test",
    identity: String? = nil,
    configuration: FileSignalConfiguration = .init()
) throws -> NotificationHub<FileSignalTransport> {
    try NotificationHub(
        endpoint: endpoint,
        transport: FileSignalTransport(directory: directory, identity: identity, configuration: configuration)
    )
}

/// The records in a name's log: count, and whether the files hold nothing else.
func logRecords(_ directory: String, _ name: NotificationName) -> (count: Int, clean: Bool) {
    var count = 0
    var clean = true
    for number in FileLog.segments(directory, name) {
        guard
            let bytes = FileManager.default.contents(atPath: FileLog.segmentPath(directory, name, number)).map(
                Array.init)
        else { continue }
        var decoder = EnvelopeDecoder()
        let walked = LogScanner.walk(bytes, base: 0, fileSize: bytes.count) { item in
            switch item {
            case .record(_, _, _, let envelope):
                if LogCursorStateMachine.decode(envelope, in: bytes, with: &decoder) == nil { clean = false }
                count += 1
            case .skipped, .damaged, .piece: clean = false
            case .start, .rollover: break
            }
        }
        if walked.stop != .caughtUp { clean = false }
    }
    return (count, clean)
}

func logBytes(_ directory: String, _ name: NotificationName) -> Int {
    FileLog.segments(directory, name).reduce(0) { total, number in
        total
            + ((try? FileManager.default.attributesOfItem(atPath: FileLog.segmentPath(directory, name, number))[.size]
                as? Int) ?? 0)
    }
}

@Suite("File-plus-signal transport between processes", .serialized, .timeLimit(.minutes(10)))
struct FileSignalProcessTests {
    @Test("3 poster processes × 3 observer processes × 5,000: all 15,000 exactly once, each poster in order")
    func threeByThree() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observers = try (0..<3).map { _ in try HelperProcess(["fobserve", directory, "15000"]) }
        for observer in observers { await observer.waitForLine(startingWith: "ready") }
        let posters = try (1...3).map { try HelperProcess(["fpost", directory, "5000", "\($0)"]) }
        for poster in posters {
            #expect(await poster.waitForExit() == 0, "\(poster.errors.values)")
        }
        for observer in observers {
            let done = parseDone(await observer.waitForLine(startingWith: "done"))
            // In order per poster from index 0, 15,000 in all: each poster's 5,000 exactly once.
            #expect(done["count"] == "15000")
            #expect(done["inorder"] == "true")
            #expect(done["missed"] == "0")
            #expect(done["first"] == "1:0,2:0,3:0")
        }
        #expect(logRecords(directory, HelperPing.name) == (15_000, true))
    }

    @Test("another process's append wakes an observer through its change events, not its poll")
    func appendWakesObserverProcess() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // The observer polls once an hour: only an inotify event can wake it in time.
        let observer = try HelperProcess(["fobserve-events", directory, "3"])
        let ready = await observer.waitForLine(startingWith: "ready")
        #if os(Linux)
            // The process's one file transport: its thread sleeps in the read
            // of its change events, so an append wakes it with no timer at all.
            #expect(ready == "ready sleeping=true")
        #endif
        let hub = try NotificationHub(endpoint: "poster", transport: FileSignalTransport(directory: directory))
        defer { hub.close() }
        for index in 0..<3 { try hub.post(HelperPing(poster: 1, index: index)) }
        // A safety net, far beyond an event's microseconds and far below the
        // poll's hour: an observer still waiting after a minute is killed.
        let safetyNet = Task {
            try await Task.sleep(for: .seconds(60))
            observer.signal(SIGKILL)
        }
        defer { safetyNet.cancel() }
        #expect(await observer.waitForExit() == 0, "the observer process was not woken by the appends")
        let done = observer.lines.values.first { $0.hasPrefix("done") }
        #expect(done.map(parseDone)?["count"] == "3")
    }

    @Test("a closed file transport gives its place to sleep in read back to the process's next one, though still held")
    func closedTransportGivesPlaceBack() async throws {
        #if os(Linux)
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            // A process of its own: the test process's other file transports
            // hold places of their own.
            let helper = try HelperProcess(["fsleepers", directory])
            #expect(await helper.waitForExit() == 0)
            #expect(helper.lines.values.contains("sleeping first=true second=true third=true"))
        #endif
    }

    @Test(
        "with the user's inotify instances all but used up, sleeping never takes the last: every file transport opens",
        .enabled(if: getuid() == 0, "needs root, to run the helper as the user nobody, whose instances it uses up"),
        arguments: [1, 2, 3])
    func scarceInstances(free: Int) async throws {
        #if os(Linux)
            let helper = try HelperProcess(["fsleepers-scarce", "nobody", "\(free)"])
            #expect(await helper.waitForExit() == 0)
            // One free: the process's shared instance takes it, and nothing
            // sleeps in read. Each more lets one more transport sleep, up to two.
            let sleeping = (0..<3).map { String($0 < free - 1) }.joined(separator: ",")
            #expect(helper.lines.values.contains("made 3 sleeping=\(sleeping)"), "\(helper.lines.values)")
        #endif
    }

    @Test("a reader that keeps up with a poster rolling segments every 4 KiB misses nothing at the rollovers")
    func readerFollowsRollovers() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let hub = try NotificationHub(endpoint: "reader", transport: FileSignalTransport(directory: directory))
        defer { hub.close() }
        let deliveries = try hub.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
        // About 70 records per segment: some 140 rollovers while the reader reads.
        let poster = try HelperProcess(["fpost", directory, "10000", "1", "4096"])
        var indices: [Int] = []
        for await delivered in deliveries {
            indices.append(delivered.notification.index)
            if delivered.notification.index == 9999 { break }
        }
        #expect(await poster.waitForExit() == 0)
        #expect(indices == Array(0..<10_000))
    }

    @Test("a poster killed mid-append leaves a torn tail that the next writer steps over; nothing torn is delivered")
    func tornTailRepaired() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let transport = try FileSignalTransport(directory: directory)
        let hub = try NotificationHub(endpoint: "poster", transport: transport)
        let deliveries = try hub.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
        for index in 0..<10 { try hub.post(HelperPing(poster: 1, index: index)) }

        let torn = try HelperProcess(["ftorn", directory])
        #expect(await torn.waitForExit() == 128 + SIGKILL)
        #expect(torn.lines.values == ["torn"])
        #expect(!logRecords(directory, HelperPing.name).clean)

        for index in 10..<20 { try hub.post(HelperPing(poster: 1, index: index)) }
        #expect(transport.statistics.repairedTails == 1)
        // The torn half stays where it was (nothing is cut off), skipped.
        #expect(logRecords(directory, HelperPing.name).count == 20)
        var indices: [Int] = []
        for await delivered in deliveries {
            #expect(delivered.notification.poster == 1)
            indices.append(delivered.notification.index)
            if indices.count == 20 { break }
        }
        #expect(indices == Array(0..<20))
        hub.close()
    }

    @Test("an observer with a durable identity, killed, gets exactly the 1,000 posted while it was gone")
    func durableCursorResumes() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        let first = try HelperProcess(["fobserve", directory, "1000000", "widget"])
        await first.waitForLine(startingWith: "ready")
        for index in 0..<100 { try poster.post(HelperPing(poster: 4, index: index)) }
        await first.waitForLine(startingWith: "progress 100")
        // The cursor commits what was handled; wait until it covers all 100.
        let end = "1 \(logBytes(directory, HelperPing.name)) "
        let cursor = directory + "/cursors/widget/" + HelperPing.name.rawValue
        try await waitUntil("the cursor covers all 100", changesIn: directory + "/cursors/widget") {
            (try? String(contentsOfFile: cursor, encoding: .utf8))?.hasPrefix(end) == true
        }
        first.signal(SIGKILL)
        _ = await first.waitForExit()

        for index in 100..<1_100 { try poster.post(HelperPing(poster: 4, index: index)) }
        let second = try HelperProcess(["fobserve", directory, "1000", "widget"])
        let done = parseDone(await second.waitForLine(startingWith: "done"))
        #expect(done["count"] == "1000")
        #expect(done["inorder"] == "true")
        #expect(done["first"] == "4:100")
        #expect(done["missed"] == "0")
        poster.close()
    }

    @Test("RLIMIT_FSIZE at post time is a typed error; nothing partial is kept, nothing earlier is lost")
    func fileSizeLimit() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let helper = try HelperProcess(["fpost-limited", directory, "20000"])
        #expect(await helper.waitForExit() == 0, "\(helper.errors.values)")
        let line = try #require(helper.lines.values.first { $0.hasPrefix("refused") })
        #expect(line.hasPrefix("refused storageFull after "))
        let accepted = Int(line.split(separator: " ").last ?? "") ?? -1
        #expect(accepted > 0)
        #expect(logRecords(directory, HelperPing.name) == (accepted, true))
        #expect(logBytes(directory, HelperPing.name) <= 20_000)
    }
}

/// Whether this process may mount a small tmpfs (root, with CAP_SYS_ADMIN;
/// Linux only: the full-disk test mounts one).
let canMountTmpfs: Bool = {
    #if os(Linux)
        guard getuid() == 0, let probe = try? makeTemporaryDirectory() else { return false }
        defer { removeDirectory(probe) }
        guard mount("tmpfs", probe, "tmpfs", 0, "size=16k") == 0 else { return false }
        umount2(probe, Int32(MNT_DETACH))
        return true
    #else
        return false
    #endif
}()

@Suite("File-plus-signal transport within one process", .timeLimit(.minutes(10)))
struct FileSignalLocalTests {
    @Test("two quick posts are both kept and delivered, in order, also when only polling")
    func pollingOnly() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let polling = FileSignalConfiguration(pollInterval: .milliseconds(20), usesChangeEvents: false)
        let observer = try fileHub(directory, endpoint: "observer", configuration: polling)
        let poster = try fileHub(directory, endpoint: "poster")
        let deliveries = try observer.deliveries(.of(HelperPing.self))
        try poster.post(HelperPing(poster: 1, index: 0))
        try poster.post(HelperPing(poster: 1, index: 1))
        var indices: [Int] = []
        for await delivered in deliveries {
            indices.append(delivered.notification.index)
            if indices.count == 2 { break }
        }
        #expect(indices == [0, 1])
        observer.close()
        poster.close()
    }

    @Test("latest(_:) reads the newest notification without observing")
    func latest() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let hub = try fileHub(directory)
        #expect(try hub.latest(.of(HelperPing.self)) == nil)
        for index in 0..<3 { try hub.post(HelperPing(poster: 2, index: index)) }
        let newest = try #require(try hub.latest(.of(HelperPing.self)))
        #expect(newest.notification == HelperPing(poster: 2, index: 2))
        #expect(newest.delivery.sequence == 3)
        #expect(newest.delivery.sender == hub.sender)
        // Under a name given at run time, as its own type or as bytes.
        let named = try #require(try hub.latest(.of(HelperPing.self, named: HelperPing.name)))
        #expect(named.notification == newest.notification)
        let raw = try #require(try hub.latest(.of(RawNotification.self, named: HelperPing.name)))
        #expect(try HelperPing(payload: raw.notification.bytes) == newest.notification)
        // A namespace has a newest value per name: asking for one is refused, typed.
        do {
            _ = try hub.latest(.of(RawNotification.self, in: "test"))
            Issue.record("latest of a namespace returned")
        } catch {
            #expect(error.code == .unsupported)
        }
        hub.close()
    }

    @Test("a corrupt record in the middle is skipped and reported, never delivered")
    func corruptMiddleRecord() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        for index in 0..<3 { try poster.post(HelperPing(poster: 3, index: index)) }
        // Damage the second record's payload.
        let path = FileLog.segmentPath(directory, HelperPing.name, 1)
        var bytes = try #require(FileManager.default.contents(atPath: path).map(Array.init))
        var decoder = EnvelopeDecoder()
        let records = FileLog.records(in: bytes, decoder: &decoder)
        try #require(records.count == 3)
        bytes[records[1].start + LogFormat.headerSize + 40] ^= 0xFF
        try Data(bytes).write(to: URL(fileURLWithPath: path))

        // A durable reader whose cursor is at the start reads all three records.
        try FileManager.default.createDirectory(
            atPath: directory + "/cursors/auditor",
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        try "1 0\n".write(
            toFile: directory + "/cursors/auditor/" + HelperPing.name.rawValue, atomically: true, encoding: .utf8)
        let transport = try FileSignalTransport(directory: directory, identity: "auditor")
        let reader = try NotificationHub(endpoint: "auditor", transport: transport)
        let deliveries = try reader.deliveries(.of(HelperPing.self))
        var received: [(Int, Int)] = []
        for await delivered in deliveries {
            received.append((delivered.notification.index, delivered.delivery.missed))
            if received.count == 2 { break }
        }
        #expect(received.map(\.0) == [0, 2])
        #expect(received.map(\.1) == [0, 1])
        #expect(transport.statistics.corruptRecordsSkipped == 1)
        reader.close()
        poster.close()
    }

    /// 200,000 posts, or `TYPED_NOTIFICATIONS_RETENTION_POSTS` (CI's
    /// ThreadSanitizer run takes 20,000, still dozens of segments deleted:
    /// there the 200,000 took 170-400 s of a 300 s limit).
    static let retentionPosts =
        Int(ProcessInfo.processInfo.environment["TYPED_NOTIFICATIONS_RETENTION_POSTS"] ?? "") ?? 200_000

    @Test("retention keeps disk use bounded over 200,000 posts")
    func retentionBoundsDisk() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let configuration = FileSignalConfiguration(
            segmentSize: 64 * 1024,
            retention: FileRetentionPolicy(maximumBytes: 256 * 1024)
        )
        let transport = try FileSignalTransport(directory: directory, configuration: configuration)
        let hub = try NotificationHub(endpoint: "poster", transport: transport)
        let posts = Self.retentionPosts
        // Minutes of posting, on a thread of its own rather than the pool's.
        let largest = try await offThePool { () throws -> Int in
            var largest = 0
            for index in 0..<posts {
                try hub.post(HelperPing(poster: 5, index: index))
                if index % 10_000 == 0 { largest = max(largest, logBytes(directory, HelperPing.name)) }
            }
            return max(largest, logBytes(directory, HelperPing.name))
        }
        // The policy's bound plus the segment being written.
        #expect(largest <= 256 * 1024 + 64 * 1024)
        #expect(transport.statistics.deletedSegments > 0)
        let newest = try #require(try hub.latest(.of(HelperPing.self)))
        #expect(newest.notification.index == posts - 1)
        hub.close()
    }

    // Linux only: a full disk is a small tmpfs, which mount(2) makes here.
    #if os(Linux)
        @Test(
            "a full disk at post time is a typed error; nothing partial is kept, nothing earlier is lost",
            .enabled(if: canMountTmpfs, "needs root with CAP_SYS_ADMIN to mount a 64 KiB tmpfs")
        )
        func fullDisk() throws {
            let mountPoint = try makeTemporaryDirectory()
            defer { removeDirectory(mountPoint) }
            try #require(mount("tmpfs", mountPoint, "tmpfs", 0, "size=64k,mode=0700") == 0)
            defer { umount2(mountPoint, Int32(MNT_DETACH)) }
            let directory = mountPoint + "/files"
            let hub = try fileHub(directory)
            var accepted = 0
            var refusal: TypedNotificationError?
            while refusal == nil && accepted < 100_000 {
                do {
                    try hub.post(HelperPing(poster: 9, index: accepted))
                    accepted += 1
                } catch {
                    refusal = error
                }
            }
            #expect(refusal?.code == .storageFull)
            #expect(accepted > 100)
            #expect(logRecords(directory, HelperPing.name) == (accepted, true))
            #expect(try hub.latest(.of(HelperPing.self))?.notification.index == accepted - 1)
            hub.close()
        }
    #endif

    @Test("a live reader follows the log across many segments, one post at a time and in bursts")
    func followsRollovers() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // About 40 records per segment: a rollover every few posts.
        let configuration = FileSignalConfiguration(segmentSize: 4096)
        let poster = try fileHub(directory, endpoint: "poster", configuration: configuration)
        let reader = try fileHub(directory, endpoint: "reader", configuration: configuration)
        let received = Collector<Int>()
        let token = try reader.addObserver(.of(HelperPing.self)) { note, _ in received.append(note.index) }
        // One at a time: each post is read before the next, so the pass that
        // reads a segment's last record is often the one that sees the next
        // segment created.
        for index in 0..<400 {
            try poster.post(HelperPing(poster: 1, index: index))
            await received.wait(forCount: index + 1)
        }
        for index in 400..<4000 { try poster.post(HelperPing(poster: 1, index: index)) }
        #expect(await received.wait(forCount: 4000, upTo: safetyNet))
        #expect(received.values == Array(0..<4000))
        #expect(reader.metrics.dropped == 0)
        #expect(FileLog.segments(directory, HelperPing.name).count > 50)
        token.cancel()
        reader.close()
        poster.close()
    }

    @Test("a backlog far larger than an observer's buffer reaches a slow handler whole: the reader waits for it")
    func readerWaitsForSlowObserver() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // The handler is held on purpose: on a thread of its own, not one
        // the other tests' hubs share (it would hold theirs, and theirs it).
        var configuration = FileSignalConfiguration()
        configuration.sleepsInRead = false
        configuration.loopGroup = LoopGroup(threads: 1)
        let poster = try fileHub(directory, endpoint: "poster")
        let reader = try fileHub(directory, endpoint: "reader", configuration: configuration)
        let received = Collector<Int>()
        let started = OneShotEvent()
        // The default buffer keeps the newest 1,024; the backlog is 5,000.
        let token = try reader.addObserver(.of(HelperPing.self)) { note, _ in
            if note.index == 0 { started.wait() }
            // Slower than the reader: some work per notification.
            Thread.sleep(forTimeInterval: 0.00002)
            received.append(note.index)
        }
        try poster.post(HelperPing(poster: 2, index: 0))
        // While the handler is held in its first call, the log fills up.
        for index in 1..<5000 { try poster.post(HelperPing(poster: 2, index: index)) }
        started.signal()
        // A safety net: with notifications dropped, the count never comes.
        // Generous: a loaded machine delivered them in 1 to 60 s.
        #expect(await received.wait(forCount: 5000, upTo: .seconds(240)))
        #expect(received.values == Array(0..<5000))
        #expect(reader.metrics.dropped == 0)
        token.cancel()
        reader.close()
        poster.close()
    }

    @Test("segments older than the age limit are deleted when the log rolls")
    func retentionByAge() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let configuration = FileSignalConfiguration(
            segmentSize: 4096,
            retention: FileRetentionPolicy(maximumAge: .seconds(3600))
        )
        let hub = try fileHub(directory, configuration: configuration)
        for index in 0..<100 { try hub.post(HelperPing(poster: 1, index: index)) }
        let segments = FileLog.segments(directory, HelperPing.name)
        #expect(segments.count > 2)
        // Make the first segment two hours old; the next roll deletes it, and only it.
        let first = FileLog.segmentPath(directory, HelperPing.name, segments[0])
        var times = [timeval(tv_sec: time(nil) - 7200, tv_usec: 0), timeval(tv_sec: time(nil) - 7200, tv_usec: 0)]
        #expect(utimes(first, &times) == 0)
        for index in 100..<200 { try hub.post(HelperPing(poster: 1, index: index)) }
        let after = FileLog.segments(directory, HelperPing.name)
        #expect(!after.contains(segments[0]))
        #expect(after.contains(segments[1]))
        hub.close()
    }

    @Test("a durable cursor keeps the segments it still needs")
    func retentionRespectsCursors() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let configuration = FileSignalConfiguration(
            segmentSize: 4096, retention: FileRetentionPolicy(maximumBytes: 8192))
        // A reader that subscribed and then went away, its cursor at segment 1.
        let sleeper = try fileHub(directory, endpoint: "sleeper", identity: "sleeper", configuration: configuration)
        let token = try sleeper.addObserver(.of(HelperPing.self)) { _, _ in }
        token.cancel()
        sleeper.close()
        let hub = try fileHub(directory, endpoint: "poster", configuration: configuration)
        for index in 0..<500 { try hub.post(HelperPing(poster: 6, index: index)) }
        #expect(FileLog.segments(directory, HelperPing.name).first == 1)
        hub.close()
    }

    @Test("the directory is 0700 and logs 0600; symbolic links and foreign files are refused or ignored")
    func security() async throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        let directory = base + "/files"
        let hub = try fileHub(directory)
        let deliveries = try hub.deliveries(.of(HelperPing.self))
        try hub.post(HelperPing(poster: 7, index: 0))
        #expect(mode(of: directory) == 0o700)
        #expect(mode(of: FileLog.segmentPath(directory, HelperPing.name, 1)) == 0o600)
        // Planted: a link posing as a newer segment, and a stray file.
        symlink("/etc/passwd", FileLog.segmentPath(directory, HelperPing.name, 2))
        #expect(
            FileManager.default.createFile(
                atPath: FileLog.nameDirectory(directory, HelperPing.name) + "/notes.txt", contents: Data("x".utf8)))
        #expect(FileLog.segments(directory, HelperPing.name) == [1])
        try hub.post(HelperPing(poster: 7, index: 1))
        var indices: [Int] = []
        for await delivered in deliveries {
            indices.append(delivered.notification.index)
            if indices.count == 2 { break }
        }
        #expect(indices == [0, 1])
        #expect {
            try FileSignalTransport(directory: directory, identity: "../escape")
        } throws: { error in
            (error as? TypedNotificationError)?.code == .invalidEndpoint
        }
        symlink(directory, base + "/link")
        #expect {
            try FileSignalTransport(directory: base + "/link")
        } throws: { error in
            (error as? TypedNotificationError)?.code == .insecureDirectory
        }
        hub.close()
    }
}
