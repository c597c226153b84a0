import Foundation
import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
import TypedNotificationsCatalog
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// `tnotify post NAME [--json TEXT | --text TEXT | --stdin] [--transport socket|file|redis] [--dir DIR | --url URL] [--wait TIME]`
func postCommand(_ words: ArraySlice<String>) throws(CommandFailure) {
    let arguments = try Arguments(
        words, options: ["json", "text", "transport", "dir", "url", "wait"], flags: ["stdin", "group"])
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
    let entry = try chosenTransport(arguments)
    var wait: Duration?
    if let text = arguments.option("wait") {
        guard !entry.keepsPosts else {
            throw CommandFailure(
                code: .usage,
                message: "--wait is for live transports such as socket: a \(entry.name) post is durable once written")
        }
        wait = try duration(text)
    }
    let hub: AnyHub
    do {
        hub = try entry.makeHub(arguments, endpoint: "tnotify")
    } catch {
        throw failure(error)
    }
    defer { hub.closeAndWait() }
    do {
        try hub.post(RawNotification(bytes: payload), as: name)
    } catch {
        throw failure(error)
    }
    if let wait, let waiting = hub.transport as? any WaitsForReaders, !waiting.flush(timeout: wait) {
        let waiting = waiting.endpointsWithUnreadPosts.joined(separator: ", ")
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

/// `tnotify watch NAME|PREFIX.*... [--transport …] [--dir … | --url …] [--cursor ID] [--from end|beginning|newest:N] [--buffer N] [--json]`
func watchCommand(_ words: ArraySlice<String>) async throws(CommandFailure) {
    let arguments = try Arguments(
        words, options: ["transport", "dir", "url", "cursor", "from", "buffer"], flags: ["json", "group"])
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
    var given: [NotificationSelector] = []
    for text in arguments.positional { given.append(try notificationSelector(text)) }
    let names = distinctSelectors(given)
    let entry = try chosenTransport(arguments)
    let keeping = TransportCatalog.tools.filter(\.keepsPosts).map(\.name).joined(separator: " or ")
    if arguments.option("cursor") != nil && !entry.keepsPosts {
        throw CommandFailure(
            code: .usage, message: "--cursor needs --transport \(keeping): only logs and streams keep a position")
    }
    var start = ReadStart.end
    if let text = arguments.option("from") {
        guard entry.keepsPosts else {
            throw CommandFailure(
                code: .usage,
                message: "--from needs --transport \(keeping): only logs and streams keep what was posted"
            )
        }
        start = try startChoice(text)
    }
    let hub: AnyHub
    var sequences: [DeliverySequence<RawNotification>] = []
    do {
        hub = try entry.makeHub(
            arguments, endpoint: "tnotify-watch", identity: arguments.option("cursor"), start: start)
        // Bounded, so a stalled terminal cannot grow the watcher without end;
        // what it drops is printed as `missed` on the next line.
        for name in names {
            sequences.append(try hub.deliveries(ofRaw: name, bufferingPolicy: .bufferingNewest(buffer)))
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
        "watching \(names.map(\.description).joined(separator: " ")) over the \(entry.name) transport, \(entry.location(arguments))"
    )
    for case .name(let name) in names {
        let sharing: DirectorySharing = arguments.flag("group") ? .group : .ownerOnly
        for warning in entry.warnings(name, entry.place(arguments).text, sharing) { warn("tnotify: " + warning) }
    }
    for case .name(let name) in names {
        if let problem = hub.cursorProblem(for: name) { warn(cursorWarning(name.description, problem)) }
    }
    for case .namespace(let namespace) in names {
        if let problem = hub.cursorProblem(in: namespace) {
            warn(
                "tnotify: the marker of \(namespace.rawValue).* could not be used (\(problem)); each of its names without a cursor of its own is read from the oldest notification kept, each marked as a redelivery"
            )
        }
    }
    let asJSON = arguments.flag("json")
    let durable = arguments.option("cursor") != nil
    // Each line is written before the loop asks for the next delivery, and
    // asking, or leaving the loop, acknowledges: a durable cursor moves past
    // a notification only once its line was printed.
    let watching = Task {
        await withTaskGroup(of: Void.self) { group in
            for (selector, sequence) in zip(names, sequences) {
                group.addTask {
                    // A namespace's names start reading as they are found:
                    // a cursor of one that could not be used is said before
                    // its first line.
                    var told: Set<NotificationName>?
                    if durable, case .namespace = selector { told = [] }
                    for await delivered in sequence {
                        if told?.insert(delivered.name).inserted == true,
                            let problem = hub.cursorProblem(for: delivered.name)
                        {
                            warn(cursorWarning(delivered.name.description, problem))
                        }
                        emit(asJSON ? jsonLine(delivered.name, delivered) : textLine(delivered.name, delivered))
                    }
                }
            }
        }
    }
    stop.whenFired { watching.cancel() }
    // A Redis reader that cannot reach its node keeps trying: say so, and
    // say when it reads again, rather than fall silent.
    // The transport pushes each change: nothing here wakes while none comes.
    let troubles = Task {
        guard let updates = hub.readerErrorUpdates() else { return }
        var said: Set<NotificationName> = []
        for await now in updates {
            for (name, error) in now where !said.contains(name) {
                warn("tnotify: cannot read \(name) now, trying again: \(error.message)")
            }
            for name in said.subtracting(now.keys) { warn("tnotify: reading \(name) again") }
            said = Set(now.keys)
        }
    }
    await watching.value
    troubles.cancel()
    // Closed and done before exiting: a durable identity's cursors are
    // saved, its reads ended at the server (also for a hub its transport
    // ended, which closed itself from its own thread).
    hub.closeAndWait()
    if stop.fired { exit(0) }
    if let failure = hub.failure { throw CommandFailure(code: .unavailable, message: failure.message) }
}

/// What `watch` says of a durable cursor that could not be used.
private func cursorWarning(_ name: String, _ problem: String) -> String {
    "tnotify: the cursor of \(name) could not be used (\(problem)); reading from the oldest notification kept, each marked as a redelivery"
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
            hub.closeAndWait(upTo: .seconds(2))
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
    let entry = try chosenTransport(arguments, fallback: "file")
    guard entry.keepsPosts else {
        let keeping = TransportCatalog.tools.filter(\.keepsPosts).map(\.name).joined(separator: " or ")
        throw CommandFailure(
            code: .usage, message: "latest needs --transport \(keeping): the \(entry.name) transport keeps nothing")
    }
    let delivered: DeliveredNotification<RawNotification>?
    do throws(TypedNotificationError) {
        let hub = try entry.makeHub(arguments, endpoint: "tnotify")
        defer { hub.closeAndWait() }
        delivered = try hub.latest(of: name)
    } catch {
        throw failure(error)
    }
    guard let delivered else {
        throw CommandFailure(code: .unavailable, message: "no notification of \(name) in \(entry.location(arguments))")
    }
    emit(arguments.flag("json") ? jsonLine(name, delivered) : textLine(name, delivered))
}

/// `tnotify ls [--transport socket|file|redis] [--dir DIR | --url URL]`
func listCommand(_ words: ArraySlice<String>) throws(CommandFailure) {
    let arguments = try Arguments(words, options: ["transport", "dir", "url"], flags: [])
    guard arguments.positional.isEmpty else { throw CommandFailure(code: .usage, message: "ls takes no NAME") }
    // With no --transport, the two that need no server; --url alone means Redis.
    for entry in try chosenTransports(arguments) {
        emit("\(entry.name) transport, \(entry.location(arguments)):")
        guard let list = entry.list else {
            emit("  nothing to list")
            continue
        }
        do {
            for line in try list(entry.place(arguments).text) { emit("  " + line) }
        } catch {
            throw failure(error)
        }
    }
}

/// `tnotify gc [--transport socket|file] [--dir DIR]`
func gcCommand(_ words: ArraySlice<String>) throws(CommandFailure) {
    let arguments = try Arguments(words, options: ["transport", "dir", "url"], flags: [])
    guard arguments.positional.isEmpty else { throw CommandFailure(code: .usage, message: "gc takes no NAME") }
    for entry in try chosenTransports(arguments) {
        guard let collect = entry.collectGarbage else {
            throw CommandFailure(code: .usage, message: entry.noGarbage)
        }
        do {
            emit("\(entry.name) transport: " + (try collect(entry.place(arguments).text)))
        } catch {
            throw failure(error)
        }
    }
}

/// The transport `--transport` or `--url` names; with neither, every one
/// that meets in a directory (they need no server).
func chosenTransports(_ arguments: Arguments) throws(CommandFailure) -> [TransportEntry] {
    guard arguments.option("transport") == nil && arguments.option("url") == nil else {
        return [try chosenTransport(arguments)]
    }
    return TransportCatalog.tools.filter { if case .directory = $0.meeting { true } else { false } }
}

/// `end`, `beginning` or `newest:N` (N above 0).
func startChoice(_ text: String) throws(CommandFailure) -> ReadStart {
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
