import Foundation
import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// What a post costs when its observer is a stopped process (SIGSTOP), against
// the same post to the same observer running, measured in one run: the
// socket transport sends while the observer's socket has room and appends to
// its spool after. Also how long closing a hub takes with everything unread,
// and whether the observer, once resumed, got everything.

/// The notification of this section.
struct StoppedProbe: TypedNotification, Codable {
    static let name: NotificationName = "bench.stopped"
    var index: Int
}

/// The observer process: counts probes until `total`, then prints
/// "done COUNT MISSED".
func runStoppedObserver(_ arguments: ArraySlice<String>) throws {
    guard arguments.count == 2, let directory = arguments.first, let total = Int(arguments[arguments.startIndex + 1])
    else { fail("usage: stopped-observer DIR TOTAL") }
    let hub = try NotificationHub(endpoint: "stopped-observer", transport: SocketTransport(directory: directory))
    let done = DispatchSemaphore(value: 0)
    let counts = Locked((received: 0, missed: 0))
    let token = try hub.addObserver(.of(StoppedProbe.self), bufferingPolicy: .unbounded) { _, delivery in
        let finished = counts.withLock { counts -> Bool in
            counts.received += 1
            counts.missed += delivery.missed
            return counts.received + counts.missed == total
        }
        if finished { done.signal() }
    }
    say("ready")
    done.wait()
    let final = counts.withLock { $0 }
    say("done \(final.received) \(final.missed)")
    token.cancel()
    hub.closeAndWait()
}

/// Figures of the stopped-observer section.
struct StoppedResults: Codable, Sendable {
    var running: Percentiles
    var stopped: Percentiles
    var spooled: Int
    var closeNanoseconds: UInt64
    var received: Int
    var missed: Int
}

/// Posts `count` to a running observer process, then `count` with it
/// stopped, then closes and resumes it.
func measureStoppedObserver(count: Int) throws -> StoppedResults {
    let directory = makeScratchDirectory("stopped")
    defer { removeScratchDirectory(directory) }
    let observer = Child(["stopped-observer", directory, "\(2 * count)"])
    _ = observer.expect("ready")
    let transport = try SocketTransport(directory: directory)
    let hub = try NotificationHub(endpoint: "poster", transport: transport)
    func timedPosts(_ indices: Range<Int>) throws -> [UInt64] {
        var samples: [UInt64] = []
        samples.reserveCapacity(indices.count)
        for index in indices {
            let started = now()
            try hub.post(StoppedProbe(index: index))
            samples.append(now() &- started)
        }
        return samples
    }
    let running = try timedPosts(0..<count)
    // The running observer has read them all before it is stopped.
    guard transport.flush(timeout: .seconds(60)) else { fail("the running observer did not keep up") }
    kill(observer.processID, SIGSTOP)
    var info = siginfo_t()
    _ = waitid(P_PID, id_t(observer.processID), &info, WSTOPPED | WNOWAIT)
    let stopped = try timedPosts(count..<(2 * count))
    let spooled = transport.statistics.spooled
    let closeStarted = now()
    hub.closeAndWait()
    let closeNanoseconds = now() &- closeStarted
    kill(observer.processID, SIGCONT)
    let fields = observer.expect("done ").split(separator: " ")
    observer.wait()
    return StoppedResults(
        running: Percentiles(running),
        stopped: Percentiles(stopped),
        spooled: spooled,
        closeNanoseconds: closeNanoseconds,
        received: fields.count == 3 ? Int(fields[1]) ?? 0 : 0,
        missed: fields.count == 3 ? Int(fields[2]) ?? 0 : 0
    )
}
