import Foundation
import NotificationPlatform
import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
import TypedNotificationsRedis

/// `tnotify post NAME [--json TEXT | --text TEXT | --stdin] [--transport socket|file|redis] [--dir DIR | --url URL] [--wait TIME]`
func postCommand(_ words: ArraySlice<String>) throws(CommandFailure) {
    let arguments = try Arguments(
        words, options: ["json", "text", "transport", "dir", "url", "wait"], flags: ["stdin"])
    guard arguments.positional.count == 1 else {
        throw CommandFailure(code: .usage, message: "post takes exactly one NAME")
    }
    let name = try notificationName(arguments.positional[0])
    let sources = [arguments.option("json") != nil, arguments.option("text") != nil, arguments.flag("stdin")]
    guard sources.filter({ $0 }).count <= 1 else {
        throw CommandFailure(code: .usage, message: "give at most one of --json, --text and --stdin")
    }
    var payload: [UInt8] = []
    if let json = arguments.option("json") {
        guard (try? JSONSerialization.jsonObject(with: Data(json.utf8), options: [.fragmentsAllowed])) != nil else {
            throw CommandFailure(code: .badPayload, message: "--json is not valid JSON: \(json.prefix(80))")
        }
        payload = Array(json.utf8)
    } else if let text = arguments.option("text") {
        payload = Array(text.utf8)
    } else if arguments.flag("stdin") {
        payload = Array(FileHandle.standardInput.readDataToEndOfFile())
    }
    for option in ["json", "text"] where !rawArgumentIsValidUTF8(after: "--" + option) {
        throw CommandFailure(code: .badPayload, message: "--\(option) is not valid UTF-8; use --stdin for bytes")
    }
    // Refused before anything is created: a bad payload leaves no trace.
    let limit = NotificationHubConfiguration().maximumPayloadSize
    guard payload.count <= limit else {
        throw CommandFailure(
            code: .badPayload, message: "the payload is \(payload.count) bytes; at most \(limit) can be posted")
    }
    let choice = try TransportChoice.from(arguments)
    var wait: Duration?
    if let text = arguments.option("wait") {
        guard choice == .socket else {
            throw CommandFailure(
                code: .usage, message: "--wait needs --transport socket: a file post is durable once written")
        }
        wait = try duration(text)
    }
    let hub: AnyHub
    do {
        hub = try AnyHub.make(choice, arguments: arguments, endpoint: "tnotify")
    } catch {
        throw failure(error)
    }
    defer { hub.close() }
    do {
        try hub.post(RawNotification(bytes: payload), as: name)
    } catch {
        throw failure(error)
    }
    if let wait, case .socket(let socketHub) = hub, !socketHub.transport.flush(timeout: wait) {
        let waiting = socketHub.transport.endpointsWithUnreadPosts.joined(separator: ", ")
        throw CommandFailure(
            code: .temporaryFailure,
            message:
                "\(name) was posted, but not read within \(text(wait)) by: \(waiting); it waits for them until they resume"
        )
    }
}

/// `5s`, `250ms`, `2m` or a plain number of seconds.
func duration(_ text: String) throws(CommandFailure) -> Duration {
    let units: [(suffix: String, nanoseconds: Double)] = [("ms", 1e6), ("s", 1e9), ("m", 60e9)]
    for unit in units where text.hasSuffix(unit.suffix) {
        if let value = Double(text.dropLast(unit.suffix.count)), value >= 0, value < 1e6 {
            return .nanoseconds(Int64(value * unit.nanoseconds))
        }
    }
    if let value = Double(text), value >= 0, value < 1e6 { return .nanoseconds(Int64(value * 1e9)) }
    throw CommandFailure(code: .usage, message: "--wait needs a time such as 5s or 250ms, not \(text.prefix(40))")
}

private func text(_ duration: Duration) -> String {
    let milliseconds = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    return milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(milliseconds) ms"
}

/// How many notifications `watch` holds for a slow terminal by default.
let defaultWatchBuffer = 10_000

