import Foundation
import Testing

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

/// The log against ordinary other processes and a few crafted bytes: each
/// test plays one way the log used to lose, destroy or stall.
@Suite("File log against other processes and crafted bytes", .serialized, .timeLimit(.minutes(10)))
struct LogAdversaryTests {
    private func small(retaining bytes: Int = 64 * 1024 * 1024) -> FileSignalConfiguration {
        FileSignalConfiguration(segmentSize: 4096, retention: FileRetentionPolicy(maximumBytes: bytes))
    }

    @Test("a log directory renamed away under a watcher: the log made again at its path is followed")
    func logDirectoryRenamed() async throws {
        // The adversary: `mv logs/NAME elsewhere`. The segment the watcher
        // holds still has its link, so only its path says it left.
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let hub = try fileHub(directory, endpoint: "watcher")
        defer { hub.close() }
        let got = Collector<(poster: Int, index: Int)>()
        let token = try hub.addObserver(.of(HelperPing.self), bufferingPolicy: .unbounded) { ping, _ in
            got.append((ping.poster, ping.index))
        }
        let first = try HelperProcess(["fpost", directory, "20", "1"])
        #expect(await first.waitForExit() == 0, "\(first.errors.values)")
        #expect(await got.wait(forCount: 20, upTo: safetyNet))
        try FileManager.default.moveItem(
            atPath: directory + "/logs/" + HelperPing.name.rawValue, toPath: directory + "/moved")
        let second = try HelperProcess(["fpost", directory, "30", "3"])
        #expect(await second.waitForExit() == 0, "\(second.errors.values)")
        #expect(await got.wait(forCount: 50, upTo: safetyNet))
        #expect(got.values.filter { $0.poster == 3 }.map(\.index) == Array(0..<30))
        token.cancel()
    }

    @Test(
        "a log removed or renamed away, and DIR/logs too, 24 times under a watcher that holds its segment open: each post made after reaches it, with no periodic look"
    )
    func logReplacedOverAndOver() async throws {
        // The adversary: `rm -rf` and `mv` by other processes, each followed
        // at once by a post from another. A directory removed while the
        // watcher holds a segment in it sends no event of its own until
        // that segment is closed, and a renamed one none at all; only the
        // entries made at its path say a new log is there. With no timer
        // to look again, a missed one would wait forever (30 s here).
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let hub = try fileHub(directory, endpoint: "watcher")
        defer { hub.close() }
        let got = Collector<(poster: Int, index: Int)>()
        let token = try hub.addObserver(.of(HelperPing.self), bufferingPolicy: .unbounded) { ping, _ in
            got.append((ping.poster, ping.index))
        }
        defer { token.cancel() }
        let logs = directory + "/logs"
        let log = logs + "/" + HelperPing.name.rawValue
        let first = try HelperProcess(["fpost", directory, "1", "0"])
        #expect(await first.waitForExit() == 0, "\(first.errors.values)")
        #expect(await got.wait(forCount: 1, upTo: safetyNet))
        let adversaries: [[String]] = [
            ["/bin/rm", "-rf", log], ["/bin/rm", "-rf", logs],
            ["/bin/mv", log, directory + "/away"], ["/bin/mv", logs, directory + "/away"],
        ]
        for round in 1...24 {
            let arguments = adversaries[round % adversaries.count]
            let adversary = try HelperProcess(Array(arguments.dropFirst()), executable: arguments[0])
            #expect(await adversary.waitForExit() == 0, "round \(round): \(adversary.errors.values)")
            let poster = try HelperProcess(["fpost", directory, "1", "\(round)"])
            #expect(await poster.waitForExit() == 0, "round \(round): \(poster.errors.values)")
            let arrived = await got.wait(forCount: round + 1, upTo: safetyNet)
            #expect(arrived, "round \(round), after \(arguments.joined(separator: " "))")
            guard arrived else { break }
            removeDirectory(directory + "/away")
        }
        #expect(got.values.map(\.poster) == Array(0...24))
    }

    @Test(
        "a log directory renamed away under a long-lived poster: its next posts go to the log at the path, made again by it or by another process"
    )
    func logDirectoryRenamedUnderPoster() async throws {
        // The adversary: `mv logs/NAME elsewhere` by another process, between
        // two posts of a poster that lives on. The segment and the lock file
        // it holds keep their links; only their paths say the log left.
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watcher = try fileHub(directory, endpoint: "watcher")
        defer { watcher.close() }
        let got = Collector<(poster: Int, index: Int)>()
        let token = try watcher.addObserver(.of(HelperPing.self), bufferingPolicy: .unbounded) { ping, _ in
            got.append((ping.poster, ping.index))
        }
        defer { token.cancel() }
        let poster = try fileHub(directory, endpoint: "app")
        defer { poster.close() }
        let log = directory + "/logs/" + HelperPing.name.rawValue
        func move(to place: String) async throws {
            let mover = try HelperProcess([log, directory + "/" + place], executable: "/bin/mv")
            #expect(await mover.waitForExit() == 0, "\(mover.errors.values)")
        }
        // The bytes of a log's segments, to see that nothing was written to
        // a log after it was moved away.
        func segmentBytes(_ path: String) throws -> Int {
            try FileManager.default.contentsOfDirectory(atPath: path).filter { $0.hasSuffix(".log") }.reduce(0) {
                $0 + ((try FileManager.default.attributesOfItem(atPath: path + "/" + $1)[.size] as? Int) ?? 0)
            }
        }
        for index in 0..<10 { try poster.post(HelperPing(poster: 0, index: index)) }
        #expect(await got.wait(forCount: 10, upTo: safetyNet))

        // Nobody makes the log again: the poster's next post does.
        let before = try segmentBytes(log)
        try await move(to: "moved-1")
        for index in 10..<30 { try poster.post(HelperPing(poster: 0, index: index)) }
        #expect(await got.wait(forCount: 30, upTo: safetyNet))
        #expect(try segmentBytes(directory + "/moved-1") == before)

        // Another process makes it again first; the poster goes on in it.
        let again = try segmentBytes(log)
        try await move(to: "moved-2")
        let other = try HelperProcess(["fpost", directory, "5", "3"])
        #expect(await other.waitForExit() == 0, "\(other.errors.values)")
        for index in 30..<50 { try poster.post(HelperPing(poster: 0, index: index)) }
        #expect(await got.wait(forCount: 55, upTo: safetyNet))
        #expect(try segmentBytes(directory + "/moved-2") == again)

        #expect(got.values.filter { $0.poster == 0 }.map(\.index) == Array(0..<50))
        #expect(got.values.filter { $0.poster == 3 }.map(\.index) == Array(0..<5))
    }

