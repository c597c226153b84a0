/// The one error type this package throws.
///
/// Switch on ``code`` to react to a kind of failure; show ``message`` to a
/// person. ``cause`` keeps the lower-level error (a decoding error, an errno)
/// when there is one.
public struct TypedNotificationError: Error, CustomStringConvertible {
    /// What kind of failure this is.
    ///
    /// A struct rather than an enum so that later versions can add codes
    /// without breaking exhaustive switches in client code.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case invalidName
            case invalidEndpoint
            case invalidPayload
            case payloadEncodingFailed
            case payloadTooLarge
            case invalidConfiguration
            case closed
            case transportFailure
            case truncatedEnvelope
            case badMagic
            case unsupportedVersion
            case lengthOutOfBounds
            case checksumMismatch
            case malformedEnvelope
            case pathTooLong
            case insecureDirectory
            case permissionDenied
            case storageFull
            case undelivered
            case unreachable
            case authenticationFailed
            case notReplicated
            case unsupported
        }

        private let base: Base

        private init(_ base: Base) { self.base = base }

        /// A notification name broke the naming rules of ``NotificationName``.
        public static let invalidName = Code(.invalidName)
        /// An endpoint label broke the rules of ``NotificationSender/endpoint``.
        public static let invalidEndpoint = Code(.invalidEndpoint)
        /// Payload bytes could not be decoded into the requested type.
        public static let invalidPayload = Code(.invalidPayload)
        /// A value could not be encoded into payload bytes.
        public static let payloadEncodingFailed = Code(.payloadEncodingFailed)
        /// An encoded payload is larger than the center's limit; nothing was sent.
        public static let payloadTooLarge = Code(.payloadTooLarge)
        /// A configuration value is out of its documented range.
        public static let invalidConfiguration = Code(.invalidConfiguration)
        /// The center or transport has been closed.
        public static let closed = Code(.closed)
        /// The transport failed to send or subscribe.
        public static let transportFailure = Code(.transportFailure)
        // The envelope's codes: only `EnvelopeDecoder` (transport authoring)
        // throws them; a center counts such bytes and never throws them.

        /// An envelope ended before its header or its stated length.
        @_spi(TransportAuthoring) public static let truncatedEnvelope = Code(.truncatedEnvelope)
        /// Bytes that should be an envelope do not start with its magic number.
        @_spi(TransportAuthoring) public static let badMagic = Code(.badMagic)
        /// An envelope has a format version this decoder does not read.
        @_spi(TransportAuthoring) public static let unsupportedVersion = Code(.unsupportedVersion)
        /// A length field of an envelope is outside its limits or disagrees with the others.
        @_spi(TransportAuthoring) public static let lengthOutOfBounds = Code(.lengthOutOfBounds)
        /// An envelope's CRC-32C does not match its bytes.
        @_spi(TransportAuthoring) public static let checksumMismatch = Code(.checksumMismatch)
        /// An envelope breaks the format in another way: a reserved byte set,
        /// sequence number 0, or bytes after the record.
        @_spi(TransportAuthoring) public static let malformedEnvelope = Code(.malformedEnvelope)
        /// A path is longer than the system allows (for a socket on Apple
        /// platforms, 252 bytes: an address of `SOCK_MAXADDRLEN`); the message
        /// names the path and the limit.
        public static let pathTooLong = Code(.pathTooLong)
        /// A shared directory is a symbolic link, belongs to another user, or is
        /// writable by users it should not be; nothing was created in it.
        public static let insecureDirectory = Code(.insecureDirectory)
        /// The system refused access to a file or socket.
        public static let permissionDenied = Code(.permissionDenied)
        /// A write did not fit: the disk or a quota is full, or the process's
        /// file-size limit (RLIMIT_FSIZE) was reached. Nothing partial was kept.
        public static let storageFull = Code(.storageFull)
        /// A post reached some observers but not all: the endpoints in
        /// ``TypedNotificationError/undeliveredEndpoints`` did not take it (their
        /// spool was full, or the file system refused it) and will see it as
        /// missed. Unlike every other error from a post, the notification was
        /// sent: everyone else has it.
        public static let undelivered = Code(.undelivered)
        /// A transport's server could not be reached, or the connection to it
        /// broke before it answered: what was being sent may or may not have
        /// arrived (the message says which is known). The transport
        /// reconnects on its own; retry later.
        public static let unreachable = Code(.unreachable)
        /// A server refused the credentials a transport gave it (a wrong
        /// password or user, or a user without the needed permissions).
        public static let authenticationFailed = Code(.authenticationFailed)
        /// A post was stored by the server but fewer of its replicas than the
        /// transport was told to wait for confirmed it in time (Redis `WAIT`):
        /// it may be lost if that server fails over now. Like
        /// ``undelivered``, the notification was sent, and it is not sent again.
        public static let notReplicated = Code(.notReplicated)
        /// The transport cannot do what was asked of it: for example observe
        /// a ``NotificationNamespace`` on a transport that serves single
        /// names only. The message says what it can do instead.
        public static let unsupported = Code(.unsupported)

        /// Whether a post that failed with this code was sent all the same
        /// (``undelivered``, ``notReplicated``): it keeps its sequence number
        /// and is never sent again.
        package var meansSent: Bool { base == .undelivered || base == .notReplicated }

        /// The code's name, for example `invalidName`.
        public var description: String { base.rawValue }
    }

    /// What kind of failure this is.
    public var code: Code
    /// A sentence a person can act on.
    public var message: String
    /// The lower-level error that caused this one, if any.
    public var cause: (any Error)?
    /// For ``Code/undelivered``: the endpoints that did not take the
    /// notification. Empty for every other code.
    public var undeliveredEndpoints: [UndeliveredEndpoint] = []

    /// Creates an error.
    @_spi(TransportAuthoring) public init(code: Code, message: String, cause: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
    }

    /// The code, the message and the cause, on one line.
    public var description: String {
        if let cause {
            return "\(code): \(message) (cause: \(cause))"
        }
        return "\(code): \(message)"
    }
}

extension TypedNotificationError {
    /// Renders untrusted text for an error message: quoted, escaped and cut
    /// short, so hostile input cannot flood a log or forge a line.
    @_spi(TransportAuthoring) public static func quote(_ text: String, limit: Int = 64) -> String {
        let shown = text.unicodeScalars.prefix(limit)
        var result = "\""
        for scalar in shown {
            result += scalar.escaped(asASCII: true)
        }
        if text.unicodeScalars.count > limit {
            result += "…"
        }
        return result + "\""
    }
}

extension TypedNotificationError {
    /// An endpoint that did not take a notification that was posted
    /// (``TypedNotificationError/Code/undelivered``): it will see it as missed.
    public struct UndeliveredEndpoint: Hashable, Sendable {
        /// Its label, as the endpoint registered it (`widget`), or, when the
        /// registry no longer names it, the identifier of its socket.
        public var endpoint: String
        /// Its process, as it registered; 0 when the registry no longer names it.
        public var processID: Int32

        /// An endpoint by its label and process.
        package init(endpoint: String, processID: Int32) {
            self.endpoint = endpoint
            self.processID = processID
        }
    }
}
