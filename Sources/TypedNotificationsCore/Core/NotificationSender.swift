@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Who posted a notification: a process and a labelled center within it.
///
/// Every center has exactly one sender identity. ``instance`` tells two
/// centers apart that share a process and a label, and a restarted process
/// from the one that held its pid before.
public struct NotificationSender: Hashable, Sendable, CustomStringConvertible {
    /// The longest valid endpoint label, in UTF-8 bytes.
    package static let maximumEndpointLength = 64

    /// The posting process's id.
    public let processID: Int32
    /// The posting process's real user id.
    public let userID: UInt32
    /// The center's label, such as `app` or `widget`: 1 to 64 bytes of
    /// `A-Z a-z 0-9 . _ -`, not starting with a dot.
    public let endpoint: String
    /// A random number chosen when the center was created.
    public let instance: UInt64

    /// The hash value of all four fields, computed once: every received
    /// notification looks its sender up for gap detection, and hashing the
    /// label each time cost more than the rest of the lookup.
    private let identityHash: Int

    /// Creates a sender identity, validating the endpoint label.
    ///
    /// - Throws: ``TypedNotificationError`` with code
    ///   ``TypedNotificationError/Code/invalidEndpoint``.
    @_spi(TransportAuthoring) public init(
        processID: Int32,
        userID: UInt32,
        endpoint: String,
        instance: UInt64
    ) throws(TypedNotificationError) {
        if let problem = NotificationName.problem(
            with: endpoint.utf8,
            maximumLength: Self.maximumEndpointLength
        ) {
            throw TypedNotificationError(
                code: .invalidEndpoint,
                message: "endpoint label \(TypedNotificationError.quote(endpoint)) \(problem)"
            )
        }
        self.init(checkedProcessID: processID, userID: userID, endpoint: endpoint, instance: instance)
    }

    /// A new identity for a center in this process.
    package static func current(endpoint: String) throws(TypedNotificationError) -> Self {
        try Self(
            processID: SystemProcess.id,
            userID: SystemProcess.userID,
            endpoint: endpoint,
            instance: UInt64.random(in: 1...UInt64.max)
        )
    }

    /// An identity for this process whose label is known to be valid.
    package static func unchecked(endpoint: String) -> Self {
        Self(
            checkedProcessID: SystemProcess.id,
            userID: SystemProcess.userID,
            endpoint: endpoint,
            instance: UInt64.random(in: 1...UInt64.max)
        )
    }

    /// An identity whose endpoint label has already been validated.
    init(checkedProcessID: Int32, userID: UInt32, endpoint: String, instance: UInt64) {
        self.processID = checkedProcessID
        self.userID = userID
        self.endpoint = endpoint
        self.instance = instance
        var hasher = Hasher()
        hasher.combine(checkedProcessID)
        hasher.combine(userID)
        hasher.combine(endpoint)
        hasher.combine(instance)
        identityHash = hasher.finalize()
    }

    /// The same process, user, label and instance.
    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.identityHash == rhs.identityHash && lhs.instance == rhs.instance && lhs.processID == rhs.processID
            && lhs.userID == rhs.userID && lhs.endpoint == rhs.endpoint
    }

    /// Hashes the four fields (their hash value, computed when the identity was made).
    public func hash(into hasher: inout Hasher) { hasher.combine(identityHash) }

    /// `endpoint(pid)`, for logs.
    public var description: String { "\(endpoint)(\(processID))" }
}

/// Which senders an observer wants to hear from.
public struct SenderFilter: Sendable {
    private enum Kind: Sendable {
        case any
        case others
        case endpoint(String)
        case process(Int32)
        case sender(NotificationSender)
    }

    private let kind: Kind

    /// Every sender, including the observing center itself.
    public static let any = SenderFilter(kind: .any)
    /// Every sender except the observing center itself.
    public static let others = SenderFilter(kind: .others)

    /// Only centers with this endpoint label, in any process.
    public static func endpoint(_ label: String) -> SenderFilter { .init(kind: .endpoint(label)) }
    /// Only centers in the process with this id.
    public static func process(_ id: Int32) -> SenderFilter { .init(kind: .process(id)) }
    /// Only this one center.
    public static func only(_ sender: NotificationSender) -> SenderFilter { .init(kind: .sender(sender)) }

    /// Whether a notification from `sender` passes, as seen by `observer`.
    func accepts(_ sender: NotificationSender, observer: NotificationSender) -> Bool {
        switch kind {
        case .any: true
        case .others: sender != observer
        case .endpoint(let label): sender.endpoint == label
        case .process(let id): sender.processID == id
        case .sender(let only): sender == only
        }
    }

    /// The filter, for logs.
    package var description: String {
        switch kind {
        case .any: "any sender"
        case .others: "other senders"
        case .endpoint(let label): "endpoint \(label)"
        case .process(let id): "process \(id)"
        case .sender(let sender): "sender \(sender)"
        }
    }
}
