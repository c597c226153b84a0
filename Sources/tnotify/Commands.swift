import CTypedNotifications
import Foundation
import TypedNotifications

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `tnotify post NAME [--json TEXT | --text TEXT | --stdin] [--transport socket|file] [--dir DIR] [--wait TIME]`
func postCommand(_ words: ArraySlice<String>) throws(CommandFailure) {
    let arguments = try Arguments(words, options: ["json", "text", "transport", "dir", "wait"], flags: ["stdin"])
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
        hub = try AnyHub.make(choice, directory: choice.directory(arguments), endpoint: "tnotify")
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

/// `tnotify watch NAME... [--transport …] [--dir …] [--cursor ID] [--from end|beginning|newest:N] [--buffer N] [--json]`
func watchCommand(_ words: ArraySlice<String>) async throws(CommandFailure) {
    let arguments = try Arguments(words, options: ["transport", "dir", "cursor", "from", "buffer"], flags: ["json"])
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
    if arguments.option("cursor") != nil && choice != .file {
        throw CommandFailure(code: .usage, message: "--cursor needs --transport file: only logs keep a position")
    }
    var firstRead = FileLogStart.end
    if let text = arguments.option("from") {
        guard choice == .file else {
            throw CommandFailure(code: .usage, message: "--from needs --transport file: only logs keep what was posted")
        }
        firstRead = try logStart(text)
    }
    let hub: AnyHub
    var sequences: [(NotificationName, DeliverySequence<RawNotification>)] = []
    do {
        hub = try AnyHub.make(
            choice, directory: choice.directory(arguments), endpoint: "tnotify-watch",
            identity: arguments.option("cursor"), firstRead: firstRead)
        // Bounded, so a stalled terminal cannot grow the watcher without end;
        // what it drops is printed as `missed` on the next line.
        for name in names {
            sequences.append((name, try hub.deliveries(ofRaw: name, bufferingPolicy: .bufferingNewest(buffer))))
        }
    } catch {
        throw failure(error)
    }
    // Ctrl-C or SIGTERM: unregister, then exit cleanly.
    let stop = SignalStop(hub: hub)
    emit("watching \(names.map(\.rawValue).joined(separator: " ")) over the \(choice.rawValue) transport")
    for name in names {
        if let problem = hub.cursorProblem(for: name) {
            warn(
                "tnotify: the cursor of \(name) could not be used (\(problem)); reading from the oldest notification kept, each marked as a redelivery"
            )
        }
    }
    let asJSON = arguments.flag("json")
    // Each line is written before the loop asks for the next delivery, and
    // asking acknowledges: a durable cursor moves past a notification only
    // once its line was printed.
    await withTaskGroup(of: Void.self) { group in
        for (name, sequence) in sequences {
            group.addTask {
                for await delivered in sequence {
                    emit(asJSON ? jsonLine(name, delivered) : textLine(name, delivered))
                }
            }
        }
    }
    withExtendedLifetime(stop) {}
    if let failure = hub.failure { throw CommandFailure(code: .unavailable, message: failure.message) }
}

/// Closes the hub (unregistering it) and exits 0 when SIGINT or SIGTERM
/// arrives. The signal handler only writes to a pipe; a thread of its own
/// reads it and shuts down, so no signal is lost or acted on unsafely.
final class SignalStop {
    init(hub: AnyHub) {
        var ends: [CInt] = [-1, -1]
        guard ctn_pipe_cloexec(&ends) == 0, ctn_install_termination_pipe(ends[1]) == 0 else { return }
        let readEnd = ends[0]
        Thread.detachNewThread {
            var byte: UInt8 = 0
            while read(readEnd, &byte, 1) != 1 {}
            hub.close()
            exit(0)
        }
    }
}

/// `tnotify latest NAME [--dir DIR]`
func latestCommand(_ words: ArraySlice<String>) throws(CommandFailure) {
    let arguments = try Arguments(words, options: ["dir"], flags: ["json"])
    guard arguments.positional.count == 1 else {
        throw CommandFailure(code: .usage, message: "latest takes exactly one NAME")
    }
    let name = try notificationName(arguments.positional[0])
    let directory = TransportChoice.file.directory(arguments)
    do {
        let transport = try FileSignalTransport(directory: directory)
        guard let message = try transport.latestMessage(of: name), case .encoded(let encoded) = message.payload else {
            throw CommandFailure(code: .unavailable, message: "no notification of \(name) in \(directory)")
        }
        let delivered = DeliveredNotification(
            notification: RawNotification(bytes: Array(encoded.payload)),
            delivery: NotificationDelivery(
                sender: message.sender, sequence: message.sequence, timestamp: message.timestamp, missed: 0)
        )
        emit(arguments.flag("json") ? jsonLine(name, delivered) : textLine(name, delivered))
    } catch let error as CommandFailure {
        throw error
    } catch {
        throw failure(
            error as? TypedNotificationError ?? TypedNotificationError(code: .transportFailure, message: "\(error)"))
    }
}

/// `tnotify ls [--transport socket|file] [--dir DIR]`
func listCommand(_ words: ArraySlice<String>) throws(CommandFailure) {
    let arguments = try Arguments(words, options: ["transport", "dir"], flags: [])
    guard arguments.positional.isEmpty else { throw CommandFailure(code: .usage, message: "ls takes no NAME") }
    let choices: [TransportChoice] =
        arguments.option("transport") == nil ? [.socket, .file] : [try TransportChoice.from(arguments)]
    for choice in choices {
        let directory = choice.directory(arguments)
        emit("\(choice.rawValue) transport, \(directory):")
        switch choice {
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
                for cursor in log.cursors {
                    if let problem = cursor.problem {
                        emit(
                            "    cursor \(cursor.identity): unusable (\(problem)); its next run reads from the oldest kept"
                        )
                    } else {
                        emit("    cursor \(cursor.identity): \(cursor.bytesBehind) bytes behind")
                    }
                }
            }
        }
    }
}

/// `tnotify gc [--transport socket|file] [--dir DIR]`
func gcCommand(_ words: ArraySlice<String>) throws(CommandFailure) {
    let arguments = try Arguments(words, options: ["transport", "dir"], flags: [])
    guard arguments.positional.isEmpty else { throw CommandFailure(code: .usage, message: "gc takes no NAME") }
    let choices: [TransportChoice] =
        arguments.option("transport") == nil ? [.socket, .file] : [try TransportChoice.from(arguments)]
    for choice in choices {
        let directory = choice.directory(arguments)
        switch choice {
        case .socket:
            emit("socket transport: reaped \(SocketTransport.reapDeadEndpoints(in: directory)) dead endpoint(s)")
        case .file:
            emit("file transport: deleted \(FileSignalTransport.applyRetention(in: directory)) old segment(s)")
        }
    }
}

/// `end`, `beginning` or `newest:N` (N above 0) as a ``FileLogStart``.
func logStart(_ text: String) throws(CommandFailure) -> FileLogStart {
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
