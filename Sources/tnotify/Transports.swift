import Foundation
import TypedNotifications
import TypedNotificationsRedis

/// Which transport a command uses; the same default for every command, so
/// `watch` in one terminal and `post` in another meet with no flags.
enum TransportChoice: String {
    case socket
    case file
    case redis

    /// `--transport`, or `redis` when only `--url` is given, or `fallback`.
    static func from(_ arguments: Arguments, fallback: TransportChoice = .socket) throws(CommandFailure)
        -> TransportChoice
    {
        guard let text = arguments.option("transport") else {
            return arguments.option("url") != nil ? .redis : fallback
        }
        guard let choice = TransportChoice(rawValue: text) else {
            throw CommandFailure(code: .usage, message: "--transport must be socket, file or redis, not \(text)")
        }
        if choice == .redis && arguments.option("dir") != nil {
            throw CommandFailure(
                code: .usage, message: "--dir is for the socket and file transports; Redis takes --url")
        }
        if choice != .redis && arguments.option("url") != nil {
            throw CommandFailure(code: .usage, message: "--url needs --transport redis")
        }
        return choice
    }

    /// The directory of the socket or file transport.
    func directory(_ arguments: Arguments) -> String {
        arguments.option("dir")
            ?? (self == .socket ? SocketTransport.defaultDirectory : FileSignalTransport.defaultDirectory)
    }

    /// The Redis server: `--url`, else `$TNOTIFY_REDIS_URL`, else the local default.
    static func redisURL(_ arguments: Arguments) -> String {
        arguments.option("url") ?? ProcessInfo.processInfo.environment["TNOTIFY_REDIS_URL"] ?? "redis://127.0.0.1:6379"
    }

    /// Where the command's notifications are: a directory, or a redacted URL.
    func location(_ arguments: Arguments) -> String {
        guard self == .redis else { return directory(arguments) }
        let url = Self.redisURL(arguments)
        return (try? RedisConnectionOptions(url: url).redactedDescription) ?? url
    }
}

/// Where a watcher without a saved position starts, for the file and Redis transports.
enum StartChoice {
    case end
    case beginning
    case newest(Int)

    var file: ReadStart {
        switch self {
        case .end: .end
        case .beginning: .beginning
        case .newest(let count): .newest(count)
        }
    }

    var redis: ReadStart {
        switch self {
        case .end: .end
        case .beginning: .beginning
        case .newest(let count): .newest(count)
        }
    }
}

/// A hub over any of the transports, behind one interface for the commands.
enum AnyHub: Sendable {
    case socket(NotificationHub<SocketTransport>)
    case file(NotificationHub<FileSignalTransport>)
    case redis(NotificationHub<RedisStreamsTransport>)

    /// A hub over the transport the command line chose.
    static func make(
        _ choice: TransportChoice, arguments: Arguments, endpoint: String, identity: String? = nil,
        start: StartChoice = .end
    ) throws(TypedNotificationError) -> AnyHub {
        try make(
            choice, directory: choice.directory(arguments), redisURL: TransportChoice.redisURL(arguments),
            endpoint: endpoint, identity: identity, start: start)
    }

    /// A hub over `choice`, in `directory` or on the server at `redisURL`.
    static func make(
        _ choice: TransportChoice, directory: String, redisURL: String = "", endpoint: String,
        identity: String? = nil, start: StartChoice = .end
    ) throws(TypedNotificationError) -> AnyHub {
        switch choice {
        case .socket:
            return .socket(try NotificationHub(endpoint: endpoint, transport: SocketTransport(directory: directory)))
        case .file:
            return .file(
                try NotificationHub(
                    endpoint: endpoint,
                    transport: FileSignalTransport(directory: directory, identity: identity, firstRead: start.file)
                )
            )
        case .redis:
            return .redis(
                try NotificationHub(
                    endpoint: endpoint,
                    transport: RedisStreamsTransport(url: redisURL, identity: identity, firstRead: start.redis)
                )
            )
        }
    }

    /// Why the transport ended the hub, if it did.
    var failure: TypedNotificationError? {
        switch self {
        case .socket(let hub): hub.failure
        case .file(let hub): hub.failure
        case .redis(let hub): hub.failure
        }
    }

    /// Why a durable cursor could not be used, for the file transport.
    /// The names whose reader cannot reach its server now, with why (Redis only).
    var readerErrors: [NotificationName: TypedNotificationError] {
        switch self {
        case .socket, .file: [:]
        case .redis(let hub): hub.transport.readerErrors
        }
    }

    func cursorProblem(for name: NotificationName) -> String? {
        switch self {
        case .socket, .redis: nil
        case .file(let hub): hub.transport.cursorProblem(for: name)
        }
    }

    func post(_ raw: RawNotification, as name: NotificationName) throws(TypedNotificationError) {
        switch self {
        case .socket(let hub): try hub.post(raw, as: name)
        case .file(let hub): try hub.post(raw, as: name)
        case .redis(let hub): try hub.post(raw, as: name)
        }
    }

    func deliveries(
        ofRaw name: NotificationName,
        bufferingPolicy: NotificationBufferingPolicy
    ) throws(TypedNotificationError) -> DeliverySequence<RawNotification> {
        switch self {
        case .socket(let hub):
            try hub.deliveries(of: RawNotification.self, named: name, bufferingPolicy: bufferingPolicy)
        case .file(let hub): try hub.deliveries(of: RawNotification.self, named: name, bufferingPolicy: bufferingPolicy)
        case .redis(let hub):
            try hub.deliveries(of: RawNotification.self, named: name, bufferingPolicy: bufferingPolicy)
        }
    }

    func post<N: TypedNotification>(_ notification: N) throws(TypedNotificationError) {
        switch self {
        case .socket(let hub): try hub.post(notification)
        case .file(let hub): try hub.post(notification)
        case .redis(let hub): try hub.post(notification)
        }
    }

    func notifications<N: TypedNotification>(of type: N.Type) throws(TypedNotificationError) -> DeliverySequence<N> {
        switch self {
        case .socket(let hub): try hub.deliveries(of: type, bufferingPolicy: .unbounded)
        case .file(let hub): try hub.deliveries(of: type, bufferingPolicy: .unbounded)
        case .redis(let hub): try hub.deliveries(of: type, bufferingPolicy: .unbounded)
        }
    }

    /// Closes and unregisters; takes a bounded time (nothing waits in memory).
    func close() {
        switch self {
        case .socket(let hub): hub.close()
        case .file(let hub): hub.close()
        case .redis(let hub): hub.close()
        }
    }
}

/// The exit code for a library error.
func failure(_ error: TypedNotificationError) -> CommandFailure {
    let code: ExitCode =
        switch error.code {
        case .invalidName, .invalidEndpoint, .invalidConfiguration, .pathTooLong: .usage
        case .invalidPayload, .payloadEncodingFailed, .payloadTooLarge: .badPayload
        case .permissionDenied, .insecureDirectory, .authenticationFailed: .permission
        case .storageFull, .transportFailure: .ioError
        case .undelivered: .temporaryFailure
        default: .unavailable
        }
    return CommandFailure(code: code, message: error.message)
}

/// Validates a name before anything touches the file system.
func notificationName(_ text: String) throws(CommandFailure) -> NotificationName {
    do {
        return try NotificationName(validating: text)
    } catch {
        throw CommandFailure(code: .usage, message: error.message)
    }
}
