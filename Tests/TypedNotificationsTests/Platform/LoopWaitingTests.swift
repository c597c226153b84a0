import Foundation
import Synchronization
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A driver's own receive call for a loop: a datagram socket pair, whose
/// receiving end the loop's thread blocks in; a wake-up is an empty
/// datagram from the other end, which the receive takes and discards.
private final class DatagramReceiving: Sendable {
    let receiveEnd: FileDescriptor
    let sendEnd: FileDescriptor
    /// Each datagram taken, with whether the loop's thread took it.
    let received = Collector<[UInt8]>()
    /// The timeout of every blocking receive, when it started.
    let timeouts = Collector<CInt>()
    let wakes = Counter()
    let onLoopThread = Locked<[Bool]>([])
    let loop = Slot<EventLoop>()

    init() throws {
        var ends: [CInt] = [0, 0]
        #if canImport(Glibc)
            let kind = CInt(SOCK_DGRAM.rawValue)
        #else
            let kind = SOCK_DGRAM
        #endif
        guard socketpair(AF_UNIX, kind, 0, &ends) == 0 else { throw Errno.current }
        receiveEnd = FileDescriptor(adopting: ends[0])
        sendEnd = FileDescriptor(adopting: ends[1])
    }

    func post(_ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { send(sendEnd.rawValue, $0.baseAddress, $0.count, 0) }
    }

    func wakeUp() {
        wakes.increment()
        _ = send(sendEnd.rawValue, nil, 0, 0)
    }

    /// Blocks at most `timeout` ms in `recv`, then takes what else is there.
    func receive(timeout: CInt) {
        onLoopThread.withLock { $0.append(loop.current?.isCurrent == true) }
        var limit = timeval(tv_sec: 0, tv_usec: 0)
        if timeout > 0 { limit = timeval(tv_sec: Int(timeout / 1000), tv_usec: numericCast(timeout % 1000 * 1000)) }
        _ = setsockopt(
            receiveEnd.rawValue, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        if timeout != 0 { timeouts.append(timeout) }
        var flags = timeout == 0 ? CInt(MSG_DONTWAIT) : 0
        var buffer = [UInt8](repeating: 0, count: 256)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(receiveEnd.rawValue, $0.baseAddress, $0.count, flags) }
            guard count >= 0 else { return }
            if count > 0 { received.append(Array(buffer[..<count])) }
            flags = CInt(MSG_DONTWAIT)
        }
    }

    /// How many datagrams are still queued at the receiving end: wake-ups
    /// nobody took, once the loop has ended.
    func unread() -> Int {
        var count = 0
        var byte: UInt8 = 0
        while recv(receiveEnd.rawValue, &byte, 1, CInt(MSG_DONTWAIT)) >= 0 { count += 1 }
        return count
    }

    /// A loop on this receive call, started, once its thread first sleeps
    /// in `recv` with nothing to do.
    func startAsleep(named name: String) async throws -> EventLoop {
        let loop = try makeLoop(named: name)
        loop.start()
        await timeouts.wait(forCount: 1)
        return loop
    }

    func makeLoop(named name: String) throws -> EventLoop {
        let loop = try EventLoop(
            // Weakly: this holds the loop, and the test holds this.
            name: name,
            waiting: .receiving({ [weak self] in self?.receive(timeout: $0) }, wake: { [weak self] in self?.wakeUp() }))
        self.loop.set(loop)
        return loop
    }
}

/// The system call the thread of this process named `name` is in now, by
/// its number (`/proc/self/task/*/syscall`), or `nil` when none is found.
func systemCall(ofThreadNamed name: String) -> Int? {
    #if os(Linux)
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task") else { return nil }
        for task in tasks {
            guard
                let comm = try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8),
                comm.trimmingCharacters(in: .whitespacesAndNewlines) == name,
                let call = try? String(contentsOfFile: "/proc/self/task/\(task)/syscall", encoding: .utf8)
            else { continue }
            return call.split(separator: " ").first.flatMap { Int($0) }
        }
    #endif
    return nil
}

#if arch(x86_64)
    private let receiveCalls: Set<Int> = [45, 47, 299]  // recvfrom, recvmsg, recvmmsg
    private let eventCalls: Set<Int> = [232, 281, 441]  // epoll_wait, epoll_pwait, epoll_pwait2
#elseif arch(arm64)
    private let receiveCalls: Set<Int> = [207, 212, 243]
    private let eventCalls: Set<Int> = [22, 441]
#else
    private let receiveCalls: Set<Int> = []
    private let eventCalls: Set<Int> = []
#endif

