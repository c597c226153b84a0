/// A reply in RESP2, the protocol Redis and Valkey speak by default.
package enum RESPValue: Hashable, Sendable {
    /// `+OK`: a short status line.
    case simpleString(String)
    /// `-ERR …`: an error reply, with its first word (`ERR`, `MOVED`, `NOAUTH`…) kept in the text.
    case error(String)
    /// `:42`.
    case integer(Int64)
    /// `$3\r\nabc`; `nil` for the null bulk string `$-1`.
    case bulkString([UInt8]?)
    /// `*2\r\n…`; `nil` for the null array `*-1` (a blocking read that timed out).
    case array([RESPValue]?)
}

/// How much a reply may claim, so hostile or broken bytes cannot make a
/// reader allocate without bound or recurse without end.
package struct RESPLimits: Sendable {
    /// The longest bulk string, in bytes.
    package var maximumBulkLength: Int
    /// The most elements of one array.
    package var maximumArrayCount: Int
    /// The deepest nesting of arrays.
    package var maximumDepth: Int
    /// The longest status, error or length line, in bytes.
    package var maximumLineLength: Int

    package init(
        maximumBulkLength: Int = 64 * 1024 * 1024,
        maximumArrayCount: Int = 1 << 20,
        maximumDepth: Int = 16,
        maximumLineLength: Int = 64 * 1024
    ) {
        self.maximumBulkLength = maximumBulkLength
        self.maximumArrayCount = maximumArrayCount
        self.maximumDepth = maximumDepth
        self.maximumLineLength = maximumLineLength
    }
}

/// Why bytes from a server are not a RESP2 reply. A connection that sees one
/// is out of step with its server and must be closed.
package enum RESPError: Error, Hashable, CustomStringConvertible {
    /// A byte sequence no RESP2 reply has.
    case malformed(String)
    /// A length or count beyond ``RESPLimits``.
    case overLimit(String)

    package var description: String {
        switch self {
        case .malformed(let what): "malformed RESP reply: \(what)"
        case .overLimit(let what): "RESP reply over the limit: \(what)"
        }
    }
}

