import Foundation
import Testing
import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@testable import TypedNotificationsRedis

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A `redis-server` of a test's own: on a free loopback port, in a temporary
/// directory, with append-only persistence that syncs every write, stopped
/// (SIGKILL) when the test lets go of it.
///
/// Where `redis-server` is not installed, the Redis suites are skipped with
/// that reason, unless `TYPED_NOTIFICATIONS_REQUIRE_REDIS=1` (set by
/// `.ci/run`), which turns the skip into a failure.
final class RedisTestServer: Sendable {
    let directory: String
    let port: Int
    let extraArguments: [String]
    private let process: Locked<HelperProcess?>

    /// Where `redis-server` is, if installed.
    static let executable: String? = [
        "/usr/bin/redis-server", "/usr/local/bin/redis-server", "/opt/homebrew/bin/redis-server",
    ]
    .first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Whether the Redis suites run: the server is installed, or CI requires them (and fails without it).
    static let suitesRun =
        executable != nil || ProcessInfo.processInfo.environment["TYPED_NOTIFICATIONS_REQUIRE_REDIS"] == "1"

    /// The reason printed when they are skipped.
    static let skipReason: Comment =
        "redis-server is not installed (apt-get install redis-server); TYPED_NOTIFICATIONS_REQUIRE_REDIS=1 makes this a failure"

    /// Starts a server and returns once it accepts connections; with
    /// `clusterBus`, a cluster node whose bus listens on a free port too.
    ///
    /// A free port can be taken before the server binds it (by another
    /// test's server, or as the local port of some outgoing connection):
    /// then it starts again on other ports, up to five times.
    init(arguments: [String] = [], clusterBus: Bool = false) async throws {
        guard let executable = Self.executable else {
            throw RedisTestFailure("redis-server is not installed, and TYPED_NOTIFICATIONS_REQUIRE_REDIS=1 requires it")
        }
        let directory = try makeTemporaryDirectory()
        self.directory = directory
        var launched: (port: Int, arguments: [String], server: HelperProcess)?
        for attempt in 1...5 where launched == nil {
            let port = try Self.freePort()
            let extra = clusterBus ? ["--cluster-port", "\(try Self.freePort())"] + arguments : arguments
            if let server = try await Self.launch(
                executable, port: port, directory: directory, arguments: extra, portMayBeTaken: attempt < 5)
            {
                launched = (port, extra, server)
            }
        }
        guard let launched else { throw RedisTestFailure("redis-server found no free port") }
        port = launched.port
        extraArguments = launched.arguments
        process = Locked(launched.server)
    }

    /// The URL of this server, with `credentials` (`user:password@`) if given.
    func url(credentials: String = "") -> String { "redis://\(credentials)127.0.0.1:\(port)" }

    /// Restarts the server process, from its append-only file, on its port.
    func start(_ executable: String? = RedisTestServer.executable) async throws {
        guard let executable else { throw RedisTestFailure("redis-server is not installed") }
        let server = try await Self.launch(
            executable, port: port, directory: directory, arguments: extraArguments, portMayBeTaken: false)
        process.withLock { $0 = server }
    }

    /// Starts a server process and returns it once it accepts connections;
    /// `nil` when its port was taken and `portMayBeTaken`.
    private static func launch(
        _ executable: String, port: Int, directory: String, arguments extra: [String], portMayBeTaken: Bool
    ) async throws -> HelperProcess? {
        let arguments =
            [
                "--port", "\(port)", "--bind", "127.0.0.1", "--dir", directory, "--appendonly", "yes",
                "--appendfsync", "always", "--save", "", "--daemonize", "no", "--loglevel", "notice",
            ] + extra
        let server = try HelperProcess(arguments, executable: executable)
        // Ready when it says so, as decided on the thread that reads its
        // output (see `TimedWaiter`); a server that exits first (its port
        // taken) has ended its output without the line, which is an answer
        // here, not an issue: the caller tries another port.
        let ready = await server.lines.wait(
            forValue: { $0.contains("Ready to accept connections") }, upTo: .seconds(30))
        guard ready else {
            if portMayBeTaken && server.lines.values.contains(where: { $0.contains("Address already in use") }) {
                return nil
            }
            server.signal(SIGKILL)
            throw RedisTestFailure("redis-server exited: \(server.lines.values.suffix(5)) \(server.errors.values)")
        }
        return server
    }

