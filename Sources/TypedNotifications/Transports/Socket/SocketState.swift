import Dispatch
import NotificationPlatform
import Synchronization

/// Everything a ``SocketTransport`` changes after it is created, guarded by
/// one lock: the phase, the registry cache and the endpoints it sends to.
struct SocketState {
    enum Phase {
        case created
        case open(NotificationSender)
        case closed
    }

    var phase: Phase = .created
    var subscribed: Set<NotificationName> = []
    let monitor: DirectoryMonitor
    var watchIndex: [NotificationName: Int] = [:]
    var watchedNames: [Int: NotificationName] = [:]
    /// Endpoint ids per name; a name missing here is scanned on its next post.
    var routes: [NotificationName: [String]] = [:]
    var peers: [String: SocketPeer] = [:]
    var flushWaiters: [DispatchSemaphore] = []
    var ioThread: ThreadIdentity?

    init(monitor: DirectoryMonitor) {
        self.monitor = monitor
    }
}

/// One endpoint this transport sends to: a socket connected to it, and what
/// waits for it.
final class SocketPeer {
    let id: String
    let descriptor: FileDescriptor
    var queue: PeerQueueStateMachine<EncodedNotification>

    private init(id: String, descriptor: consuming FileDescriptor, limit: Int) {
        self.id = id
        self.descriptor = descriptor
        self.queue = PeerQueueStateMachine(limit: limit)
    }

    enum Connection {
        case connected(SocketPeer)
        /// Nobody is bound there any more: the endpoint died.
        case dead
        /// Some other failure; try again on the next scan.
        case unreachable
    }

    /// Connects a socket to the endpoint at `path`. A connected datagram socket
    /// lets poll report when that endpoint can take more.
    static func connect(_ id: String, path: String, limit: Int) -> Connection {
        let socket: FileDescriptor
        do throws(Errno) {
            socket = try System.datagramSocket().get()
        } catch {
            return .unreachable
        }
        switch System.connectSocket(socket, toSocketPath: path) {
        case .success:
            _ = System.setBufferSize(socket, send: true, bytes: SocketRegistry.largestEnvelope)
            return .connected(SocketPeer(id: id, descriptor: socket, limit: limit))
        case .failure(.connectionRefused), .failure(.noSuchFile):
            return .dead
        case .failure:
            return .unreachable
        }
    }

    enum SendResult {
        case sent
        case wouldBlock
        case dead
        case failed(Errno)
    }

    func send(_ encoded: EncodedNotification) -> SendResult {
        let result = encoded.storage.withUnsafeBytes { all in
            System.sendDatagram(descriptor, UnsafeRawBufferPointer(rebasing: all[encoded.envelopeRange]))
        }
        switch result {
        case .success: return .sent
        case .failure(.wouldBlock), .failure(.noBufferSpace): return .wouldBlock
        case .failure(.connectionRefused), .failure(.noSuchFile): return .dead
        case .failure(.notConnected), .failure(.connectionReset):
            return .dead
        case .failure(let error): return .failed(error)
        }
    }
}

/// Relaxed counters behind ``SocketTransportStatistics``.
final class SocketCounters: Sendable {
    let sent = Atomic<Int>(0)
    let queued = Atomic<Int>(0)
    let droppedFromQueue = Atomic<Int>(0)
    let received = Atomic<Int>(0)
    let refusedForeignSender = Atomic<Int>(0)
    let refusedMalformed = Atomic<Int>(0)
    let reapedEndpoints = Atomic<Int>(0)
    let ignoredRegistryFiles = Atomic<Int>(0)
    let failedSends = Atomic<Int>(0)
    let lastSendError = Atomic<Int32>(0)
    let registryScans = Atomic<Int>(0)

    var snapshot: SocketTransportStatistics {
        SocketTransportStatistics(
            sent: sent.load(ordering: .relaxed),
            queued: queued.load(ordering: .relaxed),
            droppedFromQueue: droppedFromQueue.load(ordering: .relaxed),
            received: received.load(ordering: .relaxed),
            refusedForeignSender: refusedForeignSender.load(ordering: .relaxed),
            refusedMalformed: refusedMalformed.load(ordering: .relaxed),
            reapedEndpoints: reapedEndpoints.load(ordering: .relaxed),
            ignoredRegistryFiles: ignoredRegistryFiles.load(ordering: .relaxed),
            failedSends: failedSends.load(ordering: .relaxed),
            lastSendError: lastSendError.load(ordering: .relaxed),
            registryScans: registryScans.load(ordering: .relaxed),
            connectedEndpoints: 0
        )
    }
}
