import Foundation
import TypedNotifications

/// Which transport a command uses; the same default for every command, so
/// `watch` in one terminal and `post` in another meet with no flags.
enum TransportChoice: String {
    case socket
    case file

    static func from(_ arguments: Arguments) throws(CommandFailure) -> TransportChoice {
        guard let text = arguments.option("transport") else { return .socket }
        guard let choice = TransportChoice(rawValue: text) else {
            throw CommandFailure(code: .usage, message: "--transport must be socket or file, not \(text)")
        }
        return choice
    }

    func directory(_ arguments: Arguments) -> String {
        arguments.option("dir")
            ?? (self == .socket ? SocketTransport.defaultDirectory : FileSignalTransport.defaultDirectory)
    }
}

/// A hub over either transport, behind one interface for the commands.
enum AnyHub: Sendable {
    case socket(NotificationHub<SocketTransport>)
    case file(NotificationHub<FileSignalTransport>)

    static func make(
        _ choice: TransportChoice, directory: String, endpoint: String, identity: String? = nil,
        firstRead: FileLogStart = .end
    ) throws(TypedNotificationError) -> AnyHub {
        switch choice {
        case .socket:
            return .socket(try NotificationHub(endpoint: endpoint, transport: SocketTransport(directory: directory)))
        case .file:
            return .file(
                try NotificationHub(
                    endpoint: endpoint,
                    transport: FileSignalTransport(directory: directory, identity: identity, firstRead: firstRead)
                )
            )
        }
    }

    /// Why the transport ended the hub, if it did.
    var failure: TypedNotificationError? {
        switch self {
        case .socket(let hub): hub.failure
        case .file(let hub): hub.failure
        }
    }

    /// Why a durable cursor could not be used, for the file transport.
    func cursorProblem(for name: NotificationName) -> String? {
        switch self {
        case .socket: nil
        case .file(let hub): hub.transport.cursorProblem(for: name)
        }
    }

    func post(_ raw: RawNotification, as name: NotificationName) throws(TypedNotificationError) {
        switch self {
        case .socket(let hub): try hub.post(raw, as: name)
        case .file(let hub): try hub.post(raw, as: name)
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
        }
    }

    func post<N: TypedNotification>(_ notification: N) throws(TypedNotificationError) {
        switch self {
        case .socket(let hub): try hub.post(notification)
        case .file(let hub): try hub.post(notification)
        }
    }

    func notifications<N: TypedNotification>(of type: N.Type) throws(TypedNotificationError) -> DeliverySequence<N> {
        switch self {
        case .socket(let hub): try hub.deliveries(of: type, bufferingPolicy: .unbounded)
        case .file(let hub): try hub.deliveries(of: type, bufferingPolicy: .unbounded)
        }
    }

    /// Closes and unregisters; takes a bounded time (nothing waits in memory).
    func close() {
        switch self {
        case .socket(let hub): hub.close()
        case .file(let hub): hub.close()
        }
    }
}

/// The exit code for a library error.
func failure(_ error: TypedNotificationError) -> CommandFailure {
    let code: ExitCode =
        switch error.code {
        case .invalidName, .invalidEndpoint, .invalidConfiguration, .pathTooLong: .usage
        case .invalidPayload, .payloadEncodingFailed, .payloadTooLarge: .badPayload
        case .permissionDenied, .insecureDirectory: .permission
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
