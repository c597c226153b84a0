import Foundation
@_spi(TransportAuthoring) import TypedNotifications
import TypedNotificationsCatalog

/// The transports `tnotify` offers, as `--transport` lists them.
var transportNames: String {
    let names = TransportCatalog.tools.map(\.name)
    return names.dropLast().joined(separator: ", ") + " or " + (names.last ?? "")
}

/// Which transport a command uses (`--transport`, or the one that meets at
/// a server when only `--url` is given, or `fallback`): the same default for
/// every command, so `watch` in one terminal and `post` in another meet with
/// no flags. Read from the transport catalog: a new transport needs no
/// change here.
func chosenTransport(_ arguments: Arguments, fallback: String = "socket") throws(CommandFailure) -> TransportEntry {
    let entry: TransportEntry?
    if let text = arguments.option("transport") {
        entry = TransportCatalog.tools.first { $0.name == text }
        guard entry != nil else {
            throw CommandFailure(code: .usage, message: "--transport must be \(transportNames), not \(text)")
        }
    } else if arguments.option("url") != nil {
        entry = TransportCatalog.tools.first { if case .server = $0.meeting { true } else { false } }
    } else {
        entry = TransportCatalog.tools.first { $0.name == fallback }
    }
    guard let entry else { throw CommandFailure(code: .usage, message: "no transport \(fallback)") }
    switch entry.meeting {
    case .server where arguments.option("dir") != nil:
        throw CommandFailure(
            code: .usage, message: "--dir is for transports that meet in a directory; \(entry.name) takes --url")
    case .directory where arguments.option("url") != nil, .process where arguments.option("url") != nil:
        throw CommandFailure(code: .usage, message: "--url needs a transport that meets at a server, not \(entry.name)")
    default:
        return entry
    }
}

extension TransportEntry {
    /// Where the command's endpoints meet: `--dir` or the default directory;
    /// `--url`, else `$TNOTIFY_<NAME>_URL` (`TNOTIFY_REDIS_URL`), else the default server.
    func place(_ arguments: Arguments) -> TransportPlace {
        switch meeting {
        case .process: return defaultPlace
        case .directory(let path): return .directory(arguments.option("dir") ?? path)
        case .server(let url):
            let variable = "TNOTIFY_\(name.uppercased())_URL"
            return .server(arguments.option("url") ?? ProcessInfo.processInfo.environment[variable] ?? url)
        }
    }

    /// Where the command's notifications are, as printed: a directory, or a
    /// URL without its password.
    func location(_ arguments: Arguments) -> String {
        describe(place(arguments).text)
    }

    /// A hub over this transport where the command line says.
    func makeHub(
        _ arguments: Arguments, endpoint: String, identity: String? = nil, start: ReadStart = .end
    ) throws(TypedNotificationError) -> AnyHub {
        try makeHub(
            at: place(arguments), endpoint: endpoint,
            request: TransportRequest(identity: identity, firstRead: start, sharedWithGroup: arguments.flag("group")))
    }
}

extension AnyHub {
    /// ``readerErrors`` now and as it changes; `nil` for a transport whose
    /// readers cannot lose their server.
    func readerErrorUpdates() -> AsyncStream<[NotificationName: TypedNotificationError]>? {
        (transport as? any ReportsReaderErrors)?.readerErrorUpdates()
    }

    /// Why a durable cursor could not be used.
    func cursorProblem(for name: NotificationName) -> String? {
        (transport as? any ReportsCursorProblems)?.cursorProblem(for: name)
    }

    /// Why a durable identity's marker for a namespace could not be used.
    func cursorProblem(in namespace: NotificationNamespace) -> String? {
        (transport as? any ReportsCursorProblems)?.cursorProblem(in: namespace)
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

/// `selectors` without those another one covers (`app.b.x` and `app.b.*`
/// beside `app.*`) or repeats: each notification matches one of the rest,
/// so watch prints it once. Namespaces nest or are apart, never overlap
/// partly, so what is left is disjoint.
func distinctSelectors(_ selectors: [NotificationSelector]) -> [NotificationSelector] {
    var kept: [NotificationSelector] = []
    for (index, selector) in selectors.enumerated() {
        let covered = selectors.enumerated().contains { other, candidate in
            guard other != index, case .namespace(let namespace) = candidate else {
                return other < index && candidate == selector
            }
            switch selector {
            case .name(let name): return namespace.contains(name)
            case .namespace(let inner): return namespace.contains(inner.root) && (namespace != inner || other < index)
            }
        }
        if !covered { kept.append(selector) }
    }
    return kept
}

/// Validates a name before anything touches the file system.
/// A name, or with `.*` at its end a namespace (`com.example.*` is every
/// name under `com.example`, that name included).
func notificationSelector(_ text: String) throws(CommandFailure) -> NotificationSelector {
    guard text.hasSuffix(".*") else { return .name(try notificationName(text)) }
    do {
        return .namespace(try NotificationNamespace(validating: String(text.dropLast(2))))
    } catch {
        throw CommandFailure(code: .usage, message: error.message)
    }
}

func notificationName(_ text: String) throws(CommandFailure) -> NotificationName {
    do {
        return try NotificationName(validating: text)
    } catch {
        throw CommandFailure(code: .usage, message: error.message)
    }
}
