import Foundation
import Testing

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsRedis
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

/// `Golden/formats-vectors.json`, written by `Golden/generate.py` from
/// *Formats* alone: what surrounds the envelope on each transport.
private struct FormatVectors: Decodable {
    struct Registration: Decodable {
        var id: String
        var pid: Int32
        var uid: UInt32
        var endpoint: String
        var text: String
        var socket: String
        var file: String
        var nameEntry: String
        var namespaceEntry: String
    }
    struct SpoolFile: Decodable {
        var poster: String
        var generation: UInt32
        var fileName: String
        var envelopeHex: String
        var dropped: Int
        var markerHex: String
        var fileHex: String
    }
    struct Cursor: Decodable {
        var committedSegment: UInt64
        var committedOffset: Int
        var deliveredSegment: UInt64
        var deliveredOffset: Int
        var nextIndex: UInt64
        var log: UInt64
        var text: String
        var namespaceMarker: String
    }
    struct Lock: Decodable {
        var newestSegment: UInt64
        var hex: String
    }
    struct Redis: Decodable {
        struct Announcement: Decodable {
            var namespace: String
            var names: String
            var stream: String
            var commands: [[String]]
        }
        var prefix: String
        var name: String
        var maximumLength: Int
        var envelopeHex: String
        var key: String
        var postHex: String
        var announcements: [Announcement]
    }
    var registration: Registration
    var spool: SpoolFile
    var cursor: Cursor
    var lock: Lock
    var redis: Redis

    static func load() throws -> FormatVectors {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("Golden/formats-vectors.json")
        return try JSONDecoder().decode(FormatVectors.self, from: Data(contentsOf: url))
    }
}

@Suite("Formats golden vectors")
struct FormatsGoldenTests {
    @Test("a registration file's line and the registry's paths are the vector's; ls reads the line back")
    func registration() throws {
        let vector = try FormatVectors.load().registration
        let sender = try NotificationSender(
            processID: vector.pid, userID: vector.uid, endpoint: vector.endpoint, instance: 1)
        #expect(SocketRegistry.registrationLine(sender) == Array(vector.text.utf8))
        let directory = "/d"
        #expect(SocketRegistry.socketPath(directory, vector.id) == directory + "/" + vector.socket)
        #expect(SocketRegistry.registrationPath(directory, vector.id) == directory + "/" + vector.file)
        let name = try NotificationName(validating: "com.example.ready")
        #expect(SocketRegistry.entryPath(directory, name, vector.id) == directory + "/" + vector.nameEntry)
        let namespace = try NotificationNamespace(validating: "com.example")
        #expect(
            SocketRegistry.entryPath(directory, .namespace(namespace), vector.id)
                == directory + "/" + vector.namespaceEntry)
        #expect(SocketRegistry.isIdentifier(vector.id))

