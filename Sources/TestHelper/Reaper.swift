#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// Ends the processes a test run started when the test process ends, however
// it ends (SIGKILL included), on Linux and on Apple platforms alike.
//
// The test process keeps the write end of a pipe whose read end is this
// process's standard input, and writes "+PID" for each process it starts
// and "-PID" once it has reaped it. When the test process ends the kernel
// closes its end, standard input reaches its end, and every process still
// listed is killed with its process group (the tests start each in a group
// of its own, so whatever it started goes too). A parent-death signal
// (PR_SET_PDEATHSIG) would not do: it fires when the spawning *thread*
// ends, and the tests spawn from worker threads that come and go.

/// Reads "+PID" and "-PID" lines from standard input until it ends, then
/// sends SIGKILL to each process still listed and its group; never returns.
func runReaper() -> Never {
    // A Ctrl-C reaches the test run's process group, which this may share
    // until its own starts: the children outlive it only if this does.
    signal(SIGINT, SIG_IGN)
    signal(SIGHUP, SIG_IGN)
    var watched = Set<pid_t>()
    var pending: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else { break }
        pending += buffer[..<count]
        while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
            let line = String(decoding: pending[..<newline], as: UTF8.self)
            pending.removeSubrange(...newline)
            guard let sign = line.first, let pid = pid_t(line.dropFirst()), pid > 1 else { continue }
            if sign == "+" { watched.insert(pid) } else if sign == "-" { watched.remove(pid) }
        }
    }
    for pid in watched {
        kill(-pid, SIGKILL)
        kill(pid, SIGKILL)
    }
    exit(0)
}

/// Starts a copy of this helper that holds (see ``holdForever()``) with this
/// process's output, says "grandchild PID", and holds too: for the test that
/// a killed run's processes end with their own children.
func spawnGrandchildAndHold() -> Never {
    let path = CommandLine.arguments[0]
    let words: [String] = [path, "hold"]
    let argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var child: pid_t = 0
    guard posix_spawn(&child, path, nil, nil, argv, environ) == 0 else { fail("posix_spawn failed") }
    say("grandchild \(child)")
    holdForever()
}

/// Waits for signals until one ends the process.
func holdForever() -> Never {
    while true { pause() }
}
