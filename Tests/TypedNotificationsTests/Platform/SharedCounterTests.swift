import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("A counter shared through a mapped file", .timeLimit(.minutes(10)))
struct SharedCounterTests {
    @Test("two mappings of one file see each other's increments")
    func incrementsAreShared() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let path = directory + "/counter"
        let first = try SharedCounter(path: path, permissions: 0o600, owner: SystemProcess.userID)
        let second = try SharedCounter(path: path, permissions: 0o600, owner: SystemProcess.userID)
        #expect(first.value == 0)
        for _ in 0..<1000 { first.increment() }
        second.increment()
        #expect(second.value == 1001)
        #expect(first.value == 1001)
        // The file holds a whole page, so the mapping never reaches past its end.
        #expect(try SystemCalls.linkStatus(path).get().size == 4096)
    }

    @Test("the process's users of one file share one mapping; a file replaced at the path gets a new one")
    func processSharesOneMapping() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let path = directory + "/counter"
        // Read whole: /proc says its files are empty, and a read sized by that stops short.
        func mappings() throws -> Int {
            let maps = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/proc/self/maps")).readToEnd() ?? Data()
            return String(decoding: maps, as: UTF8.self).split(separator: "\n").filter { $0.hasSuffix(path) }.count
        }
        let counters = try (0..<50).map { _ in
            try SharedCounter.shared(path: path, permissions: 0o600, owner: SystemProcess.userID)
        }
        #expect(try mappings() == 1)
        counters[0].increment()
        #expect(counters[49].value == 1)
        // Replaced: the old mapping reaches nobody else any more.
        try FileManager.default.removeItem(atPath: path)
        let fresh = try SharedCounter.shared(path: path, permissions: 0o600, owner: SystemProcess.userID)
        #expect(fresh !== counters[0])
        #expect(fresh.value == 0)
        withExtendedLifetime(counters) {}
    }

    @Test("a link, a FIFO, a file open to others or of another owner is refused, never mapped")
    func refusesWhatCouldBeCutShort() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let target = directory + "/target"
        _ = try SharedCounter(path: target, permissions: 0o600, owner: SystemProcess.userID)
        let link = directory + "/link"
        #expect(symlink(target, link) == 0)
        #expect(throws: Errno.self) {
            _ = try SharedCounter(path: link, permissions: 0o600, owner: SystemProcess.userID)
        }
        let fifo = directory + "/fifo"
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(throws: Errno.self) {
            _ = try SharedCounter(path: fifo, permissions: 0o600, owner: SystemProcess.userID)
        }
        // Another user could cut a group-writable file short under the mapping.
        let open = directory + "/open"
        _ = try SharedCounter(path: open, permissions: 0o600, owner: SystemProcess.userID)
        #expect(chmod(open, 0o660) == 0)
        #expect(throws: Errno.self) {
            _ = try SharedCounter(path: open, permissions: 0o600, owner: SystemProcess.userID)
        }
        #expect(throws: Errno.self) {
            _ = try SharedCounter(path: target, permissions: 0o600, owner: SystemProcess.userID &+ 1)
        }
    }
}