    /// Sends `signal` to the server (SIGSTOP, SIGCONT).
    func signal(_ signal: Int32) {
        process.withLock { $0 }?.signal(signal)
    }

    /// Kills the server with SIGKILL and waits for it to be gone.
    func kill() async {
        guard let server = process.withLock({ $0 }) else { return }
        server.signal(SIGKILL)
        _ = await server.waitForExit()
    }

    /// Runs one command on a connection of its own and returns the reply.
    func command(_ arguments: String..., credentials: RedisConnectionOptions? = nil) throws -> RESPValue {
        let options = credentials ?? RedisConnectionOptions(port: port)
        return try RedisConnection.connect(options).call(arguments.map { Array($0.utf8) })
    }

    /// How many clients named `name` are connected now and held open by
    /// this process; -1 when the server does not answer.
    ///
    /// The server lists a connection the client has closed until it has
    /// read the close, which under load can come after a `CLIENT LIST` sent
    /// later: a transport handing connections over would seem to hold more
    /// than it does. So a listed connection counts only while this process
    /// has a socket open at its client port (`/proc/self/fd` and
    /// `/proc/net/tcp`); `everyListed` counts them all.
    func clients(named name: String, everyListed: Bool = false) -> Int {
        guard case .bulkString(let list?)? = try? command("CLIENT", "LIST") else { return -1 }
        let named = String(decoding: list, as: UTF8.self).split(separator: "\n").filter {
            $0.contains(" name=\(name) ")
        }
        guard !everyListed else { return named.count }
        let held = Self.openLocalPorts()
        return named.count { line in
            guard let address = line.split(separator: " ").first(where: { $0.hasPrefix("addr=") }),
                let port = address.split(separator: ":").last.flatMap({ Int($0) })
            else { return false }
            return held.contains(port)
        }
    }

    /// The local ports of the TCP sockets this process has open now.
    private static func openLocalPorts() -> Set<Int> {
        let files = FileManager.default
        var inodes: Set<Substring> = []
        for descriptor in (try? files.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
            guard let target = try? files.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + descriptor),
                target.hasPrefix("socket:[")
            else { continue }
            inodes.insert(target.dropFirst("socket:[".count).dropLast())
        }
        var ports: Set<Int> = []
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            // Read to its end: `String(contentsOfFile:)` stops at the first
            // page of a file in /proc, whose size is 0.
            guard let bytes = try? FileHandle(forReadingAtPath: table)?.readToEnd() else { continue }
            let text = String(decoding: bytes, as: UTF8.self)
            // sl local_address rem_address st tx_queue:rx_queue tr:tm retrnsmt uid timeout inode
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                guard fields.count > 9, inodes.contains(fields[9]),
                    let port = fields[1].split(separator: ":").last.flatMap({ Int($0, radix: 16) })
                else { continue }
                ports.insert(port)
            }
        }
        return ports
    }

    /// How many entries `group` read from the stream `key` and has not
    /// acknowledged (the count `XPENDING` gives).
    func pendingCount(_ key: String, group: String) throws -> Int {
        let reply = try command("XPENDING", key, group)
        guard case .array(let summary?) = reply, case .integer(let count)? = summary.first else {
            throw RedisTestFailure("XPENDING \(key) \(group): \(reply)")
        }
        return Int(count)
    }

    /// Runs one command given as bytes.
    func command(bytes arguments: [[UInt8]]) throws -> RESPValue {
        try RedisConnection.connect(RedisConnectionOptions(port: port)).call(arguments)
    }

    deinit {
        if let server = process.withLock({ $0 }) { server.signal(SIGKILL) }
        removeDirectory(directory)
    }

    /// A TCP port no one listens on now, from the kernel.
    static func freePort() throws -> Int {
        let descriptor = socket(AF_INET, streamSocketType, 0)
        guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) }
        }
        guard bound == 0 else { throw POSIXError(.EADDRINUSE) }
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard named == 0 else { throw POSIXError(.EIO) }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// A Redis test could not set itself up.
struct RedisTestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
