import Testing

@testable import TypedNotificationsRedis

@Suite("RESP2 replies and commands")
struct RESPTests {
    private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test("every reply type reads, with the offset after it")
    func replyTypes() throws {
        let cases: [(String, RESPValue)] = [
            ("+OK\r\n", .simpleString("OK")),
            ("-MOVED 3999 127.0.0.1:6381\r\n", .error("MOVED 3999 127.0.0.1:6381")),
            (":1000\r\n", .integer(1000)),
            (":-7\r\n", .integer(-7)),
            ("$5\r\nhe\r\no\r\n", .bulkString(Array("he\r\no".utf8))),
            ("$0\r\n\r\n", .bulkString([])),
            ("$-1\r\n", .bulkString(nil)),
            ("*-1\r\n", .array(nil)),
            ("*0\r\n", .array([])),
            (
                "*2\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nk\r\n$1\r\nv\r\n:5\r\n",
                .array([
                    .array([.bulkString(Array("1-0".utf8)), .array([.bulkString([107]), .bulkString([118])])]),
                    .integer(5),
                ])
            ),
        ]
        for (text, expected) in cases {
            let read = try RESPReader.read(bytes(text))
            #expect(read?.value == expected, "\(text.debugDescription)")
            #expect(read?.end == text.utf8.count, "\(text.debugDescription)")
        }
    }

    @Test("a reply cut anywhere asks for more bytes; a stream of replies reads one after another")
    func partialReplies() throws {
        let stream = bytes("+OK\r\n*3\r\n$3\r\nabc\r\n:-12\r\n*1\r\n$-1\r\n$4\r\n\r\n\r\n\r\n")
        var offset = 0
        var values: [RESPValue] = []
        while offset < stream.count {
            let whole = try #require(try RESPReader.read(stream, from: offset))
            for cut in offset..<whole.end {
                #expect(try RESPReader.read(Array(stream[..<cut]), from: offset) == nil, "cut at \(cut)")
            }
            values.append(whole.value)
            offset = whole.end
        }
        #expect(
            values == [
                .simpleString("OK"),
                .array([.bulkString(Array("abc".utf8)), .integer(-12), .array([.bulkString(nil)])]),
                .bulkString([13, 10, 13, 10]),
            ])
    }

    @Test(
        "hostile replies are typed errors, never traps or unbounded allocations",
        arguments: [
            ("$99999999999\r\n", "over"),
            ("*99999999999\r\n", "over"),
            ("$-2\r\n", "bulk length"),
            ("*-5\r\n", "array count"),
            ("$3\r\nabcXY", "CRLF"),
            (":12a\r\n", "non-digit"),
            (":\r\n", "integer"),
            (":99999999999999999999\r\n", "integer"),
            ("!oops\r\n", "unknown type"),
            ("+a\nb\r\n", "LF without CR"),
            ("+a\rb\r\n", "CR without LF"),
            ("$9223372036854775807\r\n", "over"),
        ]
    )
    func hostile(_ text: String, _ reason: String) {
        #expect {
            _ = try RESPReader.read(Array(text.utf8))
        } throws: { error in
            guard let error = error as? RESPError else { return false }
            return reason.isEmpty || error.description.contains(reason)
        }
    }

    @Test("a status line that is not UTF-8 is refused")
    func invalidUTF8() {
        #expect(throws: RESPError.self) { try RESPReader.read([UInt8(ascii: "+"), 0xFF, 0xFE, 13, 10]) }
    }

    @Test("nesting past the limit, and a line that never ends, are refused without waiting for more")
    func depthAndLineLimits() {
        let deep = Array(String(repeating: "*1\r\n", count: 100).utf8)
        #expect(throws: RESPError.overLimit("arrays nested deeper than 16")) { try RESPReader.read(deep) }
        let endless = [UInt8(ascii: "+")] + [UInt8](repeating: UInt8(ascii: "a"), count: 70_000)
        #expect(throws: RESPError.self) { try RESPReader.read(endless) }
    }

    @Test("a huge declared array with few bytes waits for more instead of allocating")
    func hugeCountFewBytes() throws {
        #expect(try RESPReader.read(bytes("*1000000\r\n:1\r\n")) == nil)
    }

    @Test("random bytes end in a reply, a request for more, or a typed error")
    func randomBytes() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("+-:$*\r\n0123456789-abc".utf8)
        for _ in 0..<20_000 {
            let count = Int.random(in: 0...40, using: &generator)
            let input = (0..<count).map { _ in
                Bool.random(using: &generator)
                    ? alphabet.randomElement(using: &generator) ?? 0 : UInt8.random(in: 0...255, using: &generator)
            }
            do {
                if let read = try RESPReader.read(input) { #expect(read.end <= input.count) }
            } catch {
                continue
            }
        }
    }

    @Test("commands are arrays of bulk strings, binary-safe")
    func commands() throws {
        #expect(RESPWriter.command("SET", "k", "v") == bytes("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"))
        var buffer: [UInt8] = []
        RESPWriter.command([Array("XADD".utf8), [0, 13, 10, 255]], into: &buffer)
        #expect(buffer == bytes("*2\r\n$4\r\nXADD\r\n$4\r\n") + [0, 13, 10, 255, 13, 10])
        #expect(
            try RESPReader.read(buffer)?.value
                == .array([.bulkString(Array("XADD".utf8)), .bulkString([0, 13, 10, 255])]))
    }

    @Test(
        "a post's XADD, encoded in one buffer, is the command its words make, its key a slice of it",
        arguments: [nil, 1, 10_000] as [Int?])
    func postInOneBuffer(maximumLength: Int?) {
        let envelope: [UInt8] = [0, 13, 10, 255] + Array(repeating: 0x5A, count: 300)
        let command = RoutedCommand.post(
            prefix: "tn", name: "com.example.jobs", maximumLength: maximumLength, envelope: envelope[1...],
            trailer: nil)
        var words = ["XADD", "tn:{com.example.jobs}"]
        if let maximumLength { words += ["MAXLEN", "~", String(maximumLength)] }
        words += ["*", "e"]
        var expected: [UInt8] = []
        RESPWriter.command(words.map { Array($0.utf8) } + [Array(envelope[1...])], into: &expected)
        #expect(command.encoded == expected)
        #expect(Array(command.key) == Array("tn:{com.example.jobs}".utf8))
        #expect(HashSlot.of(command.key) == HashSlot.of(Array("com.example.jobs".utf8)))
        #expect(command.trailer == nil)
    }
}
