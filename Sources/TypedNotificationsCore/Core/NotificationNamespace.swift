/// Every notification name under a prefix, by whole dot-separated labels.
///
/// The namespace `com.example.jobs` covers the name `com.example.jobs`
/// itself and every name that starts with `com.example.jobs.`:
/// `com.example.jobs.started` and `com.example.jobs.batch.done` are in it,
/// `com.example.jobsx` and `com.example` are not.
///
/// Its text follows the rules of a ``NotificationName`` and does not end
/// with a dot, so that every namespace is also the name of its first member.
/// As with a name, a string literal is accepted where a namespace is
/// expected, and an invalid one is refused with
/// ``TypedNotificationError/Code/invalidName`` by every observer that uses
/// it, never by stopping the program.
public struct NotificationNamespace: Hashable, Sendable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    /// The namespace's text: the name it starts at.
    public var rawValue: String { root.rawValue }

    /// The name the namespace starts at (the namespace `com.example`
    /// starts at the name `com.example`).
    @_spi(TransportAuthoring) public let root: NotificationName

    /// Why the text is not a namespace, or `nil`: only a literal can have one.
    private let problem: String?

    /// Validates `rawValue` and creates a namespace from it.
    ///
    /// - Throws: ``TypedNotificationError`` with code
    ///   ``TypedNotificationError/Code/invalidName`` naming the rule that failed.
    public init(validating rawValue: String) throws(TypedNotificationError) {
        let problem =
            NotificationName.problem(with: rawValue.utf8, maximumLength: NotificationName.maximumLength)
            ?? (rawValue.utf8.last == UInt8(ascii: ".") ? "ends with a dot" : nil)
        if let problem {
            throw TypedNotificationError(
                code: .invalidName,
                message: "notification namespace \(TypedNotificationError.quote(rawValue)) \(problem)"
            )
        }
        root = NotificationName(checked: rawValue)
        self.problem = nil
    }

    /// Creates a namespace from a literal in source code, such as
    /// `"com.example.jobs"`.
    ///
    /// An invalid literal does not stop the program: every observer of it
    /// throws ``TypedNotificationError/Code/invalidName``, saying why. Use
    /// ``init(validating:)`` for run-time text.
    public init(stringLiteral value: String) {
        root = NotificationName(stringLiteral: value)
        problem =
            NotificationName.problem(with: value.utf8, maximumLength: NotificationName.maximumLength)
            ?? (value.utf8.last == UInt8(ascii: ".") ? "ends with a dot" : nil)
    }

    /// Why this namespace cannot be used, or `nil` when it can: only a
    /// namespace made from an invalid literal has one.
    @_spi(TransportAuthoring) public var validationError: TypedNotificationError? {
        problem.map { problem in
            TypedNotificationError(
                code: .invalidName,
                message: "notification namespace, the literal \(TypedNotificationError.quote(rawValue)), \(problem)")
        }
    }

    /// This namespace, or its validation error.
    package func validated() throws(TypedNotificationError) -> Self {
        if let error = validationError { throw error }
        return self
    }

    /// Whether `name` is in the namespace: it is the namespace's text, or
    /// starts with that text and a dot. A name made from an invalid literal
    /// is in no namespace, as it reaches no observer.
    public func contains(_ name: NotificationName) -> Bool {
        guard name.isValid, problem == nil else { return false }
        let prefix = root.rawValue.utf8
        let text = name.rawValue.utf8
        guard text.starts(with: prefix) else { return false }
        let next = text.index(text.startIndex, offsetBy: prefix.count)
        return next == text.endIndex || text[next] == UInt8(ascii: ".")
    }

    /// Calls `body` with every namespace that contains `name`, from the
    /// shortest (its first label) to the name itself: as many as the name
    /// has labels, and no others.
    ///
    /// A transport looks a post's name up this way among its namespace
    /// subscriptions, at a cost of the name's depth, however many
    /// namespaces are observed.
    @_spi(TransportAuthoring) public static func forEach(
        containing name: NotificationName, _ body: (NotificationNamespace) -> Void
    ) {
        guard name.isValid else { return }
        let text = name.rawValue
        var index = text.utf8.startIndex
        while index != text.utf8.endIndex {
            if text.utf8[index] == UInt8(ascii: "."), index != text.utf8.startIndex {
                body(NotificationNamespace(checked: String(text[..<index])))
            }
            index = text.utf8.index(after: index)
        }
        if text.utf8.last != UInt8(ascii: ".") { body(NotificationNamespace(checked: text)) }
    }

    private init(checked text: String) {
        root = NotificationName(checked: text)
        problem = nil
    }

    /// The namespace's text.
    public var description: String { rawValue }

    /// Orders namespaces by their text.
    package static func < (lhs: Self, rhs: Self) -> Bool { lhs.root < rhs.root }
}

/// What a transport subscribes to: one name, or every name in a namespace.
@_spi(TransportAuthoring) @_spi(CenterAuthoring)
public enum NotificationSelector: Hashable, Sendable, CustomStringConvertible {
    /// Exactly this name.
    case name(NotificationName)
    /// Every name in this namespace, including names first posted after the
    /// subscription.
    case namespace(NotificationNamespace)

    /// Whether a notification of `name` is selected.
    public func matches(_ name: NotificationName) -> Bool {
        switch self {
        case .name(let selected): selected == name
        case .namespace(let namespace): namespace.contains(name)
        }
    }

    /// The name, or the namespace followed by `.*` (`com.example.*`).
    public var description: String {
        switch self {
        case .name(let name): name.rawValue
        case .namespace(let namespace): namespace.rawValue + ".*"
        }
    }
}

extension NotificationSelector {
    /// This selector, or the validation error of its name or namespace.
    package func validated() throws(TypedNotificationError) -> Self {
        switch self {
        case .name(let name): .name(try name.validated())
        case .namespace(let namespace): .namespace(try namespace.validated())
        }
    }

    /// The one name this selects, for a transport called `kind` ("socket")
    /// that serves single names only.
    ///
    /// - Throws: ``TypedNotificationError/Code/unsupported`` for a namespace.
    @_spi(TransportAuthoring) public func name(servedBy kind: String) throws(TypedNotificationError)
        -> NotificationName
    {
        switch self {
        case .name(let name):
            return name
        case .namespace(let namespace):
            throw TypedNotificationError(
                code: .unsupported,
                message:
                    "the \(kind) transport observes single names, not the namespace \(namespace): observe each name")
        }
    }
}
