import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

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

/// Replaces `path` with a file of mode 0600 holding `text`.
private func writeFile(_ path: String, _ text: String) throws {
    _ = unlink(path)
    let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
    try #require(descriptor >= 0)
    defer { close(descriptor) }
    let bytes = Array(text.utf8)
    try #require(write(descriptor, bytes, bytes.count) == bytes.count)
}

/// The next `count` deliveries of `sequence`, as (index, isRedelivery).
private func take(
    _ count: Int, from iterator: inout DeliverySequence<Ping>.AsyncIterator
) async -> [(index: Int, redelivery: Bool)] {
    var seen: [(Int, Bool)] = []
    while seen.count < count, let delivered = await iterator.next() {
        seen.append((delivered.notification.index, delivered.delivery.isRedelivery))
    }
    return seen
}

@Suite("File transport: nothing in the directory hangs or silences a reader", .serialized, .timeLimit(.minutes(10)))
struct HostileDirectoryTests {
    private func cursorPath(_ directory: String, _ identity: String) -> String {
        directory + "/cursors/" + identity + "/" + Ping.name.rawValue
    }

    /// A directory with a durable identity `c` whose cursor is at the start
    /// of a log holding `waiting` notifications, not yet handled.
    private func directoryWithBacklog(_ waiting: Int) throws -> String {
        try TypedNotificationsTests.directoryWithBacklog(identity: "c", (0..<waiting).map { Ping(index: $0) })
    }

    @Test(
        "logs/ or cursors/ a link: gc exits 77 naming it, and deletes nothing at its target",
        arguments: ["logs", "cursors"])
    func gcRefusesALinkedFolder(folder: String) async throws {
        let directory = try directoryWithBacklog(3)
        defer { removeDirectory(directory) }
        let outside = try makeTemporaryDirectory()
        defer { removeDirectory(outside) }
        #expect(rename(directory + "/" + folder, outside + "/" + folder) == 0)
        try FileManager.default.createSymbolicLink(
            atPath: directory + "/" + folder, withDestinationPath: outside + "/" + folder)
        let before = try FileManager.default.subpathsOfDirectory(atPath: outside).sorted()
        let gc = try await tnotify(["gc", "--transport", "file", "--dir", directory])
        #expect(gc.status == 77, "\(gc)")
        #expect(gc.errors.joined().contains(directory + "/" + folder + " is not a directory"), "\(gc)")
        #expect(try FileManager.default.subpathsOfDirectory(atPath: outside).sorted() == before)
    }

    @Test("a FIFO planted as a cursor: ls, gc and a durable watcher go on; the watcher reads from the oldest, marked")
    func fifoCursor() async throws {
        let directory = try directoryWithBacklog(3)
        defer { removeDirectory(directory) }
        let cursor = cursorPath(directory, "c")
        _ = unlink(cursor)
        try #require(mkfifo(cursor, 0o600) == 0)

        let list = try await tnotify(["ls", "--transport", "file", "--dir", directory])
        #expect(list.status == 0)
        #expect(list.output.contains { $0.contains("cursor c: unusable") && $0.contains("FIFO") })
        #expect(try await tnotify(["gc", "--transport", "file", "--dir", directory]).status == 0)

        let hub = try fileHub(directory, endpoint: "durable", identity: "c")
        var iterator = try hub.deliveries(.of(Ping.self)).makeAsyncIterator()
        let seen = await take(3, from: &iterator)
        #expect(seen.map(\.index) == [0, 1, 2])
        #expect(seen.allSatisfy { $0.redelivery })
        #expect(hub.transport.statistics.invalidCursors == 1)
        #expect(hub.transport.cursorProblem(for: Ping.name)?.contains("FIFO") == true)
        hub.close()
        // The FIFO was replaced by a real cursor.
        var info = stat()
        #expect(lstat(cursor, &info) == 0 && info.st_mode & S_IFMT == S_IFREG)
    }