    @Test(
        "a long-lived poster keeps posting while other processes roll the log under it: nothing throws, nothing is lost"
    )
    func longLivedPosterAcrossRollovers() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try fileHub(directory, endpoint: "observer")
        defer { observer.close() }
        let deliveries = try observer.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
        let poster = try fileHub(directory, endpoint: "app", configuration: small())
        defer { poster.close() }
        try poster.post(HelperPing(poster: 0, index: 0))
        // Two short-lived posters fill and roll 4 KiB segments meanwhile.
        let others = try (1...2).map { try HelperProcess(["fpost", directory, "1000", String($0), "4096"]) }
        var failures = 0
        for index in 1...1_000 {
            do {
                try poster.post(HelperPing(poster: 0, index: index))
            } catch {
                failures += 1
            }
            if index % 100 == 0 { await Task.yield() }
        }
        for other in others { #expect(await other.waitForExit() == 0) }
        #expect(failures == 0)
        #expect(poster.transport.statistics.failedAppends == 0)
        #expect(FileLog.segments(directory, HelperPing.name).count > 20)
        var next: [Int: Int] = [:]
        var received = 0
        for await delivered in deliveries {
            let ping = delivered.notification
            #expect(ping.index == next[ping.poster, default: 0], "poster \(ping.poster)")
            next[ping.poster] = ping.index + 1
            received += 1
            if received == 3_001 { break }
        }
        #expect(next == [0: 1_001, 1: 1_000, 2: 1_000])
    }

