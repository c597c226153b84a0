import CTypedNotificationsBenchmarkSupport
import Foundation
import TypedNotifications
import TypedNotificationsCatalog
@_spi(TransportAuthoring) import TypedNotificationsPlatform
import TypedNotificationsRedis

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// The Redis scenarios: the Redis Streams transport against a bare client
// doing XADD and a blocking XREAD (its floor) and Redis PUBLISH/SUBSCRIBE
// (the live-only peer), all on one redis-server this run starts on a free
// loopback port, in memory (no persistence: the transport is measured, not
// the disk).

/// A `redis-server` of this run.
final class BenchRedisServer {
    let processID: pid_t
    let port: Int
    let directory: String
    var url: String { "redis://127.0.0.1:\(port)" }

    /// The server's executable, or nil when it is not installed.
    static var executable: String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return (path.split(separator: ":").map { "\($0)/redis-server" } + ["/usr/sbin/redis-server"])
            .first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Starts a server and returns once it answers.
    ///
    /// A free port can be taken before the server binds it, by another
    /// program's server (a test's, beside a benchmark a test runs): what
    /// answers there is not this server, and `flush()` would empty the
    /// other's. So the server that answers must say it is this child
    /// (`INFO server`'s `process_id`); otherwise it starts again on another
    /// port, up to five times.
    init(executable: String) {
        directory = makeScratchDirectory("redis")
        for _ in 0..<5 {
            let port = Self.freePort()
            let arguments = [
                executable, "--port", "\(port)", "--bind", "127.0.0.1", "--dir", directory, "--save", "",
                "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
            ]
            // A child that dies with this process: a benchmark ended by a
            // signal or a closed pipe (`… | head`) leaves no server running.
            let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
            let child = cbs_spawn_dying_with_parent(executable, argv, environ, -1, -1)
            for argument in argv { free(argument) }
            guard child > 0 else { fail("could not start \(executable): errno \(errno)") }
            if Self.answers(on: port, as: child) {
                processID = child
                self.port = port
                return
            }
            kill(child, SIGKILL)
            var status: Int32 = 0
            waitpid(child, &status, 0)
        }
        fail("redis-server found no free port in five tries")
    }

    /// Whether the server answering on `port` is the process `child`,
    /// waiting up to 10 s for it; `false` once `child` has exited (its port
    /// was taken).
    private static func answers(on port: Int, as child: pid_t) -> Bool {
        let deadline = now() + 10_000_000_000
        while now() < deadline {
            var status: Int32 = 0
            if waitpid(child, &status, WNOHANG) == child { return false }
            if (try? RedisConnection.connect(RedisConnectionOptions(port: port))) != nil {
                let bare = BareRedis(port: port)
                defer { bare.close() }
                bare.send(["INFO", "server"])
                guard case .bulkString(let bytes?) = bare.reply() else { return false }
                return String(decoding: bytes, as: UTF8.self).contains("process_id:\(child)\r\n")
            }
            usleep(10_000)
        }
        fail("redis-server did not start on port \(port)")
    }

    /// Empties the server between scenarios.
    func flush() {
        let bare = BareRedis(port: port)
        defer { bare.close() }
        bare.send(["FLUSHALL"])
        _ = bare.reply()
    }

    func stop() {
        kill(processID, SIGTERM)
        var status: Int32 = 0
        waitpid(processID, &status, 0)
        removeScratchDirectory(directory)
    }

