import Dispatch
import Foundation
import Synchronization
import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// A small notification with an index, for order checks.
struct Ping: TypedNotification, Codable, Equatable {
    static let name: NotificationName = "test.ping"
    var index: Int
    var poster: Int = 0
}

/// Another type under another name.
struct Note: TypedNotification, Codable, Equatable {
    static let name: NotificationName = "test.note"
    var text: String
}

/// A hub on a bus of its own, so tests never hear each other.
func makeHub(
    endpoint: String = "test",
    bus: InProcessBus = InProcessBus()
) throws -> NotificationHub<InProcessTransport> {
    try NotificationHub(endpoint: endpoint, transport: InProcessTransport(bus: bus))
}

/// One timed wait: resumed once, with `true` by the thread that brought
/// what it waits for, or `false` by a timer off the shared pool once its
/// limit passed (or its task was cancelled), whichever comes first.
///
/// The outcome is decided when the first of those happens, never when the
/// waiting task next runs: with hundreds of tests on the shared pool's two
/// threads, a resumed task can wait a minute for one, and a safety net
/// raced on the pool then fails a test whose notifications all arrived in
/// time (CI: every ping handled 2 s after the gate opened; the wait, on
/// the pool, gave up at 60 s).
final class TimedWaiter: Sendable {
    private let state = Locked<(continuation: CheckedContinuation<Bool, Never>?, outcome: Bool?)>((nil, nil))

    /// Decides the outcome, if nothing decided it yet.
    func resume(_ outcome: Bool) {
        let continuation = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            guard state.outcome == nil else { return nil }
            state.outcome = outcome
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume(returning: outcome)
    }

    /// Waits for the outcome: `register` hands the waiter to whatever will
    /// resume it (or resumes it at once), and the clock starts after it.
    static func wait(upTo limit: Duration, _ register: (TimedWaiter) -> Void) async -> Bool {
        let waiter = TimedWaiter()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let decided = waiter.state.withLock { state -> Bool? in
                    if state.outcome == nil { state.continuation = continuation }
                    return state.outcome
                }
                if let decided {
                    continuation.resume(returning: decided)
                    return
                }
                register(waiter)
                let (seconds, attoseconds) = limit.components
                let nanoseconds = min(seconds, 86_400) * 1_000_000_000 + attoseconds / 1_000_000_000
                DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(nanoseconds))) {
                    waiter.resume(false)
                }
            }
        } onCancel: {
            waiter.resume(false)
        }
    }
}

/// A one-shot signal that any number of tasks can await.
final class Signal: Sendable {
    private let state = Locked<
        (fired: Bool, waiters: [CheckedContinuation<Void, Never>], timed: [TimedWaiter])
    >((false, [], []))

    func fire() {
        let (waiters, timed) = state.withLock { state in
            state.fired = true
            defer {
                state.waiters = []
                state.timed = []
            }
            return (state.waiters, state.timed)
        }
        for waiter in waiters { waiter.resume() }
        for waiter in timed { waiter.resume(true) }
    }

    var hasFired: Bool { state.withLock { $0.fired } }

    func wait() async {
        await withCheckedContinuation { continuation in
            let fired = state.withLock { state in
                if !state.fired { state.waiters.append(continuation) }
                return state.fired
            }
            if fired { continuation.resume() }
        }
    }

    /// Waits for the signal, giving up after `limit` (a safety net for a
    /// signal that a broken promise would never fire). Returns whether it
    /// fired within `limit`, as decided when it fired (see ``TimedWaiter``).
    func wait(upTo limit: Duration) async -> Bool {
        await TimedWaiter.wait(upTo: limit) { waiter in
            let fired = state.withLock { state in
                if !state.fired { state.timed.append(waiter) }
                return state.fired
            }
            if fired { waiter.resume(true) }
        }
    }
}

