import Foundation
import Testing

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

/// Where a reader without a saved cursor starts: the log's end, its
/// beginning, or its newest records; a saved cursor always wins.
@Suite("File transport: where a first read starts", .timeLimit(.minutes(10)))
struct FirstReadTests {
    /// A directory whose log of `Ping` holds `count` records, in segments of
    /// `segmentSize` bytes, posted by a process-local hub that then closed.
    func logWith(_ count: Int, segmentSize: Int = 1024 * 1024) throws -> String {
        let directory = try makeTemporaryDirectory()
        let poster = try fileHub(directory, endpoint: "poster", configuration: .init(segmentSize: segmentSize))
        for index in 0..<count { try poster.post(Ping(index: index)) }
        poster.close()
        return directory
    }

    /// The indices a reader starting at `start` receives: the backlog it
    /// chose, then one posted after it registered (which every choice gets).
    func firstRead(
        _ directory: String, _ start: ReadStart, identity: String? = nil, marker: Int = 1000
    ) async throws -> [Int] {
        let transport = try FileSignalTransport(directory: directory, identity: identity, firstRead: start)
        let reader = try NotificationHub(endpoint: "reader", transport: transport)
        defer { reader.close() }
        var iterator = try reader.deliveries(.of(Ping.self)).makeAsyncIterator()
        let poster = try fileHub(directory, endpoint: "later")
        try poster.post(Ping(index: marker))
        poster.close()
        var received: [Int] = []
        while let delivered = await iterator.next() {
            received.append(delivered.notification.index)
            if delivered.notification.index == marker { break }
        }
        return received
    }

    /// A first read from a new log of `count` records (each read appends a
    /// marker to its log, so each gets a log of its own).
    func firstRead(
        fromLogOf count: Int, segmentSize: Int = 1024 * 1024, _ start: ReadStart, identity: String? = nil
    ) async throws -> [Int] {
        let directory = try logWith(count, segmentSize: segmentSize)
        defer { removeDirectory(directory) }
        return try await firstRead(directory, start, identity: identity)
    }

    @Test("the default starts at the log's end: only what is posted after registering")
    func end() async throws {
        #expect(try await firstRead(fromLogOf: 5, .end) == [1000])
        #expect(try await firstRead(fromLogOf: 5, .end, identity: "fresh") == [1000])
    }

    @Test("from the beginning: everything the log keeps, then what comes, for a plain reader and a new identity")
    func beginning() async throws {
        #expect(try await firstRead(fromLogOf: 5, .beginning) == [0, 1, 2, 3, 4, 1000])
        #expect(try await firstRead(fromLogOf: 5, .beginning, identity: "w") == [0, 1, 2, 3, 4, 1000])
    }

    @Test("the newest N records, across segments, and all of them when the log has fewer")
    func newest() async throws {
        // Records of about 100 bytes in 4 KiB segments (the smallest): 200
        // span several, and the newest 60 more than one.
        let directory = try logWith(200, segmentSize: 4096)
        let segments = try FileManager.default.contentsOfDirectory(atPath: directory + "/logs/" + Ping.name.rawValue)
        removeDirectory(directory)
        try #require(segments.count >= 4, "the records span several segments")
        func read(_ start: ReadStart, identity: String? = nil) async throws -> [Int] {
            try await firstRead(fromLogOf: 200, segmentSize: 4096, start, identity: identity)
        }
        #expect(try await read(.newest(60)) == Array(140..<200) + [1000])
        #expect(try await read(.newest(1)) == [199, 1000])
        #expect(try await read(.newest(5000)) == Array(0..<200) + [1000])
        #expect(try await read(.newest(0)) == [1000], "0 is the log's end")
        #expect(try await read(.newest(3), identity: "w") == [197, 198, 199, 1000])
    }

    @Test("a durable identity chooses only its first run; afterwards it resumes from its cursor")
    func identityResumes() async throws {
        let directory = try logWith(3)
        defer { removeDirectory(directory) }
        #expect(try await firstRead(directory, .beginning, identity: "w", marker: 100) == [0, 1, 2, 100])
        let poster = try fileHub(directory, endpoint: "meanwhile")
        try poster.post(Ping(index: 200))
        poster.close()
        // Not from the beginning again: from where it stopped.
        #expect(try await firstRead(directory, .beginning, identity: "w", marker: 300) == [200, 300])
    }
}
