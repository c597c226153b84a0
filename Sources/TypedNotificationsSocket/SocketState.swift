import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// The skeleton of a ``SocketTransport``: open, it keeps the sender `open` was given.
typealias SocketCore = TransportCore<
    NotificationSender, SocketState, SocketTransportStatistics
>

/// What a ``SocketTransport`` shares between its threads, under its core's
/// lock (held for no system call) beside the lifecycle: the names it
/// registered, and the endpoints the send in progress last
/// published (for statistics, ``SocketTransport/flush(timeout:)`` and error
/// messages).
struct SocketState {
    /// The registration file every entry links to (see ``SocketRegistry``),
    /// from `open` on; made anew if someone removes it with every entry.
    var registration: FileIdentity?
    /// Names whose entry is a file of its own, not a link: the file system
    /// allowed the registration file no more links (65,000 on ext4).
    var unlinkedEntries: Set<NotificationSelector> = []
    var subscribed: Set<NotificationSelector> = []
    var peers: [String: SocketPeer] = [:]
    /// A registry directory each peer was listed in, to name it by its entry.
    var listedIn: [String: NotificationSelector] = [:]
}

/// The registry cache and the endpoints a transport sends to: touched only
/// by the send in progress (see ``SocketRoutingSlot``), which makes its
/// system calls with no lock held. The machine decides; the send acts.
struct SocketRouting {
    let monitor: DirectoryMonitor
    var machine: SocketRoutingStateMachine<SocketPeer>
}

/// Holds a socket transport's routing for one send at a time.
///
/// A center makes one send at a time (see ``NotificationTransport``); this
/// slot is how the transport knows it is so, without a lock: a send claims
/// it, or is refused when another holds it.
final class SocketRoutingSlot: @unchecked Sendable {
    // Sendable: `routing` is read and written only by the thread whose
    // `claim()` succeeded (an acquiring compare-exchange of `busy`) and until
    // it calls `release()` (a releasing store): one thread at a time, each
    // seeing what the one before it wrote.
    private let busy = Atomic<Bool>(false)
    var routing: SocketRouting

    init(monitor: DirectoryMonitor, excludedEndpoint: String?) {
        routing = SocketRouting(
            monitor: monitor, machine: SocketRoutingStateMachine(excludedEndpoint: excludedEndpoint))
    }

    /// Takes the routing; `false` when another send holds it.
    func claim() -> Bool {
        busy.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged
    }

    func release() {
        busy.store(false, ordering: .releasing)
    }
}

/// One endpoint this transport sends to: a socket connected to it, and this
/// poster's spool for it.
final class SocketPeer: @unchecked Sendable {
    // Sendable: its own properties are constants but `nudgeSocket`, which,
    // like its spool's mutable state, is touched by the send in progress
    // only (one at a time, see SocketRoutingSlot), except the spool's
    // current file, which the spool keeps behind a lock.
    let id: String
    let descriptor: FileDescriptor
    let spool: SpoolWriter
    private let path: String
    private let sharing: DirectorySharing
    // A socket of its own for nudges, made at the first: the one that sends
    // notifications may have a full send buffer when a spool starts.
    private var nudgeSocket: ConnectedDatagramSocket?

    private init(
        id: String, descriptor: consuming FileDescriptor, spool: SpoolWriter, path: String, sharing: DirectorySharing
    ) {
        self.id = id
        self.descriptor = descriptor
        self.spool = spool
        self.path = path
        self.sharing = sharing
    }

    /// Tells the endpoint that this poster started a spool file, if it did
    /// since the last call: an empty datagram, after which a receiving
    /// thread that sleeps in its receive looks at its spool. Sent from a
    /// socket of its own, whose send buffer is empty, so a refusal means
    /// the endpoint's queue is full: it then receives a full queue's worth
    /// in one call, and looks at its spool for that too.
    ///
    /// The corresponding C function is `send`, and `connect` the first time.
    func nudgeIfSpoolStarted() {
        guard spool.takeStartedFile() else { return }
        if nudgeSocket == nil {
            let ownUser = SystemProcess.userID
            let sharing = sharing
            nudgeSocket = ConnectedDatagramSocket(to: path) { sharing == .group || $0.owner == ownUser }
        }
        guard let nudgeSocket else { return }
        _ = SystemCalls.sendDatagram(nudgeSocket.descriptor, UnsafeRawBufferPointer(start: nil, count: 0))
    }

    enum Connection {
        case connected(SocketPeer)
        /// Nobody is bound there any more: the endpoint died.
        case dead
        /// Not a socket of this directory (a symbolic link, another owner's
        /// file, or a connection that ended somewhere else): never sent to.
        case refused
        /// Some other failure; try again on the next scan.
        case unreachable
    }