    @Test(
        "a plain watcher stopped while retention deletes what it had not read resumes, and is told exactly how many it missed"
    )
    func pausedWatcherAcrossRetention() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watcher = try HelperProcess(["fobserve-total", directory, "320"])
        _ = await watcher.waitForLine(startingWith: "ready")
        let poster = try fileHub(directory, endpoint: "poster", configuration: small(retaining: 8 * 1024))
        defer { poster.close() }
        watcher.signal(SIGSTOP)
        for index in 0..<300 { try poster.post(HelperPing(poster: 1, index: index)) }
        #expect(poster.transport.statistics.deletedSegments > 5)
        watcher.signal(SIGCONT)
        for index in 300..<320 { try poster.post(HelperPing(poster: 1, index: index)) }
        let done = parseDone(await watcher.waitForLine(startingWith: "done"))
        #expect(await watcher.waitForExit() == 0)
        let count = try #require(done["count"].flatMap { Int($0) })
        let missed = try #require(done["missed"].flatMap { Int($0) })
        #expect(count >= 20)
        #expect(count + missed == 320)
    }

    @Test(
        "a plain watcher stopped while its log is removed (rm -rf) and made again, shorter: it goes on in the new log and gets every post of it"
    )
    func pausedWatcherAcrossLogRemoval() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // The old log reaches segment 7 or so; the new one only 2, so the
        // segment the watcher holds has no namesake in the new log, and the
        // file system hands the new directory the old one's inode number.
        let old = try fileHub(directory, endpoint: "old", configuration: small())
        for index in 0..<200 { try old.post(HelperPing(poster: 1, index: index)) }
        let watcher = try HelperProcess(
            ["watch", HelperPing.name.rawValue, "--transport", "file", "--dir", directory, "--json"],
            executable: HelperProcess.tnotify)
        _ = await watcher.waitForLine(startingWith: "watching")
        try old.post(HelperPing(poster: 1, index: 200))
        _ = await watcher.waitForLine(startingWith: "{")
        watcher.signal(SIGSTOP)
        old.close()
        removeDirectory(directory + "/logs/" + HelperPing.name.rawValue)
        let renewed = try fileHub(directory, endpoint: "new", configuration: small())
        defer { renewed.close() }
        for index in 0..<40 { try renewed.post(HelperPing(poster: 2, index: index)) }
        watcher.signal(SIGCONT)
        for index in 40..<50 { try renewed.post(HelperPing(poster: 2, index: index)) }
        let fromNewLog = { watcher.lines.values.filter { $0.contains(#""endpoint":"new""#) } }
        // "watching", record 200 of the old log, the new log's 50 (with a
        // safety net for a watcher that stalls on the removed log).
        _ = await watcher.lines.wait(forCount: 52, upTo: safetyNet)
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)
        #expect(fromNewLog().map { jsonField($0, "sequence") } == (1...50).map { $0 })
        #expect(fromNewLog().allSatisfy { !$0.contains("redelivery") })
    }

    @Test(
        "a durable identity whose log was removed and made again with the same layout reads the new log from its start, nothing marked as delivered before"
    )
    func durableCursorIntoReplacedLog() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let arguments = [
            "watch", HelperPing.name.rawValue, "--transport", "file", "--dir", directory, "--cursor", "aud",
            "--from", "beginning", "--json",
        ]
        let old = try fileHub(directory, endpoint: "old")
        for index in 0..<100 { try old.post(HelperPing(poster: 1, index: index)) }
        old.close()
        await old.closed()
        let first = try HelperProcess(arguments, executable: HelperProcess.tnotify)
        await first.lines.wait(forCount: 101)
        first.signal(SIGTERM)
        #expect(await first.waitForExit() == 0)
        // The same records again, byte for byte the same sizes, and more:
        // the saved position falls on a record boundary of the new log, at
        // the same index.
        removeDirectory(directory + "/logs/" + HelperPing.name.rawValue)
        let renewed = try fileHub(directory, endpoint: "new")
        defer { renewed.close() }
        for index in 0..<120 { try renewed.post(HelperPing(poster: 2, index: index)) }
        let second = try HelperProcess(arguments, executable: HelperProcess.tnotify)
        _ = await second.lines.wait(forCount: 121, upTo: safetyNet)
        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0)
        let lines = second.lines.values.filter { $0.hasPrefix("{") }
        #expect(lines.allSatisfy { $0.contains(#""endpoint":"new""#) })
        #expect(lines.map { jsonField($0, "sequence") } == (1...120).map { $0 })
        #expect(lines.allSatisfy { !$0.contains("redelivery") })
    }

    @Test("a durable watcher with a buffer of 100 gets a backlog of 3,000 whole, and its next run starts after it")
    func durableIdentityWithSmallBuffer() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        for index in 0..<3_000 { try poster.post(HelperPing(poster: 1, index: index)) }
        let arguments = [
            "watch", HelperPing.name.rawValue, "--transport", "file", "--dir", directory, "--cursor", "aud",
            "--from", "beginning", "--buffer", "100", "--json",
        ]
        let first = try HelperProcess(arguments, executable: HelperProcess.tnotify)
        _ = await first.waitForLine(startingWith: "watching")
        await first.lines.wait(forCount: 3_001)
        first.signal(SIGTERM)
        #expect(await first.waitForExit() == 0)
        let lines = first.lines.values.filter { $0.hasPrefix("{") }
        #expect(lines.count == 3_000)
        #expect(lines.allSatisfy { $0.contains(#""missed":0"#) })
        #expect(lines.map { jsonField($0, "sequence") } == (1...3_000).map { $0 })
        // Everything was handled: the next run gets only what comes after.
        try poster.post(HelperPing(poster: 1, index: 3_000))
        let second = try HelperProcess(arguments, executable: HelperProcess.tnotify)
        let next = await second.waitForLine(startingWith: "{")
        #expect(jsonField(next, "sequence") == 3_001)
        #expect(!next.contains("redelivery"))
        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0)
    }

    @Test(
        "an abandoned durable identity holds the log only up to its limit; back, it is told exactly how many it missed")
    func abandonedIdentity() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let configuration = FileSignalConfiguration(
            segmentSize: 4096,
            retention: FileRetentionPolicy(maximumBytes: 8 * 1024, maximumBytesBehind: 32 * 1024))
        // "ghost" subscribes once and never comes back (until the end).
        let ghost = try fileHub(directory, endpoint: "ghost", identity: "ghost", configuration: configuration)
        _ = try ghost.deliveries(.of(HelperPing.self))
        ghost.close()
        let poster = try fileHub(directory, endpoint: "poster", configuration: configuration)
        defer { poster.close() }
        var largest = 0
        for index in 0..<3_000 {
            try poster.post(HelperPing(poster: 1, index: index))
            largest = max(largest, logBytes(directory, HelperPing.name))
        }
        // Bounded by the limit behind, one segment more, and the policy itself.
        #expect(largest <= 32 * 1024 + 8 * 1024 + 2 * 4096, "the log grew to \(largest) bytes")
        let list = try await tnotify(["ls", "--transport", "file", "--dir", directory])
        #expect(list.output.contains { $0.hasPrefix("    cursor ghost: ") })
        // Back: what retention took is counted, the rest delivered.
        let back = try fileHub(directory, endpoint: "ghost", identity: "ghost", configuration: configuration)
        defer { back.close() }
        let deliveries = try back.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
        try poster.post(HelperPing(poster: 1, index: 3_000))
        var received = 0
        var missed = 0
        for await delivered in deliveries {
            received += 1
            missed += delivered.delivery.missed
            if delivered.notification.index == 3_000 { break }
        }
        #expect(received > 1)
        #expect(received + missed == 3_001)
    }

    @Test("ls, latest and watch name a segment they refuse (its mode, or format 1) instead of saying nothing")
    func refusedSegmentsAreNamed() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        try poster.post(HelperPing(poster: 1, index: 0))
        poster.close()
        let name = HelperPing.name.rawValue
        let segment = FileLog.segmentPath(directory, HelperPing.name, 1)
        try #require(chmod(segment, 0o666) == 0)
        let latest = try await tnotify(["latest", name, "--dir", directory])
        #expect(latest.status == 77)
        #expect(latest.errors.contains { $0.contains("00000000000000000001.log") && $0.contains("666") })
        let list = try await tnotify(["ls", "--transport", "file", "--dir", directory])
        #expect(list.output.contains { $0.hasPrefix("    refused: 00000000000000000001.log") && $0.contains("666") })
        let watcher = try HelperProcess(
            ["watch", name, "--transport", "file", "--dir", directory], executable: HelperProcess.tnotify)
        _ = await watcher.waitForLine(startingWith: "watching")
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)
        #expect(watcher.errors.values.contains { $0.contains("never read") && $0.contains("666") })
        // A segment of format 1: named as such.
        try #require(chmod(segment, 0o600) == 0)
        try Data(pingEnvelope(0)).write(to: URL(fileURLWithPath: segment))
        let again = try await tnotify(["ls", "--transport", "file", "--dir", directory])
        #expect(again.output.contains { $0.contains("refused: 00000000000000000001.log is of format 1") })
    }

    @Test("tnotify post refuses a payload too large, or text that is not UTF-8, with 65 and creates nothing")
    func badPayloadLeavesNothing() async throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        let untouched = base + "/never-created"
        let input = base + "/big"
        #expect(FileManager.default.createFile(atPath: input, contents: Data(count: 70_000)))
        let descriptor = open(input, O_RDONLY)
        defer { close(descriptor) }
        let big = try HelperProcess(
            ["post", "app.big", "--transport", "file", "--dir", untouched, "--stdin"],
            executable: HelperProcess.tnotify, standardInput: descriptor)
        #expect(await big.waitForExit() == 65)
        #expect(!FileManager.default.fileExists(atPath: untouched))
        // Bytes that are not UTF-8, as a shell passes them.
        for option in ["--text", "--json"] {
            let shell = try HelperProcess(
                [
                    "-c", "exec \"$0\" post app.text \(option) \"$(printf '\\377\\376')\" --dir \"$1\"",
                    HelperProcess.tnotify, untouched,
                ],
                executable: "/bin/sh")
            #expect(await shell.waitForExit() == 65, "\(option): \(shell.errors.values)")
            #expect(shell.errors.values.contains { $0.contains("not valid UTF-8") } || option == "--json")
        }
        #expect(!FileManager.default.fileExists(atPath: untouched))
    }

    @Test(
        "a file planted under the next segment's name (zeros, random bytes, format 1, 64 GiB sparse, empty) is stepped over: posts land where readers find them",
        arguments: ["zeros", "random", "format1", "sparse", "empty"])
    func plantedNextSegment(kind: String) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        try poster.post(HelperPing(poster: 1, index: 0))
        poster.close()
        let watcher = try fileHub(directory, endpoint: "watcher")
        defer { watcher.close() }
        let deliveries = try watcher.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
        let planted = FileLog.segmentPath(directory, HelperPing.name, 2)
        var bytes: [UInt8]
        switch kind {
        case "zeros": bytes = [UInt8](repeating: 0, count: 24)
        case "random": bytes = (0..<100).map { UInt8(truncatingIfNeeded: $0 &* 97 &+ 13) }
        case "format1": bytes = Array("TNOT\u{1}garbage".utf8)
        case "empty": bytes = []
        default: bytes = [1]
        }
        #expect(
            FileManager.default.createFile(
                atPath: planted, contents: Data(bytes), attributes: [.posixPermissions: 0o600]))
        if kind == "sparse" { #expect(truncate(planted, 64 << 30) == 0) }
        // A new poster process, and the first poster's hub again: both land.
        let post = try HelperProcess(
            [
                "post", HelperPing.name.rawValue, "--transport", "file", "--dir", directory, "--json",
                #"{"poster":2,"index":0}"#,
            ],
            executable: HelperProcess.tnotify)
        #expect(await post.waitForExit() == 0)
        let again = try fileHub(directory, endpoint: "poster")
        try again.post(HelperPing(poster: 1, index: 1))
        again.close()
        var seen: [HelperPing] = []
        var missed = 0
        for await delivered in deliveries {
            seen.append(delivered.notification)
            missed += delivered.delivery.missed
            if seen.count == 2 { break }
        }
        #expect(seen == [HelperPing(poster: 2, index: 0), HelperPing(poster: 1, index: 1)], "\(kind)")
        #expect(missed == 0)
        let list = try await tnotify(["ls", "--transport", "file", "--dir", directory])
        #expect(list.output.contains { $0.contains("refused: 00000000000000000002.log") }, "\(kind): \(list.output)")
        let latest = try await tnotify(["latest", HelperPing.name.rawValue, "--dir", directory])
        #expect(latest.status == 0, "\(kind): \(latest.errors)")
    }

    @Test("a record whose checksummed header lies about its index is delivered, and no loss is invented")
    func forgedIndex() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        for index in 0..<10 { try poster.post(HelperPing(poster: 1, index: index)) }
        let path = FileLog.segmentPath(directory, HelperPing.name, 1)
        var bytes = try #require(FileManager.default.contents(atPath: path).map(Array.init))
        var decoder = EnvelopeDecoder()
        let records = FileLog.records(in: bytes, decoder: &decoder)
        let fifth = records[4]
        let length = UInt32(fifth.end - fifth.start - LogFormat.headerSize)
        bytes.replaceSubrange(
            fifth.start..<(fifth.start + LogFormat.headerSize),
            with: forgedHeader(type: 1, length: length, dataChecksum: LogFormat.envelopeResidue, index: 1_004))
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        try poster.post(HelperPing(poster: 1, index: 10))
        let reader = try NotificationHub(
            endpoint: "reader", transport: FileSignalTransport(directory: directory, firstRead: .beginning))
        defer { reader.close() }
        let deliveries = try reader.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
        var indices: [Int] = []
        var missed = 0
        for await delivered in deliveries {
            indices.append(delivered.notification.index)
            missed += delivered.delivery.missed
            if indices.last == 10 { break }
        }
        #expect(indices == Array(0...10))
        #expect(missed == 0)
    }

    @Test("a torn tail already there when a watcher subscribes: the next posts all arrive, nothing old comes again")
    func tornTailAtSubscribe() async throws {
        for round in 0..<6 {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            let poster = try fileHub(directory, endpoint: "poster")
            for index in 0..<3 { try poster.post(HelperPing(poster: 1, index: index)) }
            let torn = try HelperProcess(["ftorn", directory])
            #expect(await torn.waitForExit() == 128 + SIGKILL)
            let watcher = try fileHub(directory, endpoint: "watcher")
            let deliveries = try watcher.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
            for index in 3..<6 { try poster.post(HelperPing(poster: 1, index: index)) }
            var indices: [Int] = []
            var missed = 0
            for await delivered in deliveries {
                indices.append(delivered.notification.index)
                missed += delivered.delivery.missed
                #expect(!delivered.delivery.isRedelivery)
                if indices.count == 3 { break }
            }
            #expect(indices == [3, 4, 5], "round \(round)")
            #expect(missed == 0)
            watcher.close()
            poster.close()
        }
    }

    @Test("a forged length costs one record: the ones after it are delivered, and the next post destroys nothing")
    func forgedLength() async throws {
        for forgery in ["envelope", "fragment"] {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            let poster = try fileHub(directory, endpoint: "poster")
            for index in 0..<10 { try poster.post(HelperPing(poster: 1, index: index)) }
            let path = FileLog.segmentPath(directory, HelperPing.name, 1)
            var bytes = try #require(FileManager.default.contents(atPath: path).map(Array.init))
            var decoder = EnvelopeDecoder()
            let records = FileLog.records(in: bytes, decoder: &decoder)
            try #require(records.count == 10)
            let fourth = records[3].start
            if forgery == "envelope" {
                // The envelope's payload and record lengths claim 100,000 bytes, the rest consistent.
                let envelope = fourth + LogFormat.headerSize
                let payload = UInt32(100_000)
                let total = UInt32(60 + 16 + 100_000)
                withUnsafeBytes(of: payload.littleEndian) {
                    bytes.replaceSubrange((envelope + 8)..<(envelope + 12), with: $0)
                }
                withUnsafeBytes(of: total.littleEndian) {
                    bytes.replaceSubrange((envelope + 28)..<(envelope + 32), with: $0)
                }
            } else {
                // The fragment's own length, with a header checksum that passes.
                bytes.replaceSubrange(
                    fourth..<(fourth + LogFormat.headerSize), with: forgedHeader(type: 1, length: 600, index: 3))
            }
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            let before = bytes.count
            try poster.post(HelperPing(poster: 1, index: 10))
            let after = try #require(FileManager.default.contents(atPath: path)).count
            #expect(after > before, "\(forgery): the segment was cut from \(before) to \(after) bytes")
            let reader = try NotificationHub(
                endpoint: "reader", transport: FileSignalTransport(directory: directory, firstRead: .beginning))
            let deliveries = try reader.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
            var indices: [Int] = []
            var missed = 0
            for await delivered in deliveries {
                indices.append(delivered.notification.index)
                missed += delivered.delivery.missed
                if indices.last == 10 { break }
            }
            #expect(indices == [0, 1, 2, 4, 5, 6, 7, 8, 9, 10], "\(forgery)")
            #expect(missed == 1, "\(forgery)")
            #expect(reader.transport.statistics.corruptRecordsSkipped == 1, "\(forgery)")
            reader.close()
            poster.close()
        }
    }

    @Test(
        "one flipped byte in the last record of the log, data or header: the next post neither wipes it nor reuses its index, and readers are told it is lost",
        arguments: ["data", "header"]
    )
    func damagedLastRecord(part: String) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        for index in 0..<20 { try poster.post(HelperPing(poster: 1, index: index)) }
        poster.close()
        let path = FileLog.segmentPath(directory, HelperPing.name, 1)
        var bytes = try #require(FileManager.default.contents(atPath: path).map(Array.init))
        var decoder = EnvelopeDecoder()
        let records = FileLog.records(in: bytes, decoder: &decoder)
        try #require(records.count == 20)
        // A data byte of the last record (its header and length still
        // check), or a byte of its header's index.
        let flipped = records[19].start + (part == "data" ? LogFormat.headerSize + 40 : 17)
        bytes[flipped] ^= 0xFF
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        // A new poster process appends after it.
        let post = try HelperProcess(["fpost", directory, "5", "2"])
        #expect(await post.waitForExit() == 0)
        let after = try #require(FileManager.default.contents(atPath: path).map(Array.init))
        #expect(after.count > bytes.count)
        #expect(Array(after[records[19].start..<records[19].end]) == Array(bytes[records[19].start..<records[19].end]))
        let (seen, missed) = try await readFromBeginning(directory, count: 24)
        #expect(seen.filter { $0.poster == 1 }.map(\.index) == Array(0..<19), "\(part)")
        #expect(seen.filter { $0.poster == 2 }.map(\.index) == Array(0..<5), "\(part)")
        #expect(missed == 1, "\(part)")
    }

    @Test(
        "a segment emptied under a long-lived watcher, as a rewrite by hand begins, then written again: nothing comes twice; emptied for good: the watcher goes on in the log a new poster starts"
    )
    func segmentEmptiedUnderWatcher() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try fileHub(directory, endpoint: "observer")
        defer { observer.close() }
        var deliveries = try observer.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded).makeAsyncIterator()
        let first = try HelperProcess(["fpost", directory, "3", "1"])
        #expect(await first.waitForExit() == 0)
        for index in 0..<3 { #expect(await deliveries.next()?.notification == HelperPing(poster: 1, index: index)) }
        let path = FileLog.segmentPath(directory, HelperPing.name, 1)
        let bytes = try #require(FileManager.default.contents(atPath: path))
        // `open(path, "wb")`: the file is empty, and the watcher looks at it so.
        #expect(truncate(path, 0) == 0)
        #expect(await waitUntil { observer.transport.statistics.shrunkSegments >= 1 })
        try bytes.write(to: URL(fileURLWithPath: path))
        let second = try HelperProcess(["fpost", directory, "2", "2"])
        #expect(await second.waitForExit() == 0)
        for index in 0..<2 {
            let delivered = await deliveries.next()
            #expect(delivered?.notification == HelperPing(poster: 2, index: index))
            #expect(delivered?.delivery.missed == 0)
        }
        // Emptied and left so: a new poster process steps over it into a new
        // log, where the watcher follows instead of waiting at the empty file.
        #expect(truncate(path, 0) == 0)
        let third = try HelperProcess(["fpost", directory, "1", "3"])
        #expect(await third.waitForExit() == 0)
        #expect(await deliveries.next()?.notification == HelperPing(poster: 3, index: 0))
    }

    @Test("a segment written back by hand in two writes under a long-lived watcher: nothing comes twice")
    func segmentWrittenBackInTwoWrites() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try fileHub(directory, endpoint: "observer")
        defer { observer.close() }
        var deliveries = try observer.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded).makeAsyncIterator()
        let first = try HelperProcess(["fpost", directory, "5", "1"])
        #expect(await first.waitForExit() == 0)
        for index in 0..<5 { #expect(await deliveries.next()?.notification == HelperPing(poster: 1, index: index)) }
        let path = FileLog.segmentPath(directory, HelperPing.name, 1)
        let bytes = try #require(FileManager.default.contents(atPath: path).map(Array.init))
        var decoder = EnvelopeDecoder()
        let records = FileLog.records(in: bytes, decoder: &decoder)
        try #require(records.count == 5)
        // The start mark and two records, seen so by the watcher; then the rest.
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.truncate(atOffset: 0)
        try handle.write(contentsOf: Data(bytes[..<records[1].end]))
        #expect(await waitUntil { observer.transport.statistics.shrunkSegments >= 1 })
        try handle.write(contentsOf: Data(bytes[records[1].end...]))
        try handle.close()
        let second = try HelperProcess(["fpost", directory, "1", "2"])
        #expect(await second.waitForExit() == 0)
        let next = await deliveries.next()
        #expect(next?.notification == HelperPing(poster: 2, index: 0))
        #expect(next?.delivery.missed == 0)
    }

    @Test(
        "a post made while a segment is emptied for a rewrite starts a new log beside it: a reader from the beginning goes on there, and a plain watcher that started before gets posts made after a cut"
    )
    func postDuringRewrite() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let first = try HelperProcess(["fpost", directory, "5", "1"])
        #expect(await first.waitForExit() == 0)
        // A watcher from the end, which reads nothing of segment 1.
        let watcher = try fileHub(directory, endpoint: "watcher")
        defer { watcher.close() }
        let watched = Collector<HelperPing>()
        let watching = try watcher.addObserver(.of(HelperPing.self)) { ping, _ in watched.append(ping) }
        defer { watching.cancel() }
        let path = FileLog.segmentPath(directory, HelperPing.name, 1)
        let bytes = try #require(FileManager.default.contents(atPath: path))
        #expect(truncate(path, 0) == 0)
        let during = try HelperProcess(["fpost", directory, "1", "2"])
        #expect(await during.waitForExit() == 0)
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.write(contentsOf: bytes)
        try handle.close()
        let after = try HelperProcess(["fpost", directory, "3", "3"])
        #expect(await after.waitForExit() == 0)
        let reader = try NotificationHub(
            endpoint: "reader", transport: FileSignalTransport(directory: directory, firstRead: .beginning))
        defer { reader.close() }
        let seen = Collector<HelperPing>()
        let token = try reader.addObserver(.of(HelperPing.self)) { ping, _ in seen.append(ping) }
        defer { token.cancel() }
        #expect(await seen.wait(forCount: 9, upTo: safetyNet))
        let new = [HelperPing(poster: 2, index: 0)] + (0..<3).map { HelperPing(poster: 3, index: $0) }
        #expect(seen.values == (0..<5).map { HelperPing(poster: 1, index: $0) } + new)
        #expect(await watched.wait(forCount: 4, upTo: safetyNet))
        #expect(watched.values == new)

        // A watcher started now, from the end, reads nothing of the newest
        // segment; cut for real under it (two records gone), then a new
        // poster process: its post reuses an index the watcher passed, and
        // still arrives.
        let cut = try HelperProcess(["fpost", directory, "2", "4"])
        #expect(await cut.waitForExit() == 0)
        let late = try fileHub(directory, endpoint: "late")
        defer { late.close() }
        let lateSeen = Collector<HelperPing>()
        let lateWatching = try late.addObserver(.of(HelperPing.self)) { ping, _ in lateSeen.append(ping) }
        defer { lateWatching.cancel() }
        let newest = try #require(FileLog.segments(directory, HelperPing.name).last)
        let newestPath = FileLog.segmentPath(directory, HelperPing.name, newest)
        var decoder = EnvelopeDecoder()
        let records = FileLog.records(
            in: try #require(FileManager.default.contents(atPath: newestPath).map(Array.init)), decoder: &decoder)
        #expect(truncate(newestPath, off_t(records[records.count - 2].start)) == 0)
        #expect(await waitUntil { late.transport.statistics.shrunkSegments >= 1 })
        let later = try HelperProcess(["fpost", directory, "1", "5"])
        #expect(await later.waitForExit() == 0)
        #expect(await lateSeen.wait(forCount: 1, upTo: safetyNet))
        #expect(lateSeen.values == [HelperPing(poster: 5, index: 0)])
    }

    @Test(
        "a flipped byte in a closed segment's rollover mark: a long-lived poster goes on in the newest segment, and readers cross to it, losing nothing"
    )
    func damagedRolloverMark() async throws {
        for flipped in [24, 10] {  // a data byte (the next segment's number), a header byte
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            let configuration = FileSignalConfiguration(segmentSize: 4096)
            let poster = try fileHub(directory, endpoint: "long", configuration: configuration)
            defer { poster.close() }
            for index in 0..<10 { try poster.post(HelperPing(poster: 1, index: index)) }
            // Another process rolls the log: segment 1 gets its rollover mark.
            let other = try HelperProcess(["fpost", directory, "40", "2", "4096"])
            #expect(await other.waitForExit() == 0)
            let path = FileLog.segmentPath(directory, HelperPing.name, 1)
            var bytes = try #require(FileManager.default.contents(atPath: path).map(Array.init))
            var mark: Int?
            _ = LogScanner.walk(bytes, base: 0, fileSize: bytes.count) { item in
                if case .rollover(_, _, let end) = item {
                    mark = end - LogFormat.headerSize - LogFormat.rolloverDataSize
                }
            }
            let start = try #require(mark)
            bytes[start + flipped] ^= 0x01
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            // The long-lived poster still holds segment 1.
            for index in 10..<15 { try poster.post(HelperPing(poster: 1, index: index)) }
            let after = try #require(FileManager.default.contents(atPath: path)).count
            #expect(after == bytes.count, "flipped byte \(flipped): the poster appended behind the mark")
            let (seen, missed) = try await readFromBeginning(directory, count: 55)
            #expect(seen.filter { $0.poster == 1 }.map(\.index) == Array(0..<15), "flipped byte \(flipped)")
            #expect(seen.filter { $0.poster == 2 }.map(\.index) == Array(0..<40), "flipped byte \(flipped)")
            #expect(missed == 0, "flipped byte \(flipped)")
        }
    }

    @Test(
        "a record overwritten by a fragment whose header checks and claims the next index: it is still counted missed, and the rest delivered"
    )
    func forgedDamagedHeader() async throws {
        for claim in [UInt64(6), 100, UInt64.max] {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            let poster = try fileHub(directory, endpoint: "poster")
            for index in 0..<10 { try poster.post(HelperPing(poster: 1, index: index)) }
            poster.close()
            let path = FileLog.segmentPath(directory, HelperPing.name, 1)
            var bytes = try #require(FileManager.default.contents(atPath: path).map(Array.init))
            var decoder = EnvelopeDecoder()
            let records = FileLog.records(in: bytes, decoder: &decoder)
            try #require(records.count == 10)
            let sixth = records[5]
            let length = UInt32(sixth.end - sixth.start - LogFormat.headerSize)
            bytes.replaceSubrange(
                sixth.start..<(sixth.start + LogFormat.headerSize),
                with: forgedHeader(type: 1, length: length, dataChecksum: 0xDEAD_BEEF, index: claim))
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            let more = try HelperProcess(["fpost", directory, "2", "2"])
            #expect(await more.waitForExit() == 0)
            let (seen, missed) = try await readFromBeginning(directory, count: 11)
            #expect(seen.filter { $0.poster == 1 }.map(\.index) == [0, 1, 2, 3, 4, 6, 7, 8, 9], "claim \(claim)")
            #expect(seen.filter { $0.poster == 2 }.map(\.index) == [0, 1], "claim \(claim)")
            #expect(missed == 1, "claim \(claim)")
        }
    }

    @Test(
        "a durable identity restarted while its segment is being written back: everything it handed over before comes again marked, written back before or after it started"
    )
    func durableRestartDuringRewrite() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let first = try HelperProcess(["fpost", directory, "5", "1"])
        #expect(await first.waitForExit() == 0)
        await handleDurably(directory, identity: "c1", count: 5)
        let path = FileLog.segmentPath(directory, HelperPing.name, 1)
        let bytes = try #require(FileManager.default.contents(atPath: path).map(Array.init))
        var decoder = EnvelopeDecoder()
        let records = FileLog.records(in: bytes, decoder: &decoder)
        // Being written back: two records there when the identity starts again.
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.truncate(atOffset: 0)
        try handle.write(contentsOf: Data(bytes[..<records[1].end]))
        let again = try NotificationHub(
            endpoint: "c1", transport: FileSignalTransport(directory: directory, identity: "c1"))
        defer { again.close() }
        var deliveries = try again.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded).makeAsyncIterator()
        for index in 0..<2 {
            let delivered = await deliveries.next()
            #expect(delivered?.notification == HelperPing(poster: 1, index: index))
            #expect(delivered?.delivery.isRedelivery == true)
        }
        try handle.write(contentsOf: Data(bytes[records[1].end...]))
        try handle.close()
        for index in 2..<5 {
            let delivered = await deliveries.next()
            #expect(delivered?.notification == HelperPing(poster: 1, index: index))
            #expect(delivered?.delivery.isRedelivery == true, "\(index)")
        }
    }

    @Test(
        "records a durable identity handled, damaged afterwards: its next run counts none of them missed and gets what is new"
    )
    func damagedBehindCursor() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let first = try HelperProcess(["fpost", directory, "3", "9"])
        #expect(await first.waitForExit() == 0)
        await handleDurably(directory, identity: "c1", count: 3)
        let path = FileLog.segmentPath(directory, HelperPing.name, 1)
        var bytes = try #require(FileManager.default.contents(atPath: path).map(Array.init))
        // What the first run committed (a close may save the last commit
        // or not): the records from there on were not handled, and once
        // damaged they are lost, and counted.
        let saved = try #require(
            FileManager.default.contents(
                atPath: FileCursor.path(root: directory, identity: "c1", name: HelperPing.name)))
        let committed = try #require(FileCursor.parse(Array(saved))?.committed.index)
        var decoder = EnvelopeDecoder()
        for record in FileLog.records(in: bytes, decoder: &decoder) {
            bytes[(record.start + record.end) / 2] ^= 0xFF
        }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let more = try HelperProcess(["fpost", directory, "5", "2"])
        #expect(await more.waitForExit() == 0)
        let again = try NotificationHub(
            endpoint: "c1", transport: FileSignalTransport(directory: directory, identity: "c1"))
        defer { again.close() }
        let deliveries = try again.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
        var seen: [HelperPing] = []
        var missed = 0
        for await delivered in deliveries {
            seen.append(delivered.notification)
            missed += delivered.delivery.missed
            if seen.count == 5 { break }
        }
        #expect(seen == (0..<5).map { HelperPing(poster: 2, index: $0) })
        #expect(missed == 3 - Int(committed))
    }

    @Test(
        "every segment removed by hand, the lock file kept: the next post starts a new log, which a durable identity reads from its start, told its log was started again"
    )
    func everySegmentRemoved() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let arguments = [
            "watch", HelperPing.name.rawValue, "--transport", "file", "--dir", directory, "--cursor", "aud",
            "--from", "beginning", "--json",
        ]
        let old = try fileHub(directory, endpoint: "old")
        for index in 0..<5 { try old.post(HelperPing(poster: 1, index: index)) }
        old.close()
        let first = try HelperProcess(arguments, executable: HelperProcess.tnotify)
        await first.lines.wait(forCount: 6)
        first.signal(SIGTERM)
        #expect(await first.waitForExit() == 0)
        // 30 the identity never reads, then every segment is removed.
        let middle = try fileHub(directory, endpoint: "old")
        for index in 5..<35 { try middle.post(HelperPing(poster: 1, index: index)) }
        middle.close()
        let folder = FileLog.nameDirectory(directory, HelperPing.name)
        let oldLog = try #require(FileLog.logIdentifier(directory, HelperPing.name, 1, sharing: .ownerOnly))
        for file in try FileManager.default.contentsOfDirectory(atPath: folder) where file.hasSuffix(".log") {
            try FileManager.default.removeItem(atPath: folder + "/" + file)
        }
        let renewed = try HelperProcess(["fpost", directory, "3", "2"])
        #expect(await renewed.waitForExit() == 0)
        // How many the removed segments held cannot be known: not the old
        // log going on with a false count (0 missed of 30), but a new log.
        let newest = try #require(FileLog.segments(directory, HelperPing.name).last)
        let newLog = try #require(FileLog.logIdentifier(directory, HelperPing.name, newest, sharing: .ownerOnly))
        #expect(newLog != oldLog)
        let second = try fileHub(directory, endpoint: "aud", identity: "aud")
        defer { second.close() }
        let deliveries = try second.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
        var seen: [HelperPing] = []
        for await delivered in deliveries {
            #expect(!delivered.delivery.isRedelivery)
            seen.append(delivered.notification)
            if seen.count == 3 { break }
        }
        #expect(seen == (0..<3).map { HelperPing(poster: 2, index: $0) })
        // The identity is told its log was started again under it.
        #expect(second.transport.statistics.vanishedSegments >= 1)
        let list = try await tnotify(["ls", "--transport", "file", "--dir", directory])
        #expect(!list.output.contains { $0.contains("unusable") }, "\(list.output)")
    }

    @Test("a crafted 4 MiB segment of fake headers: a post returns in under 50 ms, and the newest record is found")
    func craftedSegmentCostsLinearTime() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let logDirectory = FileLog.nameDirectory(directory, HelperPing.name)
        let setup = try fileHub(directory, endpoint: "setup")
        setup.close()
        try FileManager.default.createDirectory(
            atPath: logDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        // A header every 32 bytes whose checksum passes, each claiming the
        // rest of its block, whose data never checks; then one real record.
        var segment = SegmentBuilder(firstIndex: 0)
        var bytes = segment.bytes
        while bytes.count < 4 * 1024 * 1024 {
            let claim = LogFormat.blockEnd(of: bytes.count) - bytes.count - LogFormat.headerSize
            var fake = forgedHeader(type: 1, length: UInt32(max(1, claim)), dataChecksum: 0xDEAD_BEEF, index: 0)
            fake += [UInt8](repeating: 0x41, count: 8)
            if claim < 32 { fake = [UInt8](repeating: 0, count: LogFormat.blockEnd(of: bytes.count) - bytes.count) }
            bytes += fake
        }
        segment.set(bytes: bytes, nextIndex: 0)
        let envelope = try NotificationEnvelope.encode(
            name: HelperPing.name,
            sender: NotificationSender(processID: 1, userID: getuid(), endpoint: "crafted", instance: 1),
            sequence: 1, timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
        ) { try HelperPing(poster: 9, index: 0).encodePayload(into: &$0) }
        segment.append(envelope: Array(envelope.envelope))
        let path = FileLog.segmentPath(directory, HelperPing.name, 1)
        #expect(
            FileManager.default.createFile(
                atPath: path, contents: Data(segment.bytes), attributes: [.posixPermissions: 0o600]))

        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        let clock = ContinuousClock()
        let posting = try clock.measure { try poster.post(HelperPing(poster: 1, index: 0)) }
        #expect(posting < .milliseconds(50), "one post took \(posting)")
        // The newest records, found by reading the whole crafted segment.
        let reader = try NotificationHub(
            endpoint: "reader", transport: FileSignalTransport(directory: directory, firstRead: .newest(2)))
        defer { reader.close() }
        let started = clock.now
        let deliveries = try reader.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
        var seen: [HelperPing] = []
        for await delivered in deliveries {
            seen.append(delivered.notification)
            if seen.count == 2 { break }
        }
        #expect(seen == [HelperPing(poster: 9, index: 0), HelperPing(poster: 1, index: 0)])
        #expect(clock.now - started < .seconds(5), "the newest two took \(clock.now - started)")
    }

    @Test("a reader of 10,000 names: what one delivery costs does not grow with the names observed")
    func costIndependentOfNames() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try HelperProcess(["fobserve-names", directory, "10000", "21"])
        _ = await observer.waitForLine(startingWith: "ready")
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        let name = try NotificationName(validating: "test.many.7")
        var calls: [Int] = []
        for received in 1...21 {
            try poster.post(RawNotification(), as: name)
            let line = await observer.waitForLine(startingWith: "got \(received) ")
            calls.append(try #require(line.split(separator: "=").last.flatMap { Int($0) }))
        }
        #expect(await observer.waitForExit() == 0)
        // A wake-up reads the one log that changed: a few dozen system calls
        // (the poll once a second reads them all, so not every one is quiet).
        let median = calls.dropFirst().sorted()[10]
        #expect(median < 200, "system calls per delivery: \(calls)")
    }
}

