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

/// Watches that record which of them was called, and a sentinel: the
/// watcher's thread reads changes in the order they happened, so once the
/// sentinel's change was reported, every change made before it was too.
private final class Watching: Sendable {
    let called = Collector<String>()
    private let sentinelPath: String
    private let sentinel: PathWatch
    private let broadcastsBefore: Int

    init(in directory: String) throws {
        broadcastsBefore = try PathWatcher.shared().broadcasts
        sentinelPath = directory + "/sentinel"
        #expect(FileManager.default.createFile(atPath: sentinelPath, contents: Data()))
        let called = called
        sentinel = try PathWatcher.shared().watch(sentinelPath, for: .attributes) { called.append("sentinel") }
    }

    func watch(_ path: String, for events: PathEvents, as label: String) throws -> PathWatch {
        let called = called
        return try PathWatcher.shared().watch(path, for: events) { called.append(label) }
    }

    /// What was called before now: waits for the sentinel's change to be
    /// reported, and leaves the sentinel out.
    func settled() async -> [String] {
        // Twice: the callbacks of one read are called one after another,
        // so the sentinel's may come before others of its read; the second
        // change is read after that read's callbacks all ran.
        for _ in 0..<2 {
            let before = called.values.filter { $0 == "sentinel" }.count
            #expect(chmod(sentinelPath, before % 2 == 0 ? 0o600 : 0o644) == 0)
            await wait(for: "sentinel", count: before + 1)
        }
        return called.values.filter { $0 != "sentinel" }
    }

    /// Whether every watch was called at once since this began (another
    /// test's mount, an overflow): calls that were not asked for then came.
    var sawBroadcast: Bool {
        (try? PathWatcher.shared().broadcasts) != broadcastsBefore
    }

    /// Checks that the watches called are exactly `expected`, or at least
    /// those after a broadcast.
    func expectCalled(_ called: [String], _ expected: Set<String>, sourceLocation: SourceLocation = #_sourceLocation) {
        if sawBroadcast {
            #expect(Set(called).isSuperset(of: expected), "\(called)", sourceLocation: sourceLocation)
        } else {
            #expect(Set(called) == expected, "\(called)", sourceLocation: sourceLocation)
        }
    }

    /// Waits until `label` was called `count` times in all.
    func wait(for label: String, count: Int = 1) async {
        while true {
            // One snapshot: a call after it makes the wait below return.
            let values = called.values
            if values.filter({ $0 == label }).count >= count { return }
            await called.wait(forCount: values.count + 1)
        }
    }
}