/// `tnotify watch NAME... [--transport …] [--dir … | --url …] [--cursor ID] [--from end|beginning|newest:N] [--buffer N] [--json]`
func watchCommand(_ words: ArraySlice<String>) async throws(CommandFailure) {
    let arguments = try Arguments(
        words, options: ["transport", "dir", "url", "cursor", "from", "buffer"], flags: ["json"])
    var buffer = defaultWatchBuffer
    if let text = arguments.option("buffer") {
        guard let value = Int(text), value > 0 else {
            throw CommandFailure(code: .usage, message: "--buffer needs a whole number above 0, not \(text)")
        }
        buffer = value
    }
    guard !arguments.positional.isEmpty else {
        throw CommandFailure(code: .usage, message: "watch needs at least one NAME")
    }
    var names: [NotificationName] = []
    for text in arguments.positional { names.append(try notificationName(text)) }
    let choice = try TransportChoice.from(arguments)
    if arguments.option("cursor") != nil && choice == .socket {
        throw CommandFailure(
            code: .usage, message: "--cursor needs --transport file or redis: only logs and streams keep a position")
    }
    var start = StartChoice.end
    if let text = arguments.option("from") {
        guard choice != .socket else {
            throw CommandFailure(
                code: .usage,
                message: "--from needs --transport file or redis: only logs and streams keep what was posted"
            )
        }
        start = try startChoice(text)
    }
    let hub: AnyHub
    var sequences: [(NotificationName, DeliverySequence<RawNotification>)] = []
    do {
        hub = try AnyHub.make(
            choice, arguments: arguments, endpoint: "tnotify-watch", identity: arguments.option("cursor"), start: start)
        // Bounded, so a stalled terminal cannot grow the watcher without end;
        // what it drops is printed as `missed` on the next line.
        for name in names {
            sequences.append((name, try hub.deliveries(ofRaw: name, bufferingPolicy: .bufferingNewest(buffer))))
        }
    } catch {
        throw failure(error)
    }
    // Ctrl-C or SIGTERM: the loops end (a line being written is finished
    // and counts as handled), then the hub closes, sending what they
    // handled, and unregisters. Installed before "watching" is printed, so
    // a signal sent on seeing it is handled so too.
    let stop = SignalStop(hub: hub)
    emit(
        "watching \(names.map(\.rawValue).joined(separator: " ")) over the \(choice.rawValue) transport, \(choice.location(arguments))"
    )
    if choice == .file {
        for name in names {
            for refused in FileSignalTransport.refusedSegments(
                of: name, in: choice.directory(arguments), sharing: .ownerOnly)
            {
                warn("tnotify: the log of \(name) has a segment that is never read: \(refused)")
            }
        }
    }
    for name in names {
        if let problem = hub.cursorProblem(for: name) {
            warn(
                "tnotify: the cursor of \(name) could not be used (\(problem)); reading from the oldest notification kept, each marked as a redelivery"
            )
        }
    }
    let asJSON = arguments.flag("json")
    // Each line is written before the loop asks for the next delivery, and
    // asking, or leaving the loop, acknowledges: a durable cursor moves past
    // a notification only once its line was printed.
    let watching = Task {
        await withTaskGroup(of: Void.self) { group in
            for (name, sequence) in sequences {
                group.addTask {
                    for await delivered in sequence {
                        emit(asJSON ? jsonLine(name, delivered) : textLine(name, delivered))
                    }
                }
            }
        }
    }
    stop.whenFired { watching.cancel() }
    // A Redis reader that cannot reach its node keeps trying: say so, and
    // say when it reads again, rather than fall silent.
    let troubles = Task {
        guard choice == .redis else { return }
        var said: Set<NotificationName> = []
        while !Task.isCancelled {
            let now = hub.readerErrors
            for (name, error) in now where !said.contains(name) {
                warn("tnotify: cannot read \(name) now, trying again: \(error.message)")
            }
            for name in said.subtracting(now.keys) { warn("tnotify: reading \(name) again") }
            said = Set(now.keys)
            try? await Task.sleep(for: .milliseconds(500))
        }
    }
    await watching.value
    troubles.cancel()
    if stop.fired {
        hub.close()
        exit(0)
    }
    if let failure = hub.failure { throw CommandFailure(code: .unavailable, message: failure.message) }
}