    private static func freePort() -> Int {
        let descriptor = rawSocket(AF_INET, stream: true)
        defer { closeDescriptor(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { general in
                bind(descriptor, general, length) == 0 && getsockname(descriptor, general, &length) == 0
            }
        }
        guard bound else { fail("no free port: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// A bare client for the floors: one blocking TCP socket with `TCP_NODELAY`,
/// commands written by hand in RESP, replies read with the package's RESP
/// reader; no connection pool, no envelope, no hub.
final class BareRedis {
    private let descriptor: Int32
    private var input: [UInt8] = []
    private var consumed = 0
    private var output: [UInt8] = []
    private var scratch = [UInt8](repeating: 0, count: 64 * 1024)

    init(port: Int) {
        descriptor = rawSocket(AF_INET, stream: true)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard descriptor >= 0, connected else { fail("bare Redis connect: errno \(errno)") }
        var one: Int32 = 1
        setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    func close() { closeDescriptor(descriptor) }

    /// Writes one command.
    func send(_ arguments: [[UInt8]]) {
        output.removeAll(keepingCapacity: true)
        RESPWriter.command(arguments, into: &output)
        var sent = 0
        while sent < output.count {
            let count = output.withUnsafeBytes { sendBytes(descriptor, $0, from: sent) }
            guard count > 0 else { fail("bare Redis send: errno \(errno)") }
            SystemCalls.count()
            sent += count
        }
    }

    func send(_ arguments: [String]) { send(arguments.map { Array($0.utf8) }) }

    /// The next reply, waiting for it.
    func reply() -> RESPValue {
        while true {
            if consumed < input.count,
                let read = try? RESPReader.read(input, from: consumed, limits: RESPLimits())
            {
                consumed = read.end
                if consumed == input.count {
                    input.removeAll(keepingCapacity: true)
                    consumed = 0
                }
                return read.value
            }
            let count = scratch.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { fail("bare Redis recv: errno \(errno)") }
            SystemCalls.count()
            scratch.withUnsafeBufferPointer { input.append(contentsOf: $0.prefix(count)) }
        }
    }
}

/// `send(2)` of `bytes` from `offset` (the client's own `send` hides the C function's name).
private func sendBytes(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, from offset: Int) -> Int {
    guard let base = bytes.baseAddress else { return 0 }
    return send(descriptor, base + offset, bytes.count - offset, 0)
}

/// The key and channel the bare clients use.
let bareStreamKey = "raw:{bench}"
let bareChannel = "bench.tick"

/// The Redis posters: ours through a hub, the floor's bare `XADD`, the peer's `PUBLISH`.
func makeRedisPoster(_ spec: PointSpec) throws -> Poster {
    guard let url = spec.redisURL, let port = RedisConnectionOptions.port(of: url) else {
        fail("\(spec.kind.rawValue) needs a Redis URL")
    }
    switch spec.kind {
    case .rawRedis, .redisPubSub:
        let bare = BareRedis(port: port)
        let buffer = RawRecord(size: spec.payloadBytes)
        let head: [[UInt8]] =
            spec.kind == .rawRedis
            ? ["XADD", bareStreamKey, "*", "v"].map { Array($0.utf8) }
            : ["PUBLISH", bareChannel].map { Array($0.utf8) }
        return Poster(
            post: { tick in
                buffer.set(tick.index)
                bare.send(head + [buffer.bytes])
                if case .error(let text) = bare.reply() { fail("bare Redis post: \(text)") }
            },
            close: { bare.close() }
        )
    default:
        fail("\(spec.kind.rawValue) is not a Redis kind")
    }
}

/// The Redis observers, in their own processes.
func observeRedis(_ kind: Kind, url: String, recorder: Recorder) throws {
    guard let port = RedisConnectionOptions.port(of: url) else { fail("bad Redis URL \(url)") }
    switch kind {
    case .rawRedis:
        // The stream was emptied before the scenario: read it from its start.
        let bare = BareRedis(port: port)
        defer { bare.close() }
        var last: [UInt8] = Array("0-0".utf8)
        sayReady(recorder)
        while true {
            bare.send(
                ["XREAD", "COUNT", "1000", "BLOCK", "0", "STREAMS", bareStreamKey].map { Array($0.utf8) } + [last])
            guard case .array(let streams?) = bare.reply() else { continue }
            for case .array(let stream?) in streams where stream.count == 2 {
                guard case .array(let entries?) = stream[1] else { continue }
                for case .array(let entry?) in entries where entry.count == 2 {
                    guard case .bulkString(let id?) = entry[0], case .array(let fields?) = entry[1], fields.count == 2,
                        case .bulkString(let value?) = fields[1], value.count >= 8
                    else { continue }
                    last = id
                    let index = value.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
                    recorder.record(index)
                    if index == BenchTick.endIndex { return }
                }
            }
        }
    case .redisPubSub:
        let bare = BareRedis(port: port)
        defer { bare.close() }
        bare.send(["SUBSCRIBE", bareChannel])
        _ = bare.reply()
        sayReady(recorder)
        while true {
            guard case .array(let parts?) = bare.reply(), parts.count == 3, case .bulkString(let value?) = parts[2],
                value.count >= 8
            else { continue }
            let index = value.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
            recorder.record(index)
            if index == BenchTick.endIndex { return }
        }
    default:
        fail("\(kind.rawValue) is not a Redis kind")
    }
}

extension RedisConnectionOptions {
    /// The TCP port of a `redis://` URL.
    static func port(of url: String) -> Int? {
        (try? RedisConnectionOptions(url: url))?.port
    }
}