        // Read back: `tnotify ls` takes the process and label from the file.
        let folder = try makeTemporaryDirectory()
        defer { removeDirectory(folder) }
        let file = folder + "/registration"
        try Data(vector.text.utf8).write(to: URL(fileURLWithPath: file))
        let fields = SocketTransport.entryFields(file)
        #expect(fields.processID == vector.pid && fields.endpoint == vector.endpoint)
    }

    @Test("a spool file: its name, magic, envelope record and drop record are the vector's bytes, and parse back")
    func spoolFile() throws {
        let vector = try FormatVectors.load().spool
        #expect(Spool.fileName(poster: vector.poster, generation: vector.generation) == vector.fileName)
        let parsedName = try #require(Spool.parseFileName(vector.fileName))
        #expect(parsedName.poster == vector.poster && parsedName.generation == vector.generation)

        let envelope = bytes(fromHex: vector.envelopeHex)
        let marker = try NotificationEnvelope.decode(bytes(fromHex: vector.markerHex))
        let markerEncoded = try NotificationEnvelope.encode(
            name: marker.name, sender: marker.sender, sequence: marker.sequence, timestamp: marker.timestamp
        ) { _ in }
        let written =
            Spool.magic + [Spool.envelopeKind] + envelope
            + Spool.dropRecord(count: UInt64(vector.dropped), marker: markerEncoded)
        #expect(written == bytes(fromHex: vector.fileHex))

        var decoder = EnvelopeDecoder()
        let parsed = Spool.parse(bytes(fromHex: vector.fileHex), decoder: &decoder)
        #expect(!parsed.malformed)
        #expect(parsed.records.count == 2)
        guard parsed.records.count == 2, case .envelope(let message) = parsed.records[0],
            case .dropped(let count, let last) = parsed.records[1]
        else {
            Issue.record("expected an envelope record, then a drop record: \(parsed.records)")
            return
        }
        #expect(message.name.rawValue == "com.example.ready" && message.sequence == 5)
        #expect(message.sender.processID == 4242 && message.sender.userID == 1000)
        #expect(count == vector.dropped && last.sequence == marker.sequence)
    }

    @Test("a cursor and a namespace marker are the vector's lines, and parse back")
    func cursor() throws {
        let vector = try FormatVectors.load().cursor
        let cursor = FileCursor(
            committed: LogPosition(
                segment: vector.committedSegment, offset: vector.committedOffset, index: vector.nextIndex,
                log: vector.log),
            delivered: LogPosition(segment: vector.deliveredSegment, offset: vector.deliveredOffset, log: vector.log))
        #expect(cursor.bytes == Array(vector.text.utf8))
        let parsed = try #require(FileCursor.parse(Array(vector.text.utf8)))
        #expect(parsed.committed.segment == vector.committedSegment)
        #expect(parsed.committed.offset == vector.committedOffset)
        #expect(parsed.committed.index == vector.nextIndex && parsed.committed.log == vector.log)
        #expect(parsed.delivered.segment == vector.deliveredSegment)
        #expect(parsed.delivered.offset == vector.deliveredOffset)
        #expect(FileCursor.namespaceStart.bytes == Array(vector.namespaceMarker.utf8))
        #expect(FileCursor.parse(Array(vector.namespaceMarker.utf8)) != nil)
    }

    @Test("a lock file's 8 bytes are the newest segment number, little-endian")
    func lockFile() throws {
        let vector = try FormatVectors.load().lock
        var written: [UInt8] = []
        written.appendLittleEndian(vector.newestSegment)
        #expect(written == bytes(fromHex: vector.hex))
    }

    @Test("a Redis post is the vector's XADD byte for byte; an entry's e field reads back; the keys are the vector's")
    func redis() throws {
        let vector = try FormatVectors.load().redis
        let envelope = bytes(fromHex: vector.envelopeHex)
        let post = RoutedCommand.post(
            prefix: vector.prefix, name: vector.name, maximumLength: vector.maximumLength,
            envelope: envelope[...], trailer: nil)
        #expect(post.encoded == bytes(fromHex: vector.postHex))

        let transport = try RedisStreamsTransport(url: "redis://127.0.0.1:1")
        #expect(transport.configuration.keyPrefix == vector.prefix)
        #expect(transport.configuration.maximumLength == vector.maximumLength)
        let name = try NotificationName(validating: vector.name)
        #expect(transport.key(for: name) == vector.key)
        let fields: [RESPValue] = [.bulkString(Array("e".utf8)), .bulkString(envelope)]
        #expect(transport.envelopeBytes(fields) == envelope)
        #expect(transport.envelopeBytes([.bulkString(Array("x".utf8)), .bulkString(envelope)]) == nil)

        // Announced to every namespace that contains the name but itself.
        var namespaces: [String] = []
        NotificationNamespace.forEach(containing: name) { namespace in
            if namespace.root != name { namespaces.append(namespace.rawValue) }
        }
        #expect(namespaces == vector.announcements.map(\.namespace))
        for announcement in vector.announcements {
            let namespace = try NotificationNamespace(validating: announcement.namespace)
            #expect(transport.namesKey(of: namespace) == announcement.names)
            #expect(transport.discoveryKey(of: namespace) == announcement.stream)
            #expect(announcement.commands[1] == ["XADD", announcement.stream, "*", "n", vector.name])
        }
    }
}
