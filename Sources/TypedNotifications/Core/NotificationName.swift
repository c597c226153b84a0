/// The name a notification travels under, checked so that it is safe to use as
/// a file name, a registry key and a log field on every transport.
///
/// A valid name is 1 to 200 bytes of `A-Z a-z 0-9 . _ -`, does not start with
/// a dot and never contains `..`. Reverse-DNS names such as
/// `com.example.broadcast.started` fit.
///
/// Names built from run-time text go through ``init(validating:)``, which throws
/// ``TypedNotificationError/Code/invalidName``. A string literal is source
/// code, not input: an invalid literal stops the program the first time the
/// name is used, with a message that names the rule it broke.
public struct NotificationName: Hashable, Sendable, Comparable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    /// The longest valid name, in UTF-8 bytes.
    public static let maximumLength = 200

    /// The validated text of the name.
    public let rawValue: String

    /// Validates `rawValue` and creates a name from it.
    ///
    /// - Throws: ``TypedNotificationError`` with code
    ///   ``TypedNotificationError/Code/invalidName`` naming the rule that failed.
    public init(validating rawValue: String) throws(TypedNotificationError) {
        if let problem = Self.problem(with: rawValue.utf8, maximumLength: Self.maximumLength) {
            throw TypedNotificationError(
                code: .invalidName,
                message: "notification name \(TypedNotificationError.quote(rawValue)) \(problem)"
            )
        }
        self.rawValue = rawValue
    }

    /// Creates a name from a literal in source code.
    ///
    /// An invalid literal is a programming error and stops the program, the way
    /// an out-of-range array index does; use ``init(validating:)`` for run-time text.
    public init(stringLiteral value: String) {
        if let problem = Self.problem(with: value.utf8, maximumLength: Self.maximumLength) {
            preconditionFailure(
                "invalid NotificationName literal \(TypedNotificationError.quote(value)): \(problem)"
            )
        }
        self.rawValue = value
    }

    /// A name whose text has already passed ``problem(with:maximumLength:)``.
    init(checked rawValue: String) {
        self.rawValue = rawValue
    }

    /// The name's text.
    public var description: String { rawValue }

    /// Orders names by their text.
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    /// Why the UTF-8 bytes `text` are not a valid name, or `nil` if they are.
    ///
    /// Shared with endpoint labels, which follow the same rules with a shorter
    /// limit, and with the envelope decoder, which checks bytes before it makes
    /// a string of them.
    static func problem(with text: some Sequence<UInt8>, maximumLength: Int) -> String? {
        var count = 0
        var previous: UInt8 = 0
        for byte in text {
            count += 1
            if count > maximumLength {
                return "is longer than \(maximumLength) bytes"
            }
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "-"):
                break
            case UInt8(ascii: "."):
                if count == 1 { return "starts with a dot" }
                if previous == UInt8(ascii: ".") { return "contains \"..\"" }
            default:
                return "contains a character outside A-Z a-z 0-9 . _ - (byte \(byte) at offset \(count - 1))"
            }
            previous = byte
        }
        return count == 0 ? "is empty" : nil
    }
}