/// Collects values from any thread; a test can await a count.
final class Collector<Value: Sendable>: Sendable {
    private let state = Locked<
        (
            values: [Value], finished: Bool,
            waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)],
            timed: [(count: Int, waiter: TimedWaiter)],
            matching: [(match: @Sendable (Value) -> Bool, waiter: TimedWaiter)]
        )
    >(
        ([], false, [], [], [])
    )

    /// No more values will come (a helper's output ended): every wait
    /// returns now, and later ones at once, whatever their count.
    func finish() {
        let (waiters, timed) = state.withLock { state in
            state.finished = true
            defer {
                state.waiters = []
                state.timed = []
                state.matching = []
            }
            return (state.waiters.map(\.continuation), state.timed.map(\.waiter) + state.matching.map(\.waiter))
        }
        for waiter in waiters { waiter.resume() }
        // Each still waited for more than there are.
        for waiter in timed { waiter.resume(false) }
    }

    /// Whether ``finish()`` was called.
    var isFinished: Bool { state.withLock { $0.finished } }

    func append(_ value: Value) {
        let (ready, timed) = state.withLock { state in
            state.values.append(value)
            let count = state.values.count
            var ready: [CheckedContinuation<Void, Never>] = []
            var timed: [TimedWaiter] = []
            if !state.waiters.isEmpty {
                ready = state.waiters.filter { $0.count <= count }.map(\.continuation)
                state.waiters.removeAll { $0.count <= count }
            }
            if !state.timed.isEmpty {
                timed = state.timed.filter { $0.count <= count }.map(\.waiter)
                state.timed.removeAll { $0.count <= count }
            }
            if !state.matching.isEmpty {
                // The predicates are a test's pure checks of one value.
                timed += state.matching.filter { $0.match(value) }.map(\.waiter)
                state.matching.removeAll { $0.match(value) }
            }
            return (ready, timed)
        }
        for waiter in ready { waiter.resume() }
        for waiter in timed { waiter.resume(true) }
    }

    var values: [Value] { state.withLock { $0.values } }

    /// Waits for at least `count` values, giving up after `limit` (a safety
    /// net for values a broken promise would never deliver) or once no more
    /// can come. Returns whether they arrived within `limit`, as decided
    /// when the last of them arrived (see ``TimedWaiter``).
    func wait(forCount count: Int, upTo limit: Duration) async -> Bool {
        await TimedWaiter.wait(upTo: limit) { waiter in
            let outcome = state.withLock { state -> Bool? in
                if state.values.count >= count { return true }
                if state.finished { return false }
                state.timed.append((count, waiter))
                return nil
            }
            if let outcome { waiter.resume(outcome) }
        }
    }

    /// Waits for a value that `match` accepts, giving up after `limit` (a
    /// safety net) or once no more can come. Returns whether one arrived
    /// within `limit`, as decided when it arrived (see ``TimedWaiter``).
    func wait(forValue match: @escaping @Sendable (Value) -> Bool, upTo limit: Duration) async -> Bool {
        await TimedWaiter.wait(upTo: limit) { waiter in
            let outcome = state.withLock { state -> Bool? in
                if state.values.contains(where: match) { return true }
                if state.finished { return false }
                state.matching.append((match, waiter))
                return nil
            }
            if let outcome { waiter.resume(outcome) }
        }
    }

    /// Returns once at least `count` values have arrived, or once
    /// ``finish()`` says no more will.
    func wait(forCount count: Int) async {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state in
                if state.values.count >= count || state.finished { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }
}

/// A boolean any thread can set and read.
final class Flag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) }
}

/// A counter any thread can bump and read.
final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    func increment() { value.add(1, ordering: .relaxed) }
    var count: Int { value.load(ordering: .relaxed) }
}

/// Holds a value set after creation, such as a token its own handler uses.
final class Slot<Value: Sendable>: Sendable {
    private let value = Locked<Value?>(nil)
    func set(_ newValue: Value) { value.withLock { $0 = newValue } }
    var current: Value? { value.withLock { $0 } }
    /// Empties the slot; the value is released after the lock, never under it.
    func clear() {
        let old = value.withLock { $0.take() }
        withExtendedLifetime(old) {}
    }
}

/// Runs `body` on a thread of its own; the event fires when it returns.
func startThread(_ body: @escaping @Sendable () -> Void) -> OneShotEvent {
    let done = OneShotEvent()
    let thread = Thread {
        body()
        done.signal()
    }
    thread.start()
    return done
}

/// How long a test waits for something a broken promise would never bring
/// (a notification, a helper's line, a condition) before it fails.
///
/// Generous on purpose: in a full run on two cores, with some 500 tests in
/// flight, a job queued on the shared pool (an in-process hub's handler, a
/// resumed test task) has waited more than 30 s behind the pool's runnable
/// jobs while nothing was lost (the loop of 20 runs on `86d7de6`, run 8: the
/// handler ran, late). A notification that was lost is as lost after 180 s,
/// and a test that passes never waits for the net.
let safetyNet: Duration = .seconds(180)