    /// Connects a socket to the endpoint at `path`, refusing anything but a
    /// socket in the directory: the path must be a socket (not a link to one)
    /// of an allowed owner, and the connection must reach that very file, so
    /// a link or another socket swapped in between the check and the connect
    /// is refused too (see ``SystemCalls/connectSocket(_:toSocketFile:accepting:)``:
    /// on Linux the connect goes through a descriptor of the checked file; on
    /// Darwin the peer's file is compared, device and inode, after it). Any
    /// length of directory the system allows.
    static func connect(
        _ id: String, path: String, directory: String, poster: String, sharing: DirectorySharing, spoolLimit: Int
    ) -> Connection {
        let socket: FileDescriptor
        do throws(Errno) {
            socket = try SystemCalls.datagramSocket().get()
        } catch {
            return .unreachable
        }
        let ownUser = SystemProcess.userID
        switch SystemCalls.connectSocket(
            socket, toSocketFile: path, accepting: { sharing == .group || $0.owner == ownUser })
        {
        case .success(.some):
            break
        case .success(nil):
            return .refused
        case .failure(.connectionRefused), .failure(.noSuchFile):
            return .dead
        case .failure:
            return .unreachable
        }
        _ = SystemCalls.setBufferSize(socket, send: true, bytes: SocketRegistry.largestEnvelope)
        let spool = SpoolWriter(base: directory, endpoint: id, poster: poster, sharing: sharing, limit: spoolLimit)
        return .connected(SocketPeer(id: id, descriptor: socket, spool: spool, path: path, sharing: sharing))
    }

    enum SendResult {
        case sent
        case wouldBlock
        case dead
        case failed(Errno)
    }

    func send(_ encoded: EncodedNotification) -> SendResult {
        let result = encoded.storage.withUnsafeBytes { all in
            SystemCalls.sendDatagram(descriptor, UnsafeRawBufferPointer(rebasing: all[encoded.envelopeRange]))
        }
        switch result {
        case .success: return .sent
        case .failure(.wouldBlock), .failure(.noBufferSpace): return .wouldBlock
        case .failure(.connectionRefused), .failure(.noSuchFile):
            return .dead
        case .failure(.notConnected), .failure(.connectionReset):
            return .dead
        case .failure(let error): return .failed(error)
        }
    }
}

@_spi(TransportAuthoring) extension SocketTransportStatistics: CountedStatistics {
    /// Each count, a slot of the live ``Counters``.
    public enum Count: Int, CaseIterable, Sendable {
        case sent, spooled, fullSocketWaits, dropped, received, receivedFromSpool, refusedEndpoints,
            refusedForeignSender, refusedMalformed, reapedEndpoints, ignoredRegistryFiles, failedSends, lastSendError,
            registryScans, refusedOversized, repairedEntries
    }

    /// A snapshot of `count(c)` for every count `c`.
    public init(_ count: (Count) -> Int) {
        self.init(
            sent: count(.sent),
            spooled: count(.spooled),
            fullSocketWaits: count(.fullSocketWaits),
            dropped: count(.dropped),
            received: count(.received),
            receivedFromSpool: count(.receivedFromSpool),
            refusedEndpoints: count(.refusedEndpoints),
            refusedForeignSender: count(.refusedForeignSender),
            refusedMalformed: count(.refusedMalformed),
            refusedOversized: count(.refusedOversized),
            repairedEntries: count(.repairedEntries),
            reapedEndpoints: count(.reapedEndpoints),
            ignoredRegistryFiles: count(.ignoredRegistryFiles),
            failedSends: count(.failedSends),
            lastSendError: Int32(truncatingIfNeeded: count(.lastSendError)),
            registryScans: count(.registryScans),
            connectedEndpoints: 0)
    }
}

/// A datagram socket connected to the socket file at `path`, which must be
/// a socket of an owner `accepting` takes (see
/// ``SystemCalls/connectSocket(_:toSocketFile:accepting:)``); for a socket
/// that sends only signs: a poster's nudges, a transport's own wake-ups.
final class ConnectedDatagramSocket: Sendable {
    let descriptor: FileDescriptor

    /// Nil where the socket cannot be made or connected.
    init?(to path: String, accepting: (FileStatus) -> Bool) {
        let socket: FileDescriptor
        do throws(Errno) {
            socket = try SystemCalls.datagramSocket().get()
        } catch {
            return nil
        }
        guard case .success(.some) = SystemCalls.connectSocket(socket, toSocketFile: path, accepting: accepting)
        else { return nil }
        descriptor = socket
    }
}
