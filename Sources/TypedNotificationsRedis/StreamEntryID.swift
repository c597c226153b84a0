/// A stream entry's ID, `<milliseconds>-<sequence>`, as Redis orders them.
struct StreamEntryID: Comparable, Hashable, Sendable, CustomStringConvertible {
    var milliseconds: UInt64
    var sequence: UInt64

    static let zero = StreamEntryID(milliseconds: 0, sequence: 0)

    init(milliseconds: UInt64, sequence: UInt64) {
        self.milliseconds = milliseconds
        self.sequence = sequence
    }

    /// Parses `1700000000000-3`; `nil` for anything else.
    init?(_ bytes: [UInt8]) {
        guard let dash = bytes.firstIndex(of: UInt8(ascii: "-")), bytes.count <= 41,
            let milliseconds = UInt64(String(decoding: bytes[..<dash], as: UTF8.self)),
            let sequence = UInt64(String(decoding: bytes[(dash + 1)...], as: UTF8.self))
        else { return nil }
        self.init(milliseconds: milliseconds, sequence: sequence)
    }

    /// The ID just before this one: reading "after" it starts at this one.
    var predecessor: StreamEntryID {
        if sequence > 0 { return StreamEntryID(milliseconds: milliseconds, sequence: sequence - 1) }
        if milliseconds > 0 { return StreamEntryID(milliseconds: milliseconds - 1, sequence: .max) }
        return .zero
    }

    var description: String { "\(milliseconds)-\(sequence)" }

    static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.milliseconds, lhs.sequence) < (rhs.milliseconds, rhs.sequence)
    }
}
