/// The name a notification travels under, checked so that it is safe to use as
/// a file name, a registry key and a log field on every transport.
///
/// A valid name is 1 to 200 bytes of `A-Z a-z 0-9 . _ -`, does not start with
/// a dot and never contains `..`. Reverse-DNS names such as
/// `com.example.broadcast.started` fit.
///
/// Names built from run-time text go through ``init(validating:)``, which throws
/// ``TypedNotificationError/Code/invalidName``. A string literal cannot be
/// checked when it compiles, and is never a reason to stop the program:
/// an invalid literal makes a name that every post, observer and `latest`
/// refuses with ``TypedNotificationError/Code/invalidName``, quoting the
/// literal, the rule it broke and, for a ``TypedNotification``'s ``TypedNotification/name``,
/// the type that declared it. To find them all before anything runs, check
/// a module's notification types in one test:
///
/// ```swift
/// @Test func notificationNames() throws {
///     try NotificationName.validate([ScoreChanged.self, CacheCleared.self, Reload.self])
/// }
/// ```
public struct NotificationName: Hashable, Sendable, Comparable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    /// The longest valid name, in UTF-8 bytes.
    package static let maximumLength = 200

    /// The text of the name: valid unless it came from an invalid literal
    /// (see ``init(stringLiteral:)``).
    public let rawValue: String

    /// Whether the text passed validation; only a literal can make it false.
    let isValid: Bool

    /// The text's hash value, computed once: a post looks its name up in a
    /// few tables, and hashing a string each time cost more than the rest of
    /// the lookup. Swift's seeded hash, so it resists collisions as well as
    /// the string's own.
    private let textHash: Int

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
        self.isValid = true
        self.textHash = rawValue.hashValue
    }

    /// Creates a name from a literal in source code.
    ///
    /// An invalid literal does not stop the program: every use of the name
    /// throws ``TypedNotificationError/Code/invalidName``, saying why, and
    /// ``validate(_:)`` finds it in a test. Use ``init(validating:)`` for run-time text.
    public init(stringLiteral value: String) {
        self.rawValue = value
        self.isValid = Self.problem(with: value.utf8, maximumLength: Self.maximumLength) == nil
        self.textHash = value.hashValue
    }

    /// A name whose text has already passed ``problem(with:maximumLength:)``.
    init(checked rawValue: String) {
        self.rawValue = rawValue
        self.isValid = true
        self.textHash = rawValue.hashValue
    }

    /// Why this name cannot be used, or `nil` when it can: only a name made
    /// from an invalid literal has one.
    @_spi(TransportAuthoring) public var validationError: TypedNotificationError? {
        validationError(declaredBy: nil)
    }

    /// The name, or why it cannot be used, naming `type` as where it was declared.
    package func validated(declaredBy type: Any.Type? = nil) throws(TypedNotificationError) -> Self {
        if isValid { return self }
        throw validationError(declaredBy: type) ?? TypedNotificationError(code: .invalidName, message: rawValue)
    }

    private func validationError(declaredBy type: Any.Type?) -> TypedNotificationError? {
        guard !isValid, let problem = Self.problem(with: rawValue.utf8, maximumLength: Self.maximumLength)
        else { return nil }
        let origin = type.map { "\(String(reflecting: $0)).name, the literal " } ?? "the literal "
        return TypedNotificationError(
            code: .invalidName,
            message:
                "\(origin)\(TypedNotificationError.quote(rawValue)), is not a valid notification name: it \(problem)"
        )
    }

    /// Checks the names of `types`, typically every notification type of a
    /// module, in one call for one test.
    ///
    /// - Throws: ``TypedNotificationError`` with code
    ///   ``TypedNotificationError/Code/invalidName`` whose message lists every
    ///   invalid name with the type that declared it, separated by `; `.
    public static func validate(_ types: [any TypedNotification.Type]) throws(TypedNotificationError) {
        let problems = types.compactMap { type in type.name.validationError(declaredBy: type)?.message }
        guard problems.isEmpty else {
            throw TypedNotificationError(code: .invalidName, message: problems.joined(separator: "; "))
        }
    }

    /// Names with the same text are the same name.
    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.textHash == rhs.textHash && lhs.rawValue == rhs.rawValue
    }

    /// Hashes the text (its hash value, computed when the name was made).
    public func hash(into hasher: inout Hasher) { hasher.combine(textHash) }

    /// The name's text.
    public var description: String { rawValue }

    /// Orders names by their text.
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    /// Why the UTF-8 bytes `text` are not a valid name, or `nil` if they are.
    ///
    /// Shared with endpoint labels, which follow the same rules with a shorter
    /// limit, and with the envelope decoder, which checks bytes before it makes
    /// a string of them.
    @_spi(TransportAuthoring) public static func problem(with text: some Sequence<UInt8>, maximumLength: Int) -> String?
    {
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
