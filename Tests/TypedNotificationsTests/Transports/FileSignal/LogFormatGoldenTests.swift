import Foundation
import Testing

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

/// A log segment from `Envelope/Golden/log-vectors.json`, framed by
/// `generate.py` from `WireFormat.md` alone.
private struct LogVector: Decodable {
    var label: String
    var firstIndex: UInt64
    var log: UInt64
    var next: UInt64?
    var envelopesHex: [String]
    var segmentHex: String?
    var headHex: String?
    var boundaryHex: String?
    var length: Int
    var crc32c: UInt32

    static func load() throws -> [LogVector] {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Envelope/Golden/log-vectors.json")
        return try JSONDecoder().decode([LogVector].self, from: Data(contentsOf: url))
    }
}

@Suite("Log format golden vectors")
struct LogFormatGoldenTests {
    @Test("the writer frames the vectors' envelopes to exactly their bytes; the reader reads them back")
    func goldenSegments() throws {
        let vectors = try LogVector.load()
        #expect(vectors.count == 2)
        for vector in vectors {
            var segment = SegmentBuilder(firstIndex: vector.firstIndex, log: vector.log)
            let envelopes = vector.envelopesHex.map { bytes(fromHex: $0) }
            for envelope in envelopes { segment.append(envelope: envelope) }
            if let next = vector.next { segment.close(next: next) }
            let written = segment.bytes
            #expect(written.count == vector.length, "\(vector.label)")
            #expect(written.withUnsafeBytes { CRC32C.checksum($0) } == vector.crc32c, "\(vector.label)")
            if let whole = vector.segmentHex { #expect(written == bytes(fromHex: whole), "\(vector.label)") }
            if let head = vector.headHex { #expect(Array(written.prefix(head.count / 2)) == bytes(fromHex: head)) }
            if let boundary = vector.boundaryHex {
                let start = LogFormat.blockSize - 8
                #expect(Array(written[start..<(start + boundary.count / 2)]) == bytes(fromHex: boundary))
            }
            // Read back: the same envelopes, with consecutive indexes.
            var read: [[UInt8]] = []
            var indexes: [UInt64] = []
            var rollover: UInt64?
            var start: (index: UInt64, log: UInt64)?
            let walked = LogScanner.walk(written, base: 0, fileSize: written.count) { item in
                switch item {
                case .record(_, _, let index, .inWindow(let range, _)):
                    read.append(Array(written[range]))
                    indexes.append(index)
                case .record(_, _, let index, .assembled(let envelope)):
                    read.append(envelope)
                    indexes.append(index)
                case .rollover(let next, _, _): rollover = next
                case .start(let index, let log): start = (index, log)
                case .damaged, .skipped, .piece: break
                }
            }
            #expect(walked.stop == .caughtUp)
            #expect(read == envelopes, "\(vector.label)")
            #expect(indexes == (0..<UInt64(envelopes.count)).map { vector.firstIndex + $0 })
            #expect(rollover == vector.next)
            #expect(start?.index == vector.firstIndex && start?.log == vector.log, "\(vector.label)")
            #expect(LogFormat.logIdentifier(inStart: written) == vector.log)
        }
    }
}
