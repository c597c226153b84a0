import Dispatch
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

/// The receiving thread that sleeps in its receive (Linux): its wake-up,
/// its timeout, and how it learns of a spool with no inotify watch and no
/// timer to find it.
@Suite("A socket endpoint's thread sleeps in its receive")
struct SocketWakingTests {
    /// A datagram socket bound to `path`.
    private func receivingSocket(at path: String) throws -> FileDescriptor {
        let socket = try SystemCalls.datagramSocket().get()
        try SystemCalls.bindSocket(socket, toSocketPath: path).get()
        return socket
    }

    /// Every datagram waiting on `socket` now, by length.
    private func drain(_ socket: borrowing FileDescriptor) -> [Int] {
        let batch = DatagramBatch(slots: 16, slotLength: 64)
        var lengths: [Int] = []
        while case .success(let count) = batch.receive(socket), count > 0 {
            lengths += (0..<count).map { batch.datagram($0).length }
        }
        return lengths
    }

    @Test("a wake-up is one datagram in the queue however often and from however many threads it is asked for")
    func oneWakeInFlight() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let path = directory + "/receiver.sock"
        let socket = try receivingSocket(at: path)
        let wake = try #require(SocketWake(connectingTo: path))
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<1_000 { wake.wake() }
        }
        #expect(drain(socket) == [SocketWake.length])
        // Not taken yet: the one in flight still stands for every later ask.
        wake.wake()
        #expect(drain(socket) == [])
        wake.taken()
        wake.wake()
        wake.wake()
        #expect(drain(socket) == [SocketWake.length])
    }

    @Test("a wake-up the full queue refused leaves none in flight: the next one is sent")
    func refusedWakeIsNotInFlight() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let path = directory + "/receiver.sock"
        let socket = try receivingSocket(at: path)
        let filler = try SystemCalls.datagramSocket().get()
        _ = try SystemCalls.connectSocket(filler, toSocketFile: path, accepting: { _ in true }).get()
        let byte: [UInt8] = [7, 7]
        var queued = 0
        while case .success = byte.withUnsafeBytes({ SystemCalls.sendDatagram(filler, $0) }) { queued += 1 }
        let wake = try #require(SocketWake(connectingTo: path))
        wake.wake()
        #expect(drain(socket) == Array(repeating: 2, count: queued))
        wake.wake()
        #expect(drain(socket) == [SocketWake.length])
    }

    @Test(
        "the socket's receive timeout is the largest power of two within the wait, at most 32,768 ms, and none without a limit"
    )
    func timeoutBuckets() {
        let cases: [(CInt, Int?)] = [
            (-1, nil), (0, 1), (1, 1), (2, 2), (3, 2), (999, 512), (1_000, 512), (1_024, 1_024), (60_000, 32_768),
        ]
        for (wait, timeout) in cases {
            #expect(SocketTransport.receiveTimeout(forWaitOf: wait) == timeout, "a wait of \(wait) ms")
        }
    }

    /// An observer hub whose first notification holds the receiving thread
    /// until `release`, so posters fill its socket and spool the rest.
    private struct HeldObserver {
        let transport: SocketTransport
        let hub: NotificationHub<SocketTransport>
        let received = Collector<[UInt8]>()
        let holding = Signal()
        let release = DispatchSemaphore(value: 0)
        var token: ObservationToken?

        init(directory: String, sleepsInReceive: Bool) throws {
            var configuration = SocketTransportConfiguration()
            configuration.sleepsInReceive = sleepsInReceive
            configuration.sleepsInReceiveBeyondLimit = sleepsInReceive
            // Held on purpose: a thread of its own, not one other tests' hubs share.
            configuration.loopGroup = LoopGroup(threads: 1)
            // No look but the ones posters cause: a spool that is not seen
            // from them is never seen, and the test times out.
            transport = try SocketTransport(directory: directory, configuration: configuration)
            hub = try NotificationHub(endpoint: "held", transport: transport)
            let (received, holding, release) = (received, holding, release)
            token = try hub.addObserver(.of(Blob.self), bufferingPolicy: .unbounded) { blob, _ in
                if received.values.isEmpty {
                    holding.fire()
                    release.wait()
                }
                received.append(blob.bytes)
            }
        }
    }

    /// Posts `count` blobs of `size` bytes, the first byte their index, to
    /// an observer held by its first; releases it once the rest are
    /// spooled, and checks that every one arrives, in order, from a look
    /// at the spool that nothing but the posts caused.
    private func heldObserverGetsEverything(size: Int, count: Int, sleepsInReceive: Bool) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try HeldObserver(directory: directory, sleepsInReceive: sleepsInReceive)
        defer { observer.hub.close() }
        let posterTransport = try SocketTransport(directory: directory)
        let poster = try NotificationHub(endpoint: "poster", transport: posterTransport)
        defer { poster.close() }
        func blob(_ index: Int) -> Blob { Blob(bytes: [UInt8(index)] + Array(repeating: 0x5A, count: size - 1)) }
        try poster.post(blob(0))
        #expect(await observer.holding.wait(upTo: safetyNet), "the first notification never reached its handler")
        for index in 1..<count { try poster.post(blob(index)) }
        #expect(posterTransport.statistics.spooled > 0, "nothing was spooled: the scenario did not happen")
        observer.release.signal()
        #expect(await observer.received.wait(forCount: count, upTo: safetyNet))
        #expect(observer.received.values.map { Int($0[0]) } == Array(0..<count))
        #expect(observer.transport.statistics.receivedFromSpool > 0)
    }

    @Test(
        "a spool started while the observer's queue was full is read once it runs: the full queue says so",
        arguments: [true, false])
    func spoolSeenFromFullQueue(sleepsInReceive: Bool) async throws {
        try await heldObserverGetsEverything(size: 16, count: 60, sleepsInReceive: sleepsInReceive)
    }

    @Test(
        "a spool started while the observer's queue had room is read at once: the poster's nudge says so",
        arguments: [true, false])
    func spoolSeenFromNudge(sleepsInReceive: Bool) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        var configuration = SocketTransportConfiguration()
        configuration.sleepsInReceive = sleepsInReceive
        configuration.sleepsInReceiveBeyondLimit = sleepsInReceive
        let transport = try SocketTransport(directory: directory, configuration: configuration)
        let hub = try NotificationHub(endpoint: "observer", transport: transport)
        defer { hub.close() }
        let received = Collector<[UInt8]>()
        let token = try hub.addObserver(.of(Blob.self), bufferingPolicy: .unbounded) { blob, _ in
            received.append(blob.bytes)
        }
        defer { token.cancel() }
        // A poster that found the socket full, waited, and spools, while the
        // observer drained its queue meanwhile: the queue has room, no full
        // queue says anything, and the file is this notification's only way.
        let id = endpointIdentifier(transport)
        guard
            case .connected(let peer) = SocketPeer.connect(
                id, path: transport.socketPath, directory: directory,
                poster: SocketRegistry.makeIdentifier(), sharing: .ownerOnly, spoolLimit: 1 << 20)
        else {
            Issue.record("could not reach the observer's socket")
            return
        }
        let message = try forgedMessage(
            Blob(bytes: [1, 2, 3]), from: forgedSender(endpoint: "poster", instance: 7), sequence: 1)
        guard case .encoded(let encoded) = message.payload, case .spooled = peer.spool.start(with: encoded, of: message)
        else {
            Issue.record("the spool file was not started")
            return
        }
        peer.nudgeIfSpoolStarted()
        #expect(await received.wait(forCount: 1, upTo: safetyNet), "the spooled notification never arrived")
        #expect(received.values == [[1, 2, 3]])
        #expect(transport.statistics.receivedFromSpool == 1)
    }
}