@Suite("Path watcher: one thread per process, called only by a change")
struct PathWatcherTests {
    @Test("a hard link made or removed by another process changes a file's link count, and its watch is called")
    func linkCount() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watching = try Watching(in: directory)
        let file = directory + "/registration"
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        let watch = try watching.watch(file, for: .attributes, as: "file")
        watching.expectCalled(await watching.settled(), [])
        let linker = try HelperProcess([file, directory + "/entry"], executable: "/bin/ln")
        #expect(await linker.waitForExit() == 0)
        await watching.wait(for: "file", count: 1)
        let remover = try HelperProcess([directory + "/entry"], executable: "/bin/rm")
        #expect(await remover.waitForExit() == 0)
        await watching.wait(for: "file", count: 2)
        withExtendedLifetime(watch) {}
    }

    @Test("a directory moved or removed, or one above it moved: the watch of it is called; its entries do not call it")
    func movedOrRemoved() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watching = try Watching(in: directory)
        for path in ["/a", "/a/b", "/a/b/c"] { #expect(mkdir(directory + path, 0o700) == 0) }
        let above = try watching.watch(directory + "/a", for: .removedOrMoved, as: "above")
        let itself = try watching.watch(directory + "/a/b", for: .removedOrMoved, as: "itself")
        let entries = try watching.watch(directory + "/a/b", for: .entries, as: "entries")
        // A change may be reported more than once (another test's mount or
        // an overflowed queue calls every watch): what counts is which were
        // called.
        #expect(FileManager.default.createFile(atPath: directory + "/a/b/file", contents: Data()))
        watching.expectCalled(await watching.settled(), ["entries"])
        #expect(rename(directory + "/a/b", directory + "/a/moved") == 0)
        watching.expectCalled(await watching.settled(), ["entries", "itself"])
        // A new directory at the old path has a watch of its own.
        #expect(mkdir(directory + "/a/b", 0o700) == 0)
        let again = try watching.watch(directory + "/a/b", for: .removedOrMoved, as: "again")
        #expect(rmdir(directory + "/a/b") == 0)
        await watching.wait(for: "again")
        #expect(rename(directory + "/a", directory + "/gone") == 0)
        watching.expectCalled(await watching.settled(), ["entries", "itself", "above", "again"])
        // The watch follows the directory it was made on, wherever it went.
        removeDirectory(directory + "/gone/moved")
        await watching.wait(for: "itself", count: 2)
        withExtendedLifetime((above, itself, entries, again)) {}
    }

    @Test("a file with hard links: renaming one of its links reports a move, and the watch still hears the others")
    func renamedLink() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watching = try Watching(in: directory)
        let file = directory + "/registration"
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        #expect(link(file, directory + "/staged") == 0)
        let watch = try watching.watch(file, for: [.removedOrMoved, .attributes], as: "file")
        #expect(rename(directory + "/staged", directory + "/entry") == 0)
        await watching.wait(for: "file", count: 1)
        let count = await watching.settled().count
        #expect(unlink(directory + "/entry") == 0)
        await watching.wait(for: "file", count: count + 1)
        withExtendedLifetime(watch) {}
    }

    @Test("a cancelled watch is not called again; another watch of the same file still is, and a new one after it")
    func cancelled() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watching = try Watching(in: directory)
        let file = directory + "/file"
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        let first = try watching.watch(file, for: .attributes, as: "first")
        let second = try watching.watch(file, for: .attributes, as: "second")
        first.cancel()
        #expect(chmod(file, 0o644) == 0)
        #expect(Set(await watching.settled()) == ["second"])
        second.cancel()
        // The file's last watch was just removed: a new one is the kernel's
        // new watch, never the one being removed. Over and over, in a race
        // with the removal.
        for round in 0..<200 {
            let again = try watching.watch(file, for: .attributes, as: "again \(round)")
            #expect(chmod(file, round % 2 == 0 ? 0o600 : 0o644) == 0)
            await watching.wait(for: "again \(round)")
            again.cancel()
        }
        #expect(Set(await watching.settled().filter { $0 == "first" || $0 == "second" }) == ["second"])
    }

    @Test("five watches of one file, cancelled from the middle out: each call goes to those still watching, once")
    func manyOnOneFile() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watching = try Watching(in: directory)
        let file = directory + "/file"
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        // One listener kept inline, then a table, shrinking back to one.
        var watches = try (0..<5).map { try watching.watch(file, for: .attributes, as: "w\($0)") }
        var live = Set((0..<5).map { "w\($0)" })
        for (round, index) in [2, 0, 4, 1].enumerated() {
            watches[index].cancel()
            live.remove("w\(index)")
            let before = await watching.settled()
            #expect(chmod(file, round % 2 == 0 ? 0o600 : 0o644) == 0)
            for name in live { await watching.wait(for: name, count: before.filter { $0 == name }.count + 1) }
            let calls = Array(await watching.settled().dropFirst(before.count))
            #expect(calls.sorted() == live.sorted(), "round \(round)")
        }
        watches[3].cancel()
        watches.removeAll()
    }

    #if os(Linux)
        @Test(
            "a socket watcher process holds one inotify instance, shared by its path watches and its registry monitor")
        func oneInstancePerProcess() async throws {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            let watcher = try HelperProcess(
                ["watch", "test.one", "test.other", "--transport", "socket", "--dir", directory],
                executable: HelperProcess.tnotify)
            await watcher.waitForLine(startingWith: "watching")
            let descriptors = "/proc/\(watcher.pid)/fd"
            let instances = try FileManager.default.contentsOfDirectory(atPath: descriptors).filter {
                (try? FileManager.default.destinationOfSymbolicLink(atPath: descriptors + "/" + $0))
                    == "anon_inode:inotify"
            }
            #expect(instances.count == 1, "\(instances)")
            kill(watcher.pid, SIGTERM)
            _ = await watcher.waitForExit()
        }
    #endif

    #if os(Linux)
        @Test(
            "a mount or unmount elsewhere calls the mount watches only, never a path watch",
            .enabled(if: geteuid() == 0, "mounting needs root, as CI runs"))
        func mountElsewhere() async throws {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            let watching = try Watching(in: directory)
            #expect(mkdir(directory + "/mnt", 0o700) == 0)
            #expect(FileManager.default.createFile(atPath: directory + "/file", contents: Data()))
            let file = try watching.watch(directory + "/file", for: [.removedOrMoved, .attributes], as: "file")
            let itsDirectory = try watching.watch(directory, for: [.removedOrMoved, .entries], as: "directory")
            let called = watching.called
            let mounts = try PathWatcher.shared().watchMounts { called.append("mount") }
            let mount = try HelperProcess(["-t", "tmpfs", "none", directory + "/mnt"], executable: "/bin/mount")
            #expect(await mount.waitForExit() == 0)
            await watching.wait(for: "mount")
            let unmount = try HelperProcess([directory + "/mnt"], executable: "/bin/umount")
            #expect(await unmount.waitForExit() == 0)
            await watching.wait(for: "mount", count: 2)
            watching.expectCalled(await watching.settled().filter { $0 != "mount" }, [])
            withExtendedLifetime((file, itsDirectory, mounts)) {}
        }
    #endif

    @Test("a path that is not there, or too long, is refused with a typed error")
    func refused() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        #expect(throws: ChangeMonitorError.self) {
            _ = try PathWatcher.shared().watch(directory + "/missing", for: .removedOrMoved) {}
        }
        #expect(throws: ChangeMonitorError.self) {
            _ = try PathWatcher.shared().watch(
                directory + "/" + String(repeating: "x", count: 5_000), for: .removedOrMoved
            ) {}
        }
    }
}
