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
