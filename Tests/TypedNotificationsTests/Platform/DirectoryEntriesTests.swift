import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@Suite("Listing a directory")
struct DirectoryEntriesTests {
    @Test("names of every length up to 255 bytes, and not ASCII, come back whole, read in place from each entry")
    func everyLength() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // Entries as long as their names: the system's buffer ends wherever
        // the last one does, which the old copy of a whole 256-byte
        // `d_name` read past (a crash when that was the page's end).
        var expected: Set<String> = []
        for length in 1...255 {
            let name = String(repeating: "n", count: length - 1) + String(length % 10)
            expected.insert(name)
        }
        expected.insert("é" + String(repeating: "x", count: 100))
        expected.insert("名前")
        for name in expected {
            #expect(FileManager.default.createFile(atPath: directory + "/" + name, contents: nil))
        }
        let listed = try SystemCalls.directoryEntries(directory).get()
        #expect(listed.count == expected.count)
        #expect(Set(listed) == expected)
    }

    @Test("a missing directory is an error, not an empty list")
    func missing() {
        guard case .failure(let error) = SystemCalls.directoryEntries("/nonexistent-typed-notifications-dir") else {
            Issue.record("listed a missing directory")
            return
        }
        #expect(error == .noSuchFile)
    }
}

@Suite("Removing a tree")
struct RemoveTreeTests {
    @Test("names that are not UTF-8, at every level, go with their folders; what links point to stays")
    func hostileNames() throws {
        let root = try makeTemporaryDirectory()
        defer { removeDirectory(root) }
        let outside = try makeTemporaryDirectory()
        defer { removeDirectory(outside) }
        #expect(FileManager.default.createFile(atPath: outside + "/kept", contents: nil))
        let tree = root + "/tree"
        try FileManager.default.createDirectory(atPath: tree + "/a/b", withIntermediateDirectories: true)
        for folder in ["", "/a", "/a/b"] {
            let prefix = Array((tree + folder + "/").utf8)
            #expect(createFile(bytes: prefix + Array("caf".utf8) + [0xE9]))
            #expect(createFile(bytes: prefix + [UInt8](repeating: 0xFF, count: 255)))
            #expect(createFile(bytes: prefix + Array("plain".utf8)))
        }
        // Links to a folder and to a file outside: removed as links.
        try FileManager.default.createSymbolicLink(atPath: tree + "/a/folder", withDestinationPath: outside)
        try FileManager.default.createSymbolicLink(atPath: tree + "/file", withDestinationPath: outside + "/kept")
        #expect(throws: Never.self) { try SystemCalls.removeTree(tree).get() }
        #expect(!FileManager.default.fileExists(atPath: tree))
        #expect(files(in: outside) == ["kept"])
    }

    @Test("a link where the tree should be is refused and left, and so is its target; a missing path is ENOENT")
    func linkAtTheTop() throws {
        let root = try makeTemporaryDirectory()
        defer { removeDirectory(root) }
        let target = try makeTemporaryDirectory()
        defer { removeDirectory(target) }
        #expect(FileManager.default.createFile(atPath: target + "/kept", contents: nil))
        try FileManager.default.createSymbolicLink(atPath: root + "/link", withDestinationPath: target)
        guard case .failure(let error) = SystemCalls.removeTree(root + "/link") else {
            Issue.record("removed through a link")
            return
        }
        #expect(error == .tooManySymbolicLinks || error == .notADirectory)
        #expect(files(in: target) == ["kept"])
        #expect(files(in: root) == ["link"])
        guard case .failure(let missing) = SystemCalls.removeTree(root + "/missing") else {
            Issue.record("removed nothing and said so")
            return
        }
        #expect(missing == .noSuchFile)
    }

    @Test("a tree deeper than the limit keeps what is below it and says the folder is not empty, without trapping")
    func tooDeep() throws {
        let root = try makeTemporaryDirectory()
        defer { removeDirectory(root) }
        let levels = SystemCalls.deepestRemovedTree + 2
        let deepest = root + "/tree" + String(repeating: "/d", count: levels)
        try FileManager.default.createDirectory(atPath: deepest, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: deepest + "/f", contents: nil))
        guard case .failure(let error) = SystemCalls.removeTree(root + "/tree") else {
            Issue.record("removed a tree past the limit")
            return
        }
        #expect(error.rawValue == ENOTEMPTY)
        #expect(FileManager.default.fileExists(atPath: deepest + "/f"))
        // Within the limit, what is left goes.
        try FileManager.default.removeItem(atPath: root + "/tree" + String(repeating: "/d", count: 2))
        #expect(throws: Never.self) { try SystemCalls.removeTree(root + "/tree").get() }
        #expect(files(in: root).isEmpty)
    }

    @Test(
        "an entry removed under a base never through a link: a folder on the way that is one, or the base, refuses it")
    func removeEntryNeverThroughALink() throws {
        let root = try makeTemporaryDirectory()
        defer { removeDirectory(root) }
        let outside = try makeTemporaryDirectory()
        defer { removeDirectory(outside) }
        try FileManager.default.createDirectory(atPath: outside + "/spool/id/inner", withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: outside + "/spool/id/kept", contents: Data("kept".utf8)))
        #expect(FileManager.default.createFile(atPath: outside + "/spool/file", contents: nil))
        try FileManager.default.createSymbolicLink(atPath: root + "/spool", withDestinationPath: outside + "/spool")
        let before = try FileManager.default.subpathsOfDirectory(atPath: outside).sorted()
        for (components, tree) in [
            (["spool", "id"], true), (["spool", "file"], false), (["spool", "id", "kept"], false),
        ] {
            guard case .failure(let error) = SystemCalls.removeEntry(components, under: root, tree: tree) else {
                Issue.record("\(components) was removed through a link")
                continue
            }
            #expect(error == .tooManySymbolicLinks || error == .notADirectory, "\(components): \(error)")
        }
        // The base itself a link: refused too.
        guard case .failure = SystemCalls.removeEntry(["id"], under: root + "/spool", tree: true) else {
            Issue.record("removed under a base that is a link")
            return
        }
        #expect(try FileManager.default.subpathsOfDirectory(atPath: outside).sorted() == before)
        // Through real folders: a tree goes whole, a link as a link, a file.
        try FileManager.default.removeItem(atPath: root + "/spool")
        try FileManager.default.createDirectory(atPath: root + "/spool/id/inner", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: root + "/spool/id/link", withDestinationPath: outside)
        try FileManager.default.createSymbolicLink(
            atPath: root + "/spool/link", withDestinationPath: outside + "/spool")
        #expect(FileManager.default.createFile(atPath: root + "/spool/file", contents: nil))
        #expect(throws: Never.self) { try SystemCalls.removeEntry(["spool", "id"], under: root, tree: true).get() }
        #expect(throws: Never.self) { try SystemCalls.removeEntry(["spool", "link"], under: root).get() }
        #expect(throws: Never.self) { try SystemCalls.removeEntry(["spool", "file"], under: root).get() }
        #expect(files(in: root + "/spool").isEmpty)
        #expect(try FileManager.default.subpathsOfDirectory(atPath: outside).sorted() == before)
        // Names that could climb out are refused before any call.
        for climbing in [["spool", "../x"], ["..", "x"], ["spool", "."], ["", "x"]] {
            guard case .failure(.invalidArgument) = SystemCalls.removeEntry(climbing, under: root) else {
                Issue.record("\(climbing) was taken")
                continue
            }
        }
    }
}
