import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotifications

#if canImport(Glibc)
    import Glibc
#endif

/// `DirectorySharing.group` as *Security model* promises it: two users of
/// one group, each with another primary group, share a directory that
/// belongs to the first and to the group (set-group-ID, 2770), with real
/// `tnotify` processes switched to each user by `setpriv`, under the usual
/// umask 022.
@Suite(
    "Sharing a directory with its group: two users", .serialized, .timeLimit(.minutes(10)),
    .enabled(
        if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: GroupUsers.setpriv),
        "needs root and setpriv, to run tnotify as two other users"))
struct GroupSharingTests {

    /// A directory the first user and the group own, set-group-ID, in a
    /// folder everyone may read (watching a directory watches its parents).
    private func sharedDirectory() throws -> (root: String, shared: String) {
        let root = try makeTemporaryDirectory()
        chmod(root, 0o755)
        let shared = root + "/shared"
        guard mkdir(shared, 0o700) == 0, chown(shared, GroupUsers.first.user, GroupUsers.group) == 0,
            chmod(shared, 0o2770) == 0
        else { throw POSIXError(.EPERM) }
        return (root, shared)
    }

    /// `tnotify` as `user`, with umask 022.
    private func tnotify(as user: (user: UInt32, primary: UInt32), _ arguments: [String]) throws -> HelperProcess {
        try HelperProcess(
            [
                "-c", "umask 022; exec \"$@\"", "sh", GroupUsers.setpriv, "--reuid=\(user.user)",
                "--regid=\(user.primary)", "--groups=\(GroupUsers.group)", "--", HelperProcess.tnotify,
            ] + arguments, executable: "/bin/sh")
    }

    private func run(as user: (user: UInt32, primary: UInt32), _ arguments: [String]) async throws -> Int32 {
        let process = try tnotify(as: user, arguments)
        let status = await process.waitForExit()
        if status != 0 {
            Issue.record("tnotify \(arguments) as \(user.user) exited \(status): \(process.errors.values)")
        }
        return status
    }

    /// The payload texts and sender users of the JSON lines `watcher` printed, once it printed `count`.
    private func received(_ watcher: HelperProcess, count: Int) async -> [(text: String, user: Int)] {
        await watcher.lines.wait(forCount: count + 1)  // "watching …" first
        return Watched.jsonObjects(watcher.lines.values).compactMap { object in
            guard let text = object["payloadText"] as? String, let sender = object["sender"] as? [String: Any],
                let user = sender["uid"] as? Int
            else { return nil }
            return (text, user)
        }
    }

    /// Every file and folder below `directory` is the group's, with the group's modes.
    private func expectGroupModes(_ directory: String) throws {
        let enumerator = FileManager.default.enumerator(atPath: directory)
        var checked = 0
        while let relative = enumerator?.nextObject() as? String {
            var info = stat()
            guard lstat(directory + "/" + relative, &info) == 0 else { continue }
            checked += 1
            #expect(info.st_gid == GroupUsers.group, "\(relative) belongs to group \(info.st_gid)")
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                #expect(info.st_mode & 0o7777 == 0o2770, "\(relative): \(String(info.st_mode & 0o7777, radix: 8))")
            default: #expect(info.st_mode & 0o777 == 0o660, "\(relative): \(String(info.st_mode & 0o777, radix: 8))")
            }
        }
        #expect(checked > 3)
    }

    @Test(
        "socket transport: each user's posts reach the other's watcher, also spooled while it was stopped; everything made is the group's"
    )
    func socketBetweenUsers() async throws {
        let (root, shared) = try sharedDirectory()
        defer { removeDirectory(root) }
        let directory = shared + "/s"
        let common = ["--dir", directory, "--group", "--json"]
        let watcher = try tnotify(as: GroupUsers.first, ["watch", "test.group.ping"] + common)
        await watcher.waitForLine(startingWith: "watching")
        // Stopped, so that what the second user posts waits in its spool.
        watcher.signal(SIGSTOP)
        for index in 0..<20 {
            #expect(
                try await run(
                    as: GroupUsers.second,
                    ["post", "test.group.ping", "--text", "b\(index)", "--dir", directory, "--group"]) == 0)
        }
        watcher.signal(SIGCONT)
        let got = await received(watcher, count: 20)
        #expect(got.map(\.text).sorted() == (0..<20).map { "b\($0)" }.sorted())
        #expect(got.allSatisfy { $0.user == Int(GroupUsers.second.user) })
        watcher.signal(SIGTERM)
        _ = await watcher.waitForExit()

        // And back: the second user watches in what the first user made.
        let back = try tnotify(as: GroupUsers.second, ["watch", "test.group.back"] + common)
        await back.waitForLine(startingWith: "watching")
        #expect(
            try await run(
                as: GroupUsers.first, ["post", "test.group.back", "--text", "a", "--dir", directory, "--group"]) == 0)
        let answer = await received(back, count: 1)
        #expect(answer.map(\.text) == ["a"] && answer.first?.user == Int(GroupUsers.first.user))
        back.signal(SIGTERM)
        _ = await back.waitForExit()
        try expectGroupModes(directory)
    }

    @Test(
        "file transport: both users append to one log and each reads the other's records; everything made is the group's"
    )
    func fileBetweenUsers() async throws {
        let (root, shared) = try sharedDirectory()
        defer { removeDirectory(root) }
        let common = ["--transport", "file", "--dir", shared + "/f", "--group"]
        #expect(try await run(as: GroupUsers.first, ["post", "test.group.log", "--text", "a1"] + common) == 0)
        #expect(try await run(as: GroupUsers.second, ["post", "test.group.log", "--text", "b1"] + common) == 0)
        #expect(try await run(as: GroupUsers.first, ["post", "test.group.log", "--text", "a2"] + common) == 0)
        for reader in [GroupUsers.first, GroupUsers.second] {
            let watcher = try tnotify(
                as: reader, ["watch", "test.group.log", "--from", "beginning", "--json"] + common)
            let got = await received(watcher, count: 3)
            #expect(got.map(\.text) == ["a1", "b1", "a2"])
            let users = [GroupUsers.first, GroupUsers.second, GroupUsers.first]
            #expect(got.map(\.user) == users.map { Int($0.user) })
            #expect(!watcher.errors.values.contains { $0.contains("never read") }, "\(watcher.errors.values)")
            watcher.signal(SIGTERM)
            _ = await watcher.waitForExit()
        }
        try expectGroupModes(shared + "/f")
    }
}

/// The users and group the tests switch to: ids no account needs to have.
private enum GroupUsers {
    static let setpriv = "/usr/bin/setpriv"
    static let group: UInt32 = 12_000
    /// The two users and their primary groups, neither of which is the shared one.
    static let first = (user: UInt32(12_001), primary: UInt32(12_101))
    static let second = (user: UInt32(12_002), primary: UInt32(12_102))
}