/// Exits 0 when SIGINT or SIGTERM arrives: runs the action given to
/// ``whenFired(_:)`` (which ends the watch loops; the caller then closes the
/// hub and exits), and closes the hub and exits itself if that has not
/// happened 2 seconds later (a loop blocked writing to a stalled terminal).
/// The signal handler only writes to a pipe; a thread of its own reads it
/// and acts, so no signal is lost or acted on unsafely.
final class SignalStop: Sendable {
    private let state = Locked<(fired: Bool, action: (@Sendable () -> Void)?)>((false, nil))

    /// Whether a signal arrived.
    var fired: Bool { state.withLock { $0.fired } }

    init(hub: AnyHub) {
        _ = TerminationSignal.handle { [self] in
            let action = state.withLock { state in
                state.fired = true
                return state.action
            }
            action?()
            // A deadline, not a synchronization: the caller exits first
            // unless its loops cannot end.
            SystemProcess.pause(microseconds: 2_000_000)
            hub.close()
            exit(0)
        }
    }

    /// Runs `action` when a signal arrives, or now if one has.
    func whenFired(_ action: @escaping @Sendable () -> Void) {
        let fired = state.withLock { state in
            state.action = action
            return state.fired
        }
        if fired { action() }
    }
}

/// `tnotify latest NAME [--transport file|redis] [--dir DIR | --url URL] [--json]`
func latestCommand(_ words: ArraySlice<String>) throws(CommandFailure) {
    let arguments = try Arguments(words, options: ["transport", "dir", "url"], flags: ["json"])
    guard arguments.positional.count == 1 else {
        throw CommandFailure(code: .usage, message: "latest takes exactly one NAME")
    }
    let name = try notificationName(arguments.positional[0])
    let choice = try TransportChoice.from(arguments, fallback: .file)
    guard choice != .socket else {
        throw CommandFailure(
            code: .usage, message: "latest needs --transport file or redis: the socket transport keeps nothing")
    }
    let message: TransportMessage?
    do throws(TypedNotificationError) {
        switch choice {
        case .file, .socket:
            message = try FileSignalTransport(directory: choice.directory(arguments)).latestMessage(of: name)
        case .redis:
            let hub = try NotificationHub(
                endpoint: "tnotify", transport: RedisStreamsTransport(url: TransportChoice.redisURL(arguments)))
            defer { hub.close() }
            message = try hub.transport.latestMessage(of: name)
        }
    } catch {
        throw failure(error)
    }
    guard let message, case .encoded(let encoded) = message.payload else {
        throw CommandFailure(code: .unavailable, message: "no notification of \(name) in \(choice.location(arguments))")
    }
    let delivered = DeliveredNotification(
        notification: RawNotification(bytes: Array(encoded.payload)),
        delivery: NotificationDelivery(
            sender: message.sender, sequence: message.sequence, timestamp: message.timestamp, missed: 0)
    )
    emit(arguments.flag("json") ? jsonLine(name, delivered) : textLine(name, delivered))
}

/// `tnotify ls [--transport socket|file|redis] [--dir DIR | --url URL]`
func listCommand(_ words: ArraySlice<String>) throws(CommandFailure) {
    let arguments = try Arguments(words, options: ["transport", "dir", "url"], flags: [])
    guard arguments.positional.isEmpty else { throw CommandFailure(code: .usage, message: "ls takes no NAME") }
    // With no --transport, the two that need no server; --url alone means Redis.
    let choices: [TransportChoice] =
        arguments.option("transport") == nil && arguments.option("url") == nil
        ? [.socket, .file] : [try TransportChoice.from(arguments)]
    for choice in choices {
        let directory = choice.directory(arguments)
        emit("\(choice.rawValue) transport, \(choice.location(arguments)):")
        switch choice {
        case .redis:
            try listStreams(arguments)
        case .socket:
            let endpoints = SocketTransport.endpoints(in: directory)
            if endpoints.isEmpty { emit("  no sockets") }
            for endpoint in endpoints {
                let state = endpoint.isAlive ? "alive" : "dead"
                let owner = endpoint.endpoint.map { "\($0) pid \(endpoint.processID ?? 0)" } ?? "unregistered"
                let names = endpoint.names.isEmpty ? "no names" : endpoint.names.map(\.rawValue).joined(separator: " ")
                let spool = endpoint.spooledBytes > 0 ? ", \(endpoint.spooledBytes) bytes spooled" : ""
                emit("  \(endpoint.identifier)  \(owner) \(state): \(names)\(spool)")
            }
        case .file:
            let logs = FileSignalTransport.logs(in: directory)
            if logs.isEmpty { emit("  no logs") }
            for log in logs {
                emit("  \(log.name)  \(log.bytes) bytes in \(log.segments) segment(s)")
                for refused in log.refusedSegments { emit("    refused: \(refused)") }
                for cursor in log.cursors {
                    if let problem = cursor.problem {
                        emit(
                            "    cursor \(cursor.identity): unusable (\(problem)); its next run reads from the oldest kept"
                        )
                    } else if cursor.holdsRetention {
                        emit(
                            "    cursor \(cursor.identity): \(cursor.bytesBehind) bytes behind, kept from retention for it"
                        )
                    } else {
                        emit(
                            "    cursor \(cursor.identity): \(cursor.bytesBehind) bytes behind, past the limit: retention goes on without it"
                        )
                    }
                }
            }
        }
    }
}

