@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// One connection to a Redis server, logged in and with its database
/// selected: commands go out pipelined, replies come back in order.
///
/// Not for two threads at a time: whoever holds it has it to itself (the
/// transport's pool hands each out to one sender, and each reader lives on
/// the event loop). A broken connection stays broken: every later call
/// throws, and its owner makes a new one.
///
/// `@unchecked Sendable` is safe because a connection has one owner at a
/// time and changes hands only through a lock or a queued loop job (both
/// publish its state): the transport's pool takes it out under its lock
/// and a sender uses it alone until it puts it back under that lock; a
/// reader's and the acknowledger's connections are used only by jobs of
/// the one event-loop thread.
package final class RedisConnection: @unchecked Sendable {
    // Sendable: moved between threads only through a lock (the pool) or a
    // job queued on the event loop, never used by two at a time (above);
    // `descriptor` is a `let` whose raw value others may read.
    package let options: RedisConnectionOptions
    private let socket: FileDescriptor
    private var input: [UInt8] = []
    private var consumed = 0
    // What one receive reads into before it is appended to `input`: made
    // once, so a read neither zero-fills nor shrinks `input` (in a debug
    // build, zero-filling 64 KiB through generic code took 14 ms a read),
    // and resident only as far as replies have reached.
    private let receiveBuffer = LazyBuffer(count: 64 * 1024)
    private var outgoing: [UInt8] = []
    package private(set) var isBroken = false
    /// The server's ID of this connection, when asked for at connect.
    package private(set) var clientID: Int?
    /// When the connection was last put back idle in a pool, on the
    /// monotonic clock.
    package var idleSince: UInt64 = 0
    private let limits = RESPLimits()
    // Whether a wait for a reply is one receive that blocks (Linux), not a
    // `poll` and then a receive: a system call fewer per command.
    private var waitsInReceive = false

    /// The socket, for an event loop to watch.
    package var descriptor: CInt { socket.rawValue }

    private init(options: RedisConnectionOptions, socket: consuming FileDescriptor) {
        self.options = options
        self.socket = socket
        input.reserveCapacity(16 * 1024)
        waitsInReceive = SystemCalls.enableWaitingReceives(
            self.socket, timeoutMilliseconds: options.commandTimeout.clampedMilliseconds)
    }

    /// Connects, logs in and selects the database, within the options' timeouts.
    ///
    /// With `identifying`, also asks the server for this connection's
    /// client ID (``clientID``), with which another connection can end this
    /// one at the server (`CLIENT KILL ID`).
    ///
    /// - Throws: ``TypedNotifications/TypedNotificationError/Code/unreachable`` when the server
    ///   cannot be reached, ``TypedNotifications/TypedNotificationError/Code/authenticationFailed``
    ///   when it refuses the credentials.
    package static func connect(
        _ options: RedisConnectionOptions, clientName: String? = nil, identifying: Bool = false
    ) throws(TypedNotificationError) -> RedisConnection {
        let address: StreamAddress =
            options.isUnixSocket ? .unix(path: options.host) : .tcp(host: options.host, port: options.port)
        let socket: FileDescriptor
        switch SystemCalls.connectStream(
            to: address, timeoutMilliseconds: options.connectTimeout.clampedMilliseconds)
        {
        case .success(let connected):
            socket = connected
        case .failure(let failure):
            throw TypedNotificationError(
                code: .unreachable, message: "could not connect to Redis at \(options.redactedDescription): \(failure)",
                cause: failure)
        }
        let connection = RedisConnection(options: options, socket: socket)
        var handshake: [[[UInt8]]] = []
        if let password = options.password {
            handshake.append(
                [Array("AUTH".utf8)] + (options.username.map { [Array($0.utf8)] } ?? []) + [Array(password.utf8)])
        }
        if options.database != 0 { handshake.append([Array("SELECT".utf8), Array(String(options.database).utf8)]) }
        if let clientName { handshake.append([Array("CLIENT".utf8), Array("SETNAME".utf8), Array(clientName.utf8)]) }
        if identifying { handshake.append([Array("CLIENT".utf8), Array("ID".utf8)]) }
        // A server loading its data (just started) takes the handshake but
        // refuses every read with LOADING: asked here, where the answer
        // never fails, so a connection is made only once it can serve.
        if clientName != nil { handshake.append([Array("INFO".utf8), Array("persistence".utf8)]) }
        guard !handshake.isEmpty else { return connection }
        let replies = try connection.pipeline(handshake)
        for (command, reply) in zip(handshake, replies) {
            if command[0] == Array("INFO".utf8) {
                // Refused (an ACL without it): the connection is used as it is.
                if case .bulkString(let text?) = reply,
                    String(decoding: text, as: UTF8.self).contains("loading:1")
                {
                    throw TypedNotificationError(
                        code: .unreachable, message: "Redis at \(options.redactedDescription) is loading its data")
                }
                continue
            }
            if identifying, command.count == 2, command[1] == Array("ID".utf8) {
                // Refused (an ACL without it): the connection works without.
                if case .integer(let id) = reply { connection.clientID = Int(id) }
                continue
            }
            guard case .error(let text) = reply else { continue }
            let verb = String(decoding: command[0], as: UTF8.self)
            if verb == "AUTH" || text.hasPrefix("NOAUTH") || text.hasPrefix("WRONGPASS") || text.hasPrefix("NOPERM") {
                throw TypedNotificationError(
                    code: .authenticationFailed,
                    message: "Redis at \(options.redactedDescription) refused the login: \(text)")
            }
            // A full server (maxclients) or one loading its data takes
            // connections later: unreachable now, not misconfigured.
            let busy = text.contains("max number of clients") || text.hasPrefix("LOADING")
            throw TypedNotificationError(
                code: busy ? .unreachable : .invalidConfiguration,
                message: "Redis at \(options.redactedDescription) refused \(verb): \(text)")
        }
        return connection
    }

    /// Sends one command and waits for its reply (an error reply is returned, not thrown).
    package func call(_ arguments: [[UInt8]]) throws(TypedNotificationError) -> RESPValue {
        let replies = try pipeline([arguments])
        return replies[0]
    }

    /// Sends one command given as text and waits for its reply.
    package func call(_ arguments: String...) throws(TypedNotificationError) -> RESPValue {
        try call(arguments.map { Array($0.utf8) })
    }

    /// Sends `commands` in one write and waits for all their replies, in order.
    ///
    /// - Throws: ``TypedNotifications/TypedNotificationError/Code/unreachable`` when the
    ///   connection broke or the server took longer than the command
    ///   timeout; the message says how many replies had arrived.
    package func pipeline(_ commands: [[[UInt8]]]) throws(TypedNotificationError) -> [RESPValue] {
        try pipeline(count: commands.count) { outgoing in
            for command in commands { RESPWriter.command(command, into: &outgoing) }
        }
    }

    /// Sends the `count` commands `write` appends, already encoded, in one
    /// write, and waits for all their replies, in order: a command encoded
    /// once is copied once more, into the connection's own buffer.
    ///
    /// - Throws: as ``pipeline(_:)``.
    package func pipeline(count: Int, writing write: (inout [UInt8]) -> Void) throws(TypedNotificationError)
        -> [RESPValue]
    {
        write(&outgoing)
        try flush()
        var replies: [RESPValue] = []
        replies.reserveCapacity(count)
        let deadline = SystemClock.monotonicNanoseconds() &+ options.commandTimeout.clampedNanoseconds
        while replies.count < count {
            if let reply = try nextReply() {
                replies.append(reply)
                continue
            }
            let now = SystemClock.monotonicNanoseconds()
            guard now < deadline else {
                throw broken(
                    "Redis at \(options.redactedDescription) did not answer within \(options.commandTimeout)"
                        + " (\(replies.count) of \(count) replies arrived)", nil)
            }
            if waitsInReceive {
                // Returns with bytes, or empty once the timeout passed and
                // the deadline above is checked again.
                try fill(waiting: true)
                continue
            }
            let wait = CInt(clamping: (deadline - now) / 1_000_000 + 1)
            if case .failure(let error) = SystemCalls.waitUntilReadable(socket.rawValue, milliseconds: wait) {
                throw broken("waiting for Redis failed", error)
            }
            try fill()
        }
        return replies
    }

    /// Queues `commands` to be written by ``flush()``.
    package func enqueue(_ arguments: [[UInt8]]) {
        RESPWriter.command(arguments, into: &outgoing)
    }

    /// Writes what ``enqueue(_:)`` queued, waiting at most the command timeout.
    package func flush() throws(TypedNotificationError) {
        guard !outgoing.isEmpty else { return }
        guard !isBroken else { throw broken("the connection to Redis broke earlier", nil) }
        let result = outgoing.withUnsafeBytes {
            SystemCalls.sendAll(socket, $0, timeoutMilliseconds: options.commandTimeout.clampedMilliseconds)
        }
        outgoing.removeAll(keepingCapacity: outgoing.capacity <= 64 * 1024)
        if case .failure(let error) = result {
            throw broken("could not send to Redis at \(options.redactedDescription)", error)
        }
    }

    /// Reads what the socket has without blocking and returns every complete
    /// reply it holds, for an event loop's readable handler.
    ///
    /// - Throws: ``TypedNotifications/TypedNotificationError/Code/unreachable`` when the server
    ///   closed the connection or sent bytes that are no reply.
    ///
    /// Reads until a receive comes back short of its buffer, not until one
    /// finds nothing: with a level-triggered poller, bytes that arrive after
    /// that wake the loop again, and the empty receive is a system call saved.
    package func readAvailable() throws(TypedNotificationError) -> [RESPValue] {
        var replies: [RESPValue] = []
        while true {
            let received = try fill()
            while let reply = try nextReply() { replies.append(reply) }
            if received < receiveBuffer.count { return replies }
        }
    }

    /// Shuts the socket down, so whoever waits on it wakes; the owner still closes it.
    package func shutDown() {
        SystemCalls.shutdownStream(socket)
    }

    /// Whether an idle connection is still open: a receive that does not
    /// wait finds nothing. A server that died or timed the connection out
    /// closed it, and a command written to it now would fail with "may or
    /// may not have run" though it never could have.
    package func isOpenWhileIdle() -> Bool {
        guard !isBroken, consumed == input.count else { return false }
        do throws(TypedNotificationError) {
            return try fill() == 0
        } catch {
            return false
        }
    }

    /// The next complete reply already read, if any.
    private func nextReply() throws(TypedNotificationError) -> RESPValue? {
        guard consumed < input.count else { return nil }
        let read: (value: RESPValue, end: Int)?
        do throws(RESPError) {
            read = try RESPReader.read(input, from: consumed, limits: limits)
        } catch {
            throw broken("Redis at \(options.redactedDescription) sent bytes that are no reply", error)
        }
        guard let read else { return nil }
        consumed = read.end
        if consumed == input.count {
            input.removeAll(keepingCapacity: input.capacity <= 1024 * 1024)
            consumed = 0
        }
        return read.value
    }

    /// Reads what the socket has, or with `waiting`, what it has once bytes
    /// arrive or the receive timeout passed; how many bytes, 0 for none.
    @discardableResult
    private func fill(waiting: Bool = false) throws(TypedNotificationError) -> Int {
        guard !isBroken else { throw broken("the connection to Redis broke earlier", nil) }
        if consumed > 0 && consumed * 2 >= input.count {
            input.removeFirst(consumed)
            consumed = 0
        }
        let result =
            waiting
            ? SystemCalls.receiveStreamWaiting(socket, into: receiveBuffer.bytes)
            : SystemCalls.receiveStream(socket, into: receiveBuffer.bytes)
        switch result {
        case .success(0):
            throw broken("Redis at \(options.redactedDescription) closed the connection", nil)
        case .success(let count):
            Anatomy.received()
            input.append(contentsOf: UnsafeRawBufferPointer(rebasing: receiveBuffer.bytes[..<count]))
            return count
        case .failure(let error) where error == .wouldBlock:
            return 0
        case .failure(let error):
            throw broken("reading from Redis at \(options.redactedDescription) failed", error)
        }
    }

    private func broken(_ message: String, _ cause: (any Error)?) -> TypedNotificationError {
        isBroken = true
        return TypedNotificationError(code: .unreachable, message: message, cause: cause)
    }
}

extension Duration {
    /// Whole milliseconds, at least 1 for a positive duration, within `Int`.
    var clampedMilliseconds: Int {
        let (seconds, attoseconds) = components
        guard seconds >= 0 else { return 0 }
        let total = seconds.multipliedReportingOverflow(by: 1000)
        guard !total.overflow else { return Int.max }
        let milliseconds = Int(clamping: total.partialValue) + Int(attoseconds / 1_000_000_000_000_000)
        return self > .zero ? max(1, milliseconds) : 0
    }

    /// Whole nanoseconds within `UInt64`.
    var clampedNanoseconds: UInt64 {
        UInt64(clamping: clampedMilliseconds) &* 1_000_000
    }
}
