import CTypedNotifications

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Why a stream connection could not be made.
@_spi(TransportAuthoring) public enum StreamConnectFailure: Error, Hashable, Sendable, CustomStringConvertible {
    /// The host name did not resolve; getaddrinfo's text.
    case unresolved(String)
    /// The connection failed (refused, unreachable, timed out…).
    case failed(Errno)

    @_spi(TransportAuthoring) public var description: String {
        switch self {
        case .unresolved(let text): "the host name did not resolve: \(text)"
        case .failed(let errno): errno.description
        }
    }
}

/// Where a stream socket connects.
@_spi(TransportAuthoring) public enum StreamAddress: Hashable, Sendable, CustomStringConvertible {
    /// A host name or address, and a TCP port.
    case tcp(host: String, port: Int)
    /// A Unix socket path.
    case unix(path: String)

    @_spi(TransportAuthoring) public var description: String {
        switch self {
        case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unix(let path): path
        }
    }
}

extension SystemCalls {
    /// A connected, non-blocking, close-on-exec stream socket (TCP with
    /// `TCP_NODELAY`, or Unix), after waiting at most `timeoutMilliseconds`.
    ///
    /// The corresponding C functions are `getaddrinfo`, `socket`, `connect` and `poll`.
    @_spi(TransportAuthoring) public static func connectStream(to address: StreamAddress, timeoutMilliseconds: Int)
        -> Result<
            FileDescriptor, StreamConnectFailure
        >
    {
        var resolveError: CInt = 0
        let timeout = CInt(clamping: timeoutMilliseconds)
        count()
        let raw: CInt
        switch address {
        case .tcp(let host, let port):
            raw = ctn_connect_stream(host, String(port), timeout, &resolveError)
        case .unix(let path):
            raw = ctn_connect_stream(path, nil, timeout, &resolveError)
        }
        if raw == -2 { return .failure(.unresolved(String(cString: ctn_resolve_error_text(resolveError)))) }
        if raw < 0 { return .failure(.failed(.current)) }
        return .success(FileDescriptor(adopting: raw))
    }

    /// Sends all of `bytes` on a connected stream socket, waiting while its
    /// buffer is full, at most `timeoutMilliseconds` in all (`timedOut`
    /// after). Never raises SIGPIPE: a closed peer is `brokenPipe` or
    /// `connectionReset`.
    ///
    /// The corresponding C functions are `send` and `poll`.
    @_spi(TransportAuthoring) public static func sendAll(
        _ descriptor: borrowing FileDescriptor, _ bytes: UnsafeRawBufferPointer, timeoutMilliseconds: Int
    ) -> Result<Void, Errno> {
        var sent = 0
        let deadline = SystemClock.monotonicNanoseconds() &+ UInt64(max(0, timeoutMilliseconds)) &* 1_000_000
        while sent < bytes.count {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[sent...])
            switch retrying({ ctn_send_stream(descriptor.rawValue, rest.baseAddress, rest.count) }) {
            case .success(let count):
                sent += count
            case .failure(let error) where error == .wouldBlock:
                let now = SystemClock.monotonicNanoseconds()
                guard now < deadline else { return .failure(.timedOut) }
                let wait = CInt(clamping: (deadline - now) / 1_000_000 + 1)
                if case .failure(let error) = waitUntilWritable([descriptor.rawValue], milliseconds: wait) {
                    return .failure(error)
                }
            case .failure(let error):
                return .failure(error)
            }
        }
        return .success(())
    }

    /// Receives what a stream socket has without blocking: the count read,
    /// 0 when the peer closed, `wouldBlock` when nothing is there yet.
    ///
    /// The corresponding C function is `recv`.
    @_spi(TransportAuthoring) public static func receiveStream(
        _ descriptor: borrowing FileDescriptor, into buffer: UnsafeMutableRawBufferPointer
    ) -> Result<Int, Errno> {
        retrying { recv(descriptor.rawValue, buffer.baseAddress, buffer.count, CInt(MSG_DONTWAIT)) }
    }

    /// Lets ``receiveStreamWaiting(_:into:)`` on `descriptor` wait for bytes,
    /// at most `timeoutMilliseconds` a call, where that saves a `poll` before
    /// each receive; `false` where it is not done (an Apple platform, whose
    /// sends rely on the socket being non-blocking; a timeout of 0, which
    /// would mean no limit; or a failed call), and the socket is unchanged.
    /// Receives that must not wait pass `MSG_DONTWAIT` and are unaffected.
    ///
    /// The corresponding C functions are `setsockopt(SO_RCVTIMEO)` and
    /// `fcntl(F_SETFL)` clearing `O_NONBLOCK`.
    @_spi(TransportAuthoring) public static func enableWaitingReceives(
        _ descriptor: borrowing FileDescriptor, timeoutMilliseconds: Int
    ) -> Bool {
        #if os(Linux)
            guard timeoutMilliseconds > 0, setReceiveTimeout(descriptor, milliseconds: timeoutMilliseconds) else {
                return false
            }
            count()
            let flags = fcntl(descriptor.rawValue, F_GETFL)
            count()
            return flags >= 0 && fcntl(descriptor.rawValue, F_SETFL, flags & ~O_NONBLOCK) == 0
        #else
            return false
        #endif
    }

    /// Sets how long a receive that waits on `descriptor` waits at most:
    /// `milliseconds`, or without limit for `nil` (a day at most: a caller
    /// waiting longer receives again). Returns whether it was set.
    ///
    /// The corresponding C function is `setsockopt(SO_RCVTIMEO)`.
    package static func setReceiveTimeout(_ descriptor: borrowing FileDescriptor, milliseconds: Int?) -> Bool {
        let bounded = milliseconds.map { min(max($0, 1), 86_400_000) } ?? 0
        var time = timeval(tv_sec: bounded / 1000, tv_usec: .init((bounded % 1000) * 1000))
        count()
        return setsockopt(
            descriptor.rawValue, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size)) == 0
    }

    /// Receives from a stream socket made waiting by
    /// ``enableWaitingReceives(_:timeoutMilliseconds:)``: the count read once
    /// bytes are there, 0 when the peer closed, `wouldBlock` when its timeout
    /// passed first.
    ///
    /// The corresponding C function is `recv`.
    @_spi(TransportAuthoring) public static func receiveStreamWaiting(
        _ descriptor: borrowing FileDescriptor, into buffer: UnsafeMutableRawBufferPointer
    ) -> Result<Int, Errno> {
        retrying { recv(descriptor.rawValue, buffer.baseAddress, buffer.count, 0) }
    }

    /// Shuts a stream socket down both ways, so a thread waiting on it wakes.
    ///
    /// The corresponding C function is `shutdown`.
    @_spi(TransportAuthoring) public static func shutdownStream(_ descriptor: borrowing FileDescriptor) {
        _ = retrying { shutdown(descriptor.rawValue, CInt(SHUT_RDWR)) }
    }
}