/// `tnotify gc [--transport socket|file] [--dir DIR]`
func gcCommand(_ words: ArraySlice<String>) throws(CommandFailure) {
    let arguments = try Arguments(words, options: ["transport", "dir", "url"], flags: [])
    guard arguments.positional.isEmpty else { throw CommandFailure(code: .usage, message: "gc takes no NAME") }
    let choices: [TransportChoice] =
        arguments.option("transport") == nil && arguments.option("url") == nil
        ? [.socket, .file] : [try TransportChoice.from(arguments)]
    for choice in choices {
        let directory = choice.directory(arguments)
        switch choice {
        case .redis:
            throw CommandFailure(
                code: .usage,
                message:
                    "gc has nothing to do on Redis: every post trims its stream (maximumLength, maximumAge) and a reader leaves nothing behind"
            )
        case .socket:
            emit("socket transport: reaped \(SocketTransport.reapDeadEndpoints(in: directory)) dead endpoint(s)")
        case .file:
            emit("file transport: deleted \(FileSignalTransport.applyRetention(in: directory)) old segment(s)")
        }
    }
}

/// `end`, `beginning` or `newest:N` (N above 0).
func startChoice(_ text: String) throws(CommandFailure) -> StartChoice {
    switch text {
    case "end": return .end
    case "beginning": return .beginning
    default:
        if text.hasPrefix("newest:"), let count = Int(text.dropFirst("newest:".count)), count > 0 {
            return .newest(count)
        }
        throw CommandFailure(
            code: .usage, message: "--from takes end, beginning or newest:N (N a whole number above 0), not \(text)")
    }
}

/// Lists the notification streams on the Redis server, with their durable identities.
func listStreams(_ arguments: Arguments) throws(CommandFailure) {
    let streams: [RedisStreamSummary]
    do {
        streams = try RedisStreamsTransport.streams(
            options: try RedisConnectionOptions(url: TransportChoice.redisURL(arguments)))
    } catch {
        throw failure(error)
    }
    if streams.isEmpty { emit("  no streams") }
    for stream in streams {
        emit("  \(stream.name)  \(stream.length) entries")
        for identity in stream.identities {
            let behind = identity.behind.map { "\($0) behind" } ?? "behind by an unknown count (entries trimmed)"
            emit("    identity \(identity.name): \(identity.pending) pending, \(behind)")
        }
    }
}

/// Whether the command-line argument after `option`, as the process got its
/// bytes, is valid UTF-8 (or absent). Swift's `CommandLine.arguments`
/// repairs invalid bytes into U+FFFD, which would post something else.
func rawArgumentIsValidUTF8(after option: String) -> Bool {
    let count = Int(CommandLine.argc)
    var index = 1
    while index < count - 1 {
        if let current = CommandLine.unsafeArgv[index], String(cString: current) == option {
            guard let next = CommandLine.unsafeArgv[index + 1] else { return true }
            return String(validatingCString: next) != nil
        }
        index += 1
    }
    return true
}