@Suite("Event loop: how its thread waits", .timeLimit(.minutes(5)))
struct LoopWaitingTests {
    @Test("a loop that waits in its own receive call sleeps there, not in epoll, and takes datagrams there")
    func sleepsInReceive() async throws {
        let receiving = try DatagramReceiving()
        let loop = try await receiving.startAsleep(named: "test.waitsInRecv")
        defer { loop.stopAndJoin() }
        #expect(receiving.timeouts.values.first == -1, "nothing to do: it blocks without limit")
        #if os(Linux)
            if !receiveCalls.isEmpty {
                #expect(await waitUntil { systemCall(ofThreadNamed: "waitsInRecv").map(receiveCalls.contains) == true })
            }
        #endif
        receiving.post([1, 2, 3])
        await receiving.received.wait(forCount: 1)
        #expect(receiving.received.values == [[1, 2, 3]])
        #expect(receiving.onLoopThread.withLock { $0.allSatisfy { $0 } })
    }

    @Test("the same probe finds a loop that waits for events in epoll, so it tells the two apart")
    func eventsLoopSleepsInEpoll() async throws {
        #if os(Linux)
            guard !eventCalls.isEmpty else { return }
            let loop = try EventLoop(name: "test.waitsInEpoll")
            loop.start()
            defer { loop.stopAndJoin() }
            #expect(await waitUntil { systemCall(ofThreadNamed: "waitsInEpoll").map(eventCalls.contains) == true })
        #endif
    }

    @Test("a job from another thread wakes a loop asleep in its receive call, with one wake-up")
    func jobWakesReceive() async throws {
        let receiving = try DatagramReceiving()
        let loop = try await receiving.startAsleep(named: "test.jobWakes")
        defer { loop.stopAndJoin() }
        let ran = Signal()
        let onLoop = Flag()
        loop.execute {
            if loop.isCurrent { onLoop.set() }
            ran.fire()
        }
        #expect(await ran.wait(upTo: safetyNet))
        #expect(onLoop.isSet)
        #expect(receiving.wakes.count == 1)
        #expect(receiving.received.values.isEmpty, "the wake-up is not a datagram the driver sees")
    }

    @Test("a timer bounds the receive's timeout and fires while no datagram arrives")
    func timerBoundsReceive() async throws {
        let receiving = try DatagramReceiving()
        let loop = try await receiving.startAsleep(named: "test.timerBounds")
        defer { loop.stopAndJoin() }
        let fired = Signal()
        let start = SystemClock.monotonicNanoseconds()
        let firedAt = Locked<UInt64>(0)
        loop.schedule(after: 40_000_000) {
            firedAt.withLock { $0 = SystemClock.monotonicNanoseconds() }
            fired.fire()
        }
        #expect(await fired.wait(upTo: safetyNet))
        #expect(firedAt.withLock { $0 } &- start >= 40_000_000, "never early")
        #expect(receiving.timeouts.values.dropFirst().contains { (1...40).contains($0) })
    }

    @Test(
        "stop wakes a sleeping loop once, as a job does, and not at all from a job: no wake-up is left unread",
        arguments: [false, true])
    func stopWakesOnce(fromJob: Bool) async throws {
        // The rounds run on a thread of their own, waiting there: 50 awaits
        // on the cooperative pool, crowded at the start of a full run, took
        // over two minutes once.
        let unread = Locked<[Int]>([])
        let failure = Slot<String>()
        let done = startThread {
            for _ in 0..<50 {
                do {
                    let receiving = try DatagramReceiving()
                    let loop = try receiving.makeLoop(named: "test.stopOnce")
                    loop.start()
                    guard waitOnThisThread({ !receiving.timeouts.values.isEmpty }) else {
                        failure.set("the loop never slept")
                        return
                    }
                    if fromJob {
                        loop.execute { loop.stop() }
                    } else {
                        loop.execute {}
                        loop.stop()
                    }
                    guard loop.join(nanoseconds: 10_000_000_000) == .joined else {
                        failure.set("the loop did not stop")
                        return
                    }
                    unread.withLock { $0.append(receiving.unread()) }
                } catch {
                    failure.set("\(error)")
                    return
                }
            }
        }
        #expect(await waitUntil { done.wait(nanoseconds: 0) })
        #expect(failure.current == nil)
        #expect(unread.withLock { $0 } == Array(repeating: 0, count: 50), "wake-ups nobody took, per round")
    }

    @Test("stop ends a loop asleep in its receive call, and it watches no descriptors")
    func stopsAndRefusesDescriptors() async throws {
        let receiving = try DatagramReceiving()
        let loop = try receiving.makeLoop(named: "test.stops")
        guard case .failure(let refused) = loop.register(receiving.sendEnd.rawValue, onReadable: {}) else {
            Issue.record("a loop that waits in its own receive call registered a descriptor")
            return
        }
        #expect(refused == Errno(rawValue: EOPNOTSUPP))
        loop.start()
        await receiving.timeouts.wait(forCount: 1)
        #expect(loop.stopAndJoin(nanoseconds: 10_000_000_000) == .joined)
        // Jobs enqueued after the stop still run, elsewhere.
        let ran = Signal()
        loop.execute { ran.fire() }
        #expect(await ran.wait(upTo: safetyNet))
    }
}
