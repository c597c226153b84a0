import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// How the receiving thread sleeps on Linux: in the batch receive itself,
// so the datagram that wakes it is taken by the same call (see
// `SocketTransport.receiveWaiting`). What it also waits for comes in
// another way: work for the loop as a wake datagram the process sends
// itself, timers as the socket's receive timeout, and a spool a poster
// started as an empty datagram, a nudge.

/// The wake-up of a receiving thread that sleeps in its receive call: a
/// one-byte datagram from a socket of this transport's own, connected to
/// its receiving socket.
///
/// At most one is ever queued, so it takes at most one of the few places
/// in the socket's queue (`net.unix.max_dgram_qlen`, 10 by default) from
/// posters: ``wake()`` sends only while none is in flight, and the
/// receive clears that when it takes it (``taken()``). A send refused
/// because the queue is full needs no retry: the receive has datagrams
/// to return with. It carries no command: a woken loop looks at its jobs,
/// its timers and whether it was stopped, as after any receive.
final class SocketWake: Sendable {
    private let socket: ConnectedDatagramSocket
    private let inFlight = Atomic<Bool>(false)

    /// A socket connected to `path`, the transport's own socket.
    init?(connectingTo path: String) {
        guard let socket = ConnectedDatagramSocket(to: path, accepting: { _ in true }) else { return nil }
        self.socket = socket
    }

    /// The datagram a wake-up is: one byte, from this process. No envelope
    /// is that short.
    static let length = 1

    /// Makes the receive blocked now, or the next one, return.
    ///
    /// The corresponding C function is `send`.
    func wake() {
        guard !inFlight.exchange(true, ordering: .acquiringAndReleasing) else { return }
        var byte: UInt8 = 0
        let sent = withUnsafeBytes(of: &byte) { SystemCalls.sendDatagram(socket.descriptor, $0) }
        // Refused (the queue is full): the receive returns for what is
        // queued, and nothing is in flight.
        if case .failure = sent { inFlight.store(false, ordering: .releasing) }
    }

    /// The receive took a wake-up datagram: the next ``wake()`` sends again.
    func taken() {
        inFlight.store(false, ordering: .releasing)
    }
}

/// Signs that the spool needs a look, seen while receiving.
struct ReceiveSignals {
    /// An empty datagram: a poster started a spool file.
    var nudged = false
    /// A receive took as many datagrams as the socket's queue holds: a
    /// poster may have found it full, spooled, and failed to nudge.
    var sawFullQueue = false

    var spoolNeedsLook: Bool { nudged || sawFullQueue }
}

extension SocketTransport {
    /// How many datagrams make a receive a sign that the socket's queue was
    /// full: its batch, or the queue's length (`net.unix.max_dgram_qlen`)
    /// where that is smaller; 1 where the length cannot be read, so every
    /// receive is such a sign.
    static func fullQueueSign(batch: Int) -> Int {
        #if os(Linux)
            guard case .success(let file) = SystemCalls.openFile("/proc/sys/net/unix/max_dgram_qlen", .readOnly)
            else { return 1 }
            var text = [UInt8](repeating: 0, count: 32)
            let read = text.withUnsafeMutableBytes { SystemCalls.readBytes(file, into: $0, at: 0) }
            guard case .success(let count) = read,
                let length = Int(String(decoding: text.prefix(count), as: UTF8.self).filter(\.isNumber)), length >= 1
            else { return 1 }
            return min(batch, length)
        #else
            return 1
        #endif
    }

    /// The timeout to ask of the socket for a wait of at most
    /// `milliseconds`: none (`nil`) for a wait without limit (-1), so a
    /// loop with no timer due sleeps until a datagram comes; else the
    /// largest power of two not above it, at most 32,768 ms. A wait ends
    /// early rather than late, and the timeout changes, one `setsockopt`,
    /// only when the wait crosses a power of two: about ten times a second
    /// before a timer, however many datagrams arrive meanwhile.
    static func receiveTimeout(forWaitOf milliseconds: CInt) -> Int? {
        guard milliseconds >= 0 else { return nil }
        let wait = min(Int(milliseconds), 32_768)
        guard wait > 1 else { return 1 }
        return 1 << (Int.bitWidth - 1 - wait.leadingZeroBitCount)
    }
}
