import Foundation
import TypedNotifications

// tnotify: post, watch and inspect typed notifications from the command line,
// over this package's socket, file-plus-signal and Redis Streams transports.

let help: [String: String] = [
    "": """
    usage: tnotify COMMAND [ARGUMENTS]

    Commands:
      post NAME     post a notification (--json TEXT | --text TEXT | --stdin)
      watch NAME... print every notification of these names (or PREFIX.*) as it arrives
      latest NAME   print the newest notification of a name (file or Redis)
      ls            list names, endpoints, logs and cursors
      gc            reap dead endpoints and apply log retention now
      demo          two processes exchange typed notifications over each transport

    Every command takes --help. post and watch use the socket transport and its
    default directory unless told otherwise, so they meet with no flags.
    --transport redis --url redis://[user:password@]host[:port][/db] (or just
    --url, or $TNOTIFY_REDIS_URL) reaches other hosts through a Redis server.
    Exit codes: 0 success, 64 usage, 65 bad payload, 69 unavailable, 74 I/O,
    75 an observer did not take a post, 77 permission.
    """,
    "post": """
    usage: tnotify post NAME [--json TEXT | --text TEXT | --stdin] [--transport socket|file|redis]
                        [--dir DIR | --url URL] [--group] [--wait TIME]

    Posts one notification named NAME. The payload is JSON (checked), UTF-8 text,
    or standard input's bytes; none gives an empty payload. Returns at once: an
    observer that cannot take it now (a stopped process) finds it in its spool
    when it resumes. Exits 75 naming each observer that did not take it (its
    spool is full). Over Redis, returns once the server stored it; exits 69
    when the server cannot be reached. --wait TIME (socket transport; 5s, 250ms) also waits until
    every observer has read it, and exits 75 naming those that have not.
    --group (socket or file) shares the directory with its group, as
    DirectorySharing.group: 0770 and 0660, every member's files and messages
    accepted; make the directory the group's, set-group-ID (chmod 2770).
    """,
    "watch": """
    usage: tnotify watch NAME|PREFIX.*... [--transport socket|file|redis] [--dir DIR | --url URL]
                         [--cursor ID] [--from end|beginning|newest:N] [--buffer N] [--json] [--group]

    Prints one line per notification: time, name, sender, sequence number and
    payload; with --json, one JSON object per line. PREFIX.* (quote it from the
    shell) watches every name under PREFIX, PREFIX itself included, also names
    first posted after the watch started: 'com.example.*'. --cursor ID (file or Redis)
    resumes the durable cursor ID where it stopped (over Redis, a consumer
    group; what it printed is acknowledged, the rest comes again marked as a
    redelivery). --from (file or Redis) says where to start without a saved
    cursor: the end (default), the beginning, or the newest N notifications. --buffer N (default 10000)
    is how many notifications wait while output is slow. Nothing is dropped
    for that: the log or stream keeps the rest until there is room, and over
    sockets the watcher keeps up to 32 MiB of them (then the oldest go, and
    the next line says how many were missed). --group: as for post. Ctrl-C or
    SIGTERM unregisters and exits.
    """,
    "latest": """
    usage: tnotify latest NAME [--transport file|redis] [--dir DIR | --url URL] [--json]

    Prints the newest notification of NAME in the file transport's log (the
    default) or its Redis stream, without observing. Exits 69 when there is
    none. The socket transport keeps nothing: --transport socket exits 64.
    """,
    "ls": """
    usage: tnotify ls [--transport socket|file|redis] [--dir DIR | --url URL]

    Lists each transport's directory: every socket, alive or dead, with the
    names it is registered for, its pid and what waits in its spool; logs with
    their size and every durable cursor with how far behind it is. With
    --transport redis: every stream with its length, and each durable
    identity with what it has pending and how far behind it is. Without
    --transport, the socket and file transports.
    """,
    "gc": """
    usage: tnotify gc [--transport socket|file] [--dir DIR]

    Removes what dead endpoints left (registrations, sockets, spools), also of
    processes that never registered, and deletes log segments past the default
    retention policy (kept while a durable cursor needs them). Redis needs
    none: every post trims its stream, so --transport redis exits 64.
    """,
    "demo": """
    usage: tnotify demo

    Starts a second process that plays an app extension and posts typed upload
    notifications, while this one observes them with `for await`, over the socket
    transport and then the file-plus-signal transport. Takes a few seconds.
    """,
]

let words = Array(CommandLine.arguments.dropFirst())
let command = words.first ?? ""
let rest = words.dropFirst()

if command.isEmpty || command == "--help" || command == "-h" || command == "help" {
    emit(help[""] ?? "")
    exit(command.isEmpty ? ExitCode.usage.rawValue : 0)
}
if rest.contains("--help") || rest.contains("-h"), let text = help[command] {
    emit(text)
    exit(0)
}

do {
    switch command {
    case "post": try postCommand(rest)
    case "watch": try await watchCommand(rest)
    case "latest": try latestCommand(rest)
    case "ls": try listCommand(rest)
    case "gc": try gcCommand(rest)
    case "demo": try await demoCommand(rest)
    case "demo-extension": try demoExtensionCommand(rest)
    default: throw CommandFailure(code: .usage, message: "unknown command \(command); see tnotify --help")
    }
} catch let failure as CommandFailure {
    FileHandle.standardError.write(Data("tnotify: \(failure.message)\n".utf8))
    exit(failure.code.rawValue)
}
