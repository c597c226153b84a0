/// The exit codes of sysexits(3) that `tnotify` uses.
enum ExitCode: Int32 {
    case success = 0
    case usage = 64
    case badPayload = 65
    case unavailable = 69
    case software = 70
    case ioError = 74
    case temporaryFailure = 75
    case permission = 77
}

/// A failure that ends the command with a message and an exit code.
struct CommandFailure: Error {
    var code: ExitCode
    var message: String
}

/// A command line split into positional arguments and `--options`, with no
/// dependencies. `--name value` and `--name=value` both work; flags take no value.
struct Arguments {
    private(set) var positional: [String] = []
    private var options: [String: String] = [:]
    private var flags: Set<String> = []

    /// Parses `words`, accepting only the options and flags listed.
    init(_ words: some Sequence<String>, options known: Set<String>, flags knownFlags: Set<String>)
        throws(CommandFailure)
    {
        var iterator = words.makeIterator()
        while let word = iterator.next() {
            guard word.hasPrefix("--"), word.count > 2 else {
                positional.append(word)
                continue
            }
            var name = String(word.dropFirst(2))
            var value: String?
            if let equals = name.firstIndex(of: "=") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if knownFlags.contains(name) {
                guard value == nil else { throw CommandFailure(code: .usage, message: "--\(name) takes no value") }
                flags.insert(name)
            } else if known.contains(name) {
                guard let given = value ?? iterator.next() else {
                    throw CommandFailure(code: .usage, message: "--\(name) needs a value")
                }
                guard options[name] == nil else { throw CommandFailure(code: .usage, message: "--\(name) given twice") }
                options[name] = given
            } else {
                throw CommandFailure(code: .usage, message: "unknown option --\(name)")
            }
        }
    }

    func option(_ name: String) -> String? { options[name] }
    func flag(_ name: String) -> Bool { flags.contains(name) }
}