/// Reads RESP2 replies from bytes as they arrive.
package enum RESPReader {
    /// The first complete reply in `bytes[offset...]` and the offset after
    /// it; `nil` when the bytes end before the reply does.
    ///
    /// - Throws: ``RESPError`` for bytes that are no reply, or claim more than `limits`.
    package static func read(
        _ bytes: [UInt8],
        from offset: Int = 0,
        limits: RESPLimits = RESPLimits()
    ) throws(RESPError) -> (value: RESPValue, end: Int)? {
        var cursor = offset
        guard let value = try value(bytes, &cursor, limits: limits, depth: 0) else { return nil }
        return (value, cursor)
    }

    private static func value(
        _ bytes: [UInt8],
        _ cursor: inout Int,
        limits: RESPLimits,
        depth: Int
    ) throws(RESPError) -> RESPValue? {
        guard cursor < bytes.count else { return nil }
        let kind = bytes[cursor]
        guard let line = try line(bytes, after: cursor + 1, limits: limits) else { return nil }
        let text = bytes[(cursor + 1)..<line.end]
        switch kind {
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard let string = String(validating: text, as: UTF8.self) else {
                throw .malformed("a status line that is not UTF-8")
            }
            cursor = line.next
            return kind == UInt8(ascii: "+") ? .simpleString(string) : .error(string)
        case UInt8(ascii: ":"):
            let number = try integer(text)
            cursor = line.next
            return .integer(number)
        case UInt8(ascii: "$"):
            let length = try integer(text)
            if length == -1 {
                cursor = line.next
                return .bulkString(nil)
            }
            guard length >= 0 else { throw .malformed("bulk length \(length)") }
            guard length <= limits.maximumBulkLength else {
                throw .overLimit("bulk length \(length) over \(limits.maximumBulkLength)")
            }
            let start = line.next
            let (end, overflow) = start.addingReportingOverflow(Int(length))
            guard !overflow else { throw .overLimit("bulk length \(length)") }
            guard end + 2 <= bytes.count else { return nil }
            guard bytes[end] == 13, bytes[end + 1] == 10 else {
                throw .malformed("a bulk string not followed by CRLF")
            }
            cursor = end + 2
            return .bulkString(Array(bytes[start..<end]))
        case UInt8(ascii: "*"):
            let count = try integer(text)
            if count == -1 {
                cursor = line.next
                return .array(nil)
            }
            guard count >= 0 else { throw .malformed("array count \(count)") }
            guard count <= limits.maximumArrayCount else {
                throw .overLimit("array of \(count) over \(limits.maximumArrayCount)")
            }
            guard depth < limits.maximumDepth else {
                throw .overLimit("arrays nested deeper than \(limits.maximumDepth)")
            }
            var next = line.next
            var elements: [RESPValue] = []
            // Never trust a count for memory: it grows with the bytes that arrive.
            elements.reserveCapacity(min(Int(count), 1024))
            for _ in 0..<count {
                guard let element = try value(bytes, &next, limits: limits, depth: depth + 1) else { return nil }
                elements.append(element)
            }
            cursor = next
            return .array(elements)
        default:
            throw .malformed("unknown type byte \(kind)")
        }
    }

    /// Where the line that starts at `start` ends (its CR) and where the next begins.
    private static func line(
        _ bytes: [UInt8],
        after start: Int,
        limits: RESPLimits
    ) throws(RESPError) -> (end: Int, next: Int)? {
        var index = start
        while index < bytes.count {
            if bytes[index] == 13 {
                guard index + 1 < bytes.count else { return nil }
                guard bytes[index + 1] == 10 else { throw .malformed("CR without LF") }
                return (index, index + 2)
            }
            if bytes[index] == 10 { throw .malformed("LF without CR") }
            index += 1
            if index - start > limits.maximumLineLength {
                throw .overLimit("a line longer than \(limits.maximumLineLength) bytes")
            }
        }
        return nil
    }

    private static func integer(_ text: ArraySlice<UInt8>) throws(RESPError) -> Int64 {
        var digits = text[...]
        var negative = false
        if digits.first == UInt8(ascii: "-") {
            negative = true
            digits = digits.dropFirst()
        }
        guard !digits.isEmpty, digits.count <= 19 else { throw .malformed("an integer of \(text.count) bytes") }
        var value: Int64 = 0
        for byte in digits {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else {
                throw .malformed("a non-digit in an integer")
            }
            let (times, o1) = value.multipliedReportingOverflow(by: 10)
            let (plus, o2) = times.addingReportingOverflow(Int64(byte - UInt8(ascii: "0")))
            guard !o1, !o2 else { throw .malformed("an integer out of range") }
            value = plus
        }
        return negative ? -value : value
    }
}

/// Writes commands as RESP2 arrays of bulk strings, the form every server accepts.
package enum RESPWriter {
    /// Appends `arguments` as one command to `buffer`.
    package static func command(_ arguments: [[UInt8]], into buffer: inout [UInt8]) {
        header(UInt8(ascii: "*"), arguments.count, into: &buffer)
        for argument in arguments { self.argument(argument, into: &buffer) }
    }

    /// The command `arguments`, each given as text.
    package static func command(_ arguments: String...) -> [UInt8] {
        var buffer: [UInt8] = []
        command(arguments.map { Array($0.utf8) }, into: &buffer)
        return buffer
    }

    /// Appends one argument of a command, as a bulk string.
    package static func argument(_ bytes: some Collection<UInt8>, into buffer: inout [UInt8]) {
        header(UInt8(ascii: "$"), bytes.count, into: &buffer)
        buffer.append(contentsOf: bytes)
        buffer.append(13)
        buffer.append(10)
    }

    /// Appends a count's line: `*3\r\n` (an array) or `$5\r\n` (a bulk string).
    package static func header(_ kind: UInt8, _ count: Int, into buffer: inout [UInt8]) {
        buffer.append(kind)
        buffer.append(contentsOf: String(count).utf8)
        buffer.append(13)
        buffer.append(10)
    }
}