/// An integer field of a `tnotify watch --json` line.
private func jsonField(_ line: String, _ field: String) -> Int? {
    guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
    return object[field] as? Int
}

/// Runs durable identity `identity` from the log's beginning until it has
/// handled `count` notifications, then closes it (its cursor saved).
private func handleDurably(_ directory: String, identity: String, count: Int) async {
    guard
        let durable = try? NotificationHub(
            endpoint: identity,
            transport: FileSignalTransport(directory: directory, identity: identity, firstRead: .beginning)),
        let deliveries = try? durable.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
    else {
        Issue.record("could not start durable identity \(identity)")
        return
    }
    var handled = 0
    for await _ in deliveries {
        handled += 1
        if handled == count { break }
    }
    // Its cursor is read next: what the close still saves must be on disk
    // first, as `closed()` promises, or a later save could move it on.
    durable.close()
    await durable.closed()
}

/// Reads the log of `HelperPing` in `directory` from its beginning, in this
/// process, until `count` notifications arrived: what arrived, in order,
/// and the sum of the missed counts the deliveries carried.
private func readFromBeginning(_ directory: String, count: Int) async throws -> (seen: [HelperPing], missed: Int) {
    let reader = try NotificationHub(
        endpoint: "reader", transport: FileSignalTransport(directory: directory, firstRead: .beginning))
    defer { reader.close() }
    let deliveries = try reader.deliveries(.of(HelperPing.self), bufferingPolicy: .unbounded)
    var seen: [HelperPing] = []
    var missed = 0
    for await delivered in deliveries {
        seen.append(delivered.notification)
        missed += delivered.delivery.missed
        if seen.count == count { break }
    }
    return (seen, missed)
}