/// Waits on this thread, with a generous safety net, until `condition`
/// holds: for synchronous tests and threads of their own (an async test
/// uses ``waitUntil(_:)``, which frees its thread while it waits).
func waitOnThisThread(_ condition: () -> Bool) -> Bool {
    let deadline = SystemClock.monotonicNanoseconds() + UInt64(safetyNet.components.seconds) * 1_000_000_000
    while !condition() {
        guard SystemClock.monotonicNanoseconds() < deadline else { return false }
        SystemProcess.pause(microseconds: 200)
    }
    return true
}

/// Waits until `condition` holds, looking again every half millisecond
/// with the task suspended, never holding one of the cooperative pool's
/// threads (two on a 2-core machine), which every other test's tasks need.
/// The deadline (``safetyNet``) is a safety net.
func waitUntil(_ condition: () -> Bool) async -> Bool {
    let deadline = SystemClock.monotonicNanoseconds() + UInt64(safetyNet.components.seconds) * 1_000_000_000
    while !condition() {
        guard SystemClock.monotonicNanoseconds() < deadline else { return false }
        try? await Task.sleep(for: .microseconds(500))
    }
    return true
}

/// Runs the blocking `body` on a thread of its own and returns what it
/// returns: a test that waits in a system call, computes for long, or blocks
/// until the test goes on must not hold one of the cooperative pool's two
/// threads while it does. Off the test's task there is no current test, so
/// an issue recorded in `body` is not attributed to it: return what failed
/// and record it after, where that matters.
func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.start()
    }
}

/// `SOCK_STREAM` as `socket(2)` takes it: an enum in Glibc, a macro on Darwin.
#if os(Linux)
    let streamSocketType = Int32(SOCK_STREAM.rawValue)
#else
    let streamSocketType = SOCK_STREAM
#endif

/// Whether this test run is built with ThreadSanitizer, whose shadow memory
/// makes a process's resident size say little about what the code keeps.
#if os(Linux)
    let runsUnderThreadSanitizer = dlsym(nil, "__tsan_init") != nil  // RTLD_DEFAULT is NULL here
#else
    let runsUnderThreadSanitizer = dlsym(UnsafeMutableRawPointer(bitPattern: -2), "__tsan_init") != nil
#endif

/// An actor with a thread of its own: a handler that blocks on it (held by
/// a test on purpose) takes none of the shared pool's threads, which every
/// other test's tasks need (two on a 2-core machine).
actor ThreadActor {
    nonisolated let loop: EventLoop

    init() throws {
        loop = try EventLoop(name: "test.ThreadActor")
        loop.start()
    }

    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }
}

/// How many names the many-names tests post: 10,000, or
/// `TYPED_NOTIFICATIONS_MANY_NAMES` (CI's ThreadSanitizer run takes 1,000:
/// the races are in the paths, which a thousand names take as ten thousand
/// do, and under its slowdown the ten thousand took three minutes).
let manyNames = Int(ProcessInfo.processInfo.environment["TYPED_NOTIFICATIONS_MANY_NAMES"] ?? "") ?? 10_000

/// Keeps the tests that load the whole machine (10,000 names) apart from
/// the tests that compare timings within one run (a ticker against a free
/// thread): the load would land on one side of the comparison only. Each
/// holds it for its body: `await MachineLoad.acquire()`, then `defer {
/// MachineLoad.release() }`.
enum MachineLoad {
    private static let state = Locked<(busy: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    /// Returns once no other holder is in its body.
    static func acquire() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state in
                guard state.busy else {
                    state.busy = true
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Lets the next holder in.
    static func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiters.isEmpty else {
                state.busy = false
                return nil
            }
            return state.waiters.removeFirst()
        }
        next?.resume()
    }
}

#if os(Linux)
    /// The descriptors this process holds on files under `directory`: its
    /// files (a removed one too) and its Unix sockets, by path.
    func descriptors(under directory: String) throws -> [String] {
        var socketPaths: [String: String] = [:]
        // Num RefCount Protocol Flags Type St Inode Path
        for line in try String(contentsOfFile: "/proc/net/unix", encoding: .utf8).split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            if fields.count >= 8 { socketPaths[String(fields[6])] = String(fields[7]) }
        }
        let folder = "/proc/self/fd"
        return try FileManager.default.contentsOfDirectory(atPath: folder).compactMap { entry in
            guard var target = try? FileManager.default.destinationOfSymbolicLink(atPath: folder + "/" + entry)
            else { return nil }
            if target.hasPrefix("socket:["), let path = socketPaths[String(target.dropFirst(8).dropLast())] {
                target = path
            }
            return target.hasPrefix(directory + "/") ? target : nil
        }
    }
#endif