    @Test("a FIFO planted as a segment is never opened: posts go to the next segment, a watcher reads them and closes")
    func fifoSegment() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watcher = try fileHub(directory, endpoint: "watcher")
        let logDirectory = directory + "/logs/" + Ping.name.rawValue
        try FileManager.default.createDirectory(
            atPath: logDirectory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        try #require(mkfifo(logDirectory + "/00000000000000000001.log", 0o600) == 0)
        let deliveries = try watcher.deliveries(.of(Ping.self))
        let poster = try fileHub(directory, endpoint: "poster")
        for index in 0..<3 { try poster.post(Ping(index: index)) }
        var iterator = deliveries.makeAsyncIterator()
        #expect(await take(3, from: &iterator).map(\.index) == [0, 1, 2])
        #expect(FileManager.default.fileExists(atPath: logDirectory + "/00000000000000000002.log"))
        #expect(watcher.transport.statistics.refusedFiles >= 1)
        // Closing does not wait on a thread stuck in open(2): none is.
        watcher.close()
        poster.close()
        let list = try await tnotify(["ls", "--transport", "file", "--dir", directory])
        #expect(list.status == 0)
    }

    @Test("a segment with mode 0666 is refused by posters (a typed error naming it) and never read")
    func openSegmentMode() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        try poster.post(Ping(index: 0))
        poster.close()
        let segment = directory + "/logs/" + Ping.name.rawValue + "/00000000000000000001.log"
        try #require(chmod(segment, 0o666) == 0)
        let again = try fileHub(directory, endpoint: "poster")
        #expect {
            try again.post(Ping(index: 1))
        } throws: { error in
            guard let error = error as? TypedNotificationError else { return false }
            return error.code == .insecureDirectory && error.message.contains(segment) && error.message.contains("666")
        }
        again.close()
        await again.closed()
        // A durable reader whose cursor is at its start refuses it too:
        // nothing from it is delivered.
        try FileManager.default.createDirectory(
            atPath: directory + "/cursors/r", withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        try writeFile(cursorPath(directory, "r"), "1 0\n")
        let watcher = try fileHub(directory, endpoint: "watcher", identity: "r")
        let deliveries = try watcher.deliveries(.of(Ping.self))
        try await waitUntil("the reader looked at the segment", changesIn: directory + "/cursors/r") {
            watcher.transport.statistics.refusedFiles >= 1
        }
        #expect(watcher.transport.statistics.delivered == 0)
        #expect(watcher.transport.statistics.invalidCursors == 0)
        watcher.close()
        withExtendedLifetime(deliveries) {}
    }

    @Test(
        "a corrupt cursor, and one past the end: the watcher says so and reads from the oldest, marked, then new posts")
    func unusableCursors() async throws {
        for content in ["garbage\n", "999 999999999\n"] {
            let directory = try directoryWithBacklog(3)
            defer { removeDirectory(directory) }
            try writeFile(cursorPath(directory, "c"), content)
            let hub = try fileHub(directory, endpoint: "durable", identity: "c")
            var iterator = try hub.deliveries(.of(Ping.self)).makeAsyncIterator()
            let backlog = await take(3, from: &iterator)
            #expect(backlog.map(\.index) == [0, 1, 2], "\(content)")
            #expect(backlog.allSatisfy { $0.redelivery })
            #expect(hub.transport.statistics.invalidCursors == 1)
            #expect(hub.transport.cursorProblem(for: Ping.name) != nil)
            // Not deaf: a new post arrives, not marked.
            let poster = try fileHub(directory, endpoint: "poster")
            try poster.post(Ping(index: 3))
            let next = await take(1, from: &iterator)
            #expect(next.map(\.index) == [3])
            #expect(next.first?.redelivery == false)
            poster.close()
            hub.close()
        }
    }

    @Test("tnotify watch --cursor with a garbage cursor warns and prints the backlog marked as redeliveries")
    func tnotifyWarnsAboutCursor() async throws {
        let directory = try directoryWithBacklog(2)
        defer { removeDirectory(directory) }
        try writeFile(cursorPath(directory, "c"), "garbage\n")
        let watcher = try HelperProcess(
            ["watch", Ping.name.rawValue, "--transport", "file", "--dir", directory, "--cursor", "c", "--json"],
            executable: HelperProcess.tnotify)
        await watcher.lines.wait(forCount: 3)
        let lines = watcher.lines.values.dropFirst()
        #expect(lines.count == 2)
        #expect(lines.allSatisfy { $0.contains("\"redelivery\":true") })
        #expect(watcher.errors.values.contains { $0.contains("could not be used") })
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)
    }

    @Test("a segment truncated under a reader and written again: the reader misses none of the new records")
    func shrunkSegment() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watcher = try fileHub(directory, endpoint: "watcher")
        var iterator = try watcher.deliveries(.of(Ping.self)).makeAsyncIterator()
        let poster = try fileHub(directory, endpoint: "poster")
        for index in 1...10 { try poster.post(Ping(index: index)) }
        #expect(await take(10, from: &iterator).map(\.index) == Array(1...10))
        let segment = directory + "/logs/" + Ping.name.rawValue + "/00000000000000000001.log"
        try #require(truncate(segment, 700) == 0)
        for index in 11...20 { try poster.post(Ping(index: index)) }
        #expect(await take(10, from: &iterator).map(\.index) == Array(11...20))
        #expect(watcher.transport.statistics.shrunkSegments == 1)
        poster.close()
        watcher.close()
        await watcher.closed()
    }

    @Test("a log removed while watched and posted to: the same poster starts it again and the watcher reads on")
    func removedLog() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watcher = try fileHub(directory, endpoint: "watcher")
        var iterator = try watcher.deliveries(.of(Ping.self)).makeAsyncIterator()
        let poster = try fileHub(directory, endpoint: "poster")
        for index in 1...3 { try poster.post(Ping(index: index)) }
        #expect(await take(3, from: &iterator).map(\.index) == [1, 2, 3])
        removeDirectory(directory + "/logs/" + Ping.name.rawValue)
        for index in 4...6 { try poster.post(Ping(index: index)) }
        #expect(await take(3, from: &iterator).map(\.index) == [4, 5, 6])
        #expect(watcher.transport.statistics.vanishedSegments == 1)
        poster.close()
        watcher.close()
        await watcher.closed()
    }

    @Test(
        "logs/ removed as fast as a process can for two seconds under a watcher: it lives through it and reads the posts after"
    )
    func burstOfRemovals() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watcher = try fileHub(directory, endpoint: "watcher")
        defer { watcher.close() }
        var iterator = try watcher.deliveries(.of(Ping.self)).makeAsyncIterator()
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        try poster.post(Ping(index: 1))
        #expect(await take(1, from: &iterator).map(\.index) == [1])
        // Each removal wakes a look, which finds logs/ missing or its
        // watches gone: many looks in a row, microseconds apart. The poster
        // posts all along, and each post makes the log's folders again; a
        // post whose 64 tries all lose to the remover (a remover with a
        // core to itself wins that often) throws, as *Delivery guarantees*
        // says a post may ("lands where readers find it or throws"); what a
        // removal took is gone with the log.
        let remover = try HelperProcess(["remove-loop", directory, "2000", "logs", "cursors"])
        let removing = Locked(true)
        async let removed: Int32 = {
            let status = await remover.waitForExit()
            removing.withLock { $0 = false }
            return status
        }()
        var posted = 0
        var refused: [any Error] = []
        while removing.withLock({ $0 }) {
            do {
                try poster.post(Ping(index: 100 + posted))
                posted += 1
                if posted % 50 == 0 {
                    // A transport made meanwhile makes logs/ and cursors/ too.
                    let newcomer = try fileHub(directory, endpoint: "newcomer")
                    try newcomer.post(Ping(index: 100 + posted))
                    newcomer.close()
                }
            } catch {
                // Only a folder that was gone again at every try.
                let typed = error as? TypedNotificationError
                #expect(typed?.code == .transportFailure && (typed?.cause as? Errno) == .noSuchFile, "\(error)")
                refused.append(error)
            }
            await Task.yield()
        }
        #expect(await removed == 0)
        for index in 2...4 { try poster.post(Ping(index: index)) }
        var after: [Int] = []
        while after.suffix(3) != [2, 3, 4], let next = await take(1, from: &iterator).first {
            after.append(next.index)
        }
        #expect(after.suffix(3) == [2, 3, 4], "posted \(posted) during the removals, \(refused.count) refused")
        #expect(watcher.failure == nil)
    }

    @Test(
        "rm -rf DIR/cursors under a running durable watcher: its next save makes its cursor again, and its next run resumes there"
    )
    func cursorsRemovedUnderWatcher() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let arguments = [
            "watch", Ping.name.rawValue, "--transport", "file", "--dir", directory, "--cursor", "c", "--json",
        ]
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        let watcher = try HelperProcess(arguments, executable: HelperProcess.tnotify)
        await watcher.waitForLine(startingWith: "watching")
        try poster.post(Ping(index: 1))
        #expect(await watcher.lines.wait(forCount: 2, upTo: safetyNet))
        try #require(await waitUntil { access(cursorPath(directory, "c"), F_OK) == 0 })
        let remover = try HelperProcess(["-rf", directory + "/cursors"], executable: "/bin/rm")
        #expect(await remover.waitForExit() == 0)
        try poster.post(Ping(index: 2))
        #expect(await watcher.lines.wait(forCount: 3, upTo: safetyNet))
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)
        // Posted while it is away: a first run (no cursor) would start at
        // the end and never see it.
        try poster.post(Ping(index: 3))
        let again = try HelperProcess(arguments, executable: HelperProcess.tnotify)
        await again.waitForLine(startingWith: "watching")
        #expect(await again.lines.wait(forCount: 2, upTo: safetyNet))
        let printed = again.lines.values.dropFirst()
        #expect(printed.count == 1 && printed.allSatisfy { $0.contains("\"index\":3") }, "\(printed)")
        again.signal(SIGTERM)
        #expect(await again.waitForExit() == 0)
    }

    /// What another process does to the shared directory under a watcher.
    enum DirectoryChange: String, CaseIterable, CustomTestStringConvertible {
        case removed = "rm -rf"
        case moved = "mv"
        case parentMoved = "mv of the directory above"
        /// The hub was given a path through a symbolic link; the directory
        /// the link leads to is moved.
        case linkedParentMoved = "mv of the directory a symbolic link above leads to"
        /// The path goes through a link to a link; the second is made to
        /// lead elsewhere (`ln -sfn`).
        case chainedLinkRepointed = "ln -sfn of the second link of two on the path"
        /// A tmpfs mounted over the directory above (Linux, as root, as CI
        /// runs).
        case mountedOver = "mount over the directory above"

        var testDescription: String { rawValue }

        static var playable: [DirectoryChange] {
            #if os(Linux)
                allCases.filter { $0 != .mountedOver || geteuid() == 0 }
            #else
                allCases.filter { $0 != .mountedOver }
            #endif
        }
    }

    @Test(
        "the shared directory removed or moved away, or a directory above it moved, by another process while watching: every observation ends and the hub says why",
        arguments: ["file", "socket"], DirectoryChange.playable)
    func directoryGone(transport: String, change: DirectoryChange) async throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        #expect(mkdir(base + "/parent", 0o700) == 0)
        var directory = base + "/parent/shared"
        #expect(mkdir(directory, 0o700) == 0)
        if change == .linkedParentMoved {
            #expect(symlink(base + "/parent", base + "/link") == 0)
            directory = base + "/link/shared"
        } else if change == .chainedLinkRepointed {
            #expect(symlink(base + "/second", base + "/first") == 0)
            #expect(symlink(base + "/parent", base + "/second") == 0)
            #expect(mkdir(base + "/elsewhere", 0o700) == 0)
            directory = base + "/first/shared"
        }
        defer {
            #if os(Linux)
                if change == .mountedOver { _ = umount(base + "/parent") }
            #endif
        }
        /// Changes the directory under a watching hub; returns the hub's
        /// failure once its observation has ended.
        func changeUnder<T: NotificationTransport>(_ hub: NotificationHub<T>) async throws -> TypedNotificationError? {
            let deliveries = try hub.deliveries(.of(Ping.self))
            let other: HelperProcess
            switch change {
            case .removed: other = try HelperProcess(["-rf", directory], executable: "/bin/rm")
            case .moved: other = try HelperProcess([directory, directory + ".moved"], executable: "/bin/mv")
            case .parentMoved, .linkedParentMoved:
                other = try HelperProcess([base + "/parent", base + "/moved"], executable: "/bin/mv")
            case .chainedLinkRepointed:
                other = try HelperProcess(["-sfn", base + "/elsewhere", base + "/second"], executable: "/bin/ln")
            case .mountedOver:
                other = try HelperProcess(["-t", "tmpfs", "none", base + "/parent"], executable: "/bin/mount")
            }
            #expect(await other.waitForExit() == 0)
            for await _ in deliveries {}
            return hub.failure
        }
        let failure =
            transport == "file"
            ? try await changeUnder(fileHub(directory, endpoint: "watcher"))
            : try await changeUnder(
                NotificationHub(endpoint: "watcher", transport: SocketTransport(directory: directory)))
        #expect(failure?.code == .transportFailure)
        #expect(failure?.message.contains("removed") == true, "\(String(describing: failure))")
    }

    #if os(Linux)
        @Test(
            "the directory removed long after its logs/ went, with no timer left to look: the watcher, which held a segment there, still ends and says why"
        )
        func directoryRemovedLongAfterLogs() async throws {
            let base = try makeTemporaryDirectory()
            defer { removeDirectory(base) }
            let directory = base + "/shared"
            var configuration = FileSignalConfiguration()
            configuration.looksWhileLogsMissing = 0
            let hub = try fileHub(directory, endpoint: "watcher", configuration: configuration)
            defer { hub.close() }
            let deliveries = try hub.deliveries(.of(HelperPing.self))
            var iterator = deliveries.makeAsyncIterator()
            let poster = try HelperProcess(["fpost", directory, "1", "1"])
            #expect(await poster.waitForExit() == 0)
            #expect(await iterator.next()?.notification == HelperPing(poster: 1, index: 0))
            let logs = try HelperProcess(["-rf", directory + "/logs"], executable: "/bin/rm")
            #expect(await logs.waitForExit() == 0)
            // The adversary waits as long as it likes: here, until the watcher
            // let go of the removed segment. Held, it would hold the directory,
            // whose removal inotify then reports only once it is closed.
            try #require(
                await waitUntil {
                    (try? descriptors(under: directory).filter { $0.hasSuffix(" (deleted)") }.isEmpty) == true
                })
            let removal = try HelperProcess(["-rf", directory], executable: "/bin/rm")
            #expect(await removal.waitForExit() == 0)
            while await iterator.next() != nil {}
            #expect(hub.failure?.code == .transportFailure)
            #expect(hub.failure?.message.contains("removed") == true, "\(String(describing: hub.failure))")
        }
    #endif

    @Test("tnotify watch ends with an error when its directory is removed", arguments: ["file", "socket"])
    func tnotifyNoticesRemovedDirectory(transport: String) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watcher = try HelperProcess(
            ["watch", Ping.name.rawValue, "--transport", transport, "--dir", directory],
            executable: HelperProcess.tnotify)
        await watcher.waitForLine(startingWith: "watching")
        removeDirectory(directory)
        #expect(await watcher.waitForExit() == 69)
        #expect(watcher.errors.values.contains { $0.contains("removed") })
    }

    @Test(
        "tnotify watch ends with an error when a directory above its own is renamed, or a link on its path is made to lead elsewhere",
        arguments: ["renamed", "relinked"])
    func tnotifyNoticesPathLeavingIt(how: String) async throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        // `dir` itself is made by the watcher, owner-only.
        for path in ["/a/b", "/other/b"] {
            try FileManager.default.createDirectory(atPath: base + path, withIntermediateDirectories: true)
        }
        #expect(symlink(base + "/a", base + "/link") == 0)
        let directory = how == "renamed" ? base + "/a/b/dir" : base + "/link/b/dir"
        let watcher = try HelperProcess(
            ["watch", Ping.name.rawValue, "--transport", "file", "--dir", directory],
            executable: HelperProcess.tnotify)
        await watcher.waitForLine(startingWith: "watching")
        if how == "renamed" {
            // Nothing happens to the directory itself: it is where it was,
            // under another name, and a poster using the path makes a new one.
            #expect(rename(base + "/a", base + "/moved") == 0)
        } else {
            // `ln -sfn`: a new link renamed over the old one.
            #expect(symlink(base + "/other", base + "/link.new") == 0)
            #expect(rename(base + "/link.new", base + "/link") == 0)
        }
        // Without a watch above the directory, no event came, and the
        // watcher listened on where the path no longer led, for good.
        #expect(await watcher.waitForExit() == 69)
        #expect(watcher.errors.values.contains { $0.contains("removed or replaced") })
    }
}
