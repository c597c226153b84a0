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

/// A counter only a loop's jobs touch.
private final class Box { var count = 0 }

/// An actor whose jobs run on an event loop.
private actor LoopActor {
    let loop: EventLoop
    private(set) var count = 0

    init(loop: EventLoop) {
        self.loop = loop
    }

    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    func bump() -> Bool {
        count += 1
        return loop.isCurrent
    }
}

@Suite("Event loop")
struct EventLoopTests {
    @Test("jobs run on the loop's thread, one at a time, in the order they were enqueued")
    func jobsInOrder() async throws {
        let loop = try EventLoop(name: "test.order")
        loop.start()
        defer { loop.stop() }
        let seen = Collector<(Int, Bool)>()
        for index in 0..<10_000 {
            loop.execute { seen.append((index, loop.isCurrent)) }
        }
        await seen.wait(forCount: 10_000)
        #expect(seen.values.map(\.0) == Array(0..<10_000))
        #expect(seen.values.allSatisfy { $0.1 })
    }

    @Test("a readable descriptor's handler runs on the loop's thread until it is deregistered")
    func readableDescriptor() async throws {
        let loop = try EventLoop(name: "test.read")
        loop.start()
        defer { loop.stop() }
        let pipe = try SystemCalls.makePipe().get()
        let reads = Collector<Bool>()
        let readEnd = pipe.readEnd.rawValue
        _ = try loop.register(readEnd) {
            var byte: UInt8 = 0
            _ = read(readEnd, &byte, 1)
            reads.append(loop.isCurrent)
        }.get()
        _ = SystemCalls.writeAll(pipe.writeEnd, [1])
        await reads.wait(forCount: 1)
        _ = SystemCalls.writeAll(pipe.writeEnd, [2])
        await reads.wait(forCount: 2)
        #expect(reads.values == [true, true])
        // Deregistered on the loop itself, so no later readiness can race it.
        let done = Signal()
        loop.execute {
            loop.deregister(readEnd)
            done.fire()
        }
        await done.wait()
        _ = SystemCalls.writeAll(pipe.writeEnd, [3])
        let after = Signal()
        loop.execute { after.fire() }
        await after.wait()
        #expect(reads.values.count == 2)
    }

    @Test("a descriptor marked readable from another thread runs its handler on the loop, with no job handed off")
    func markedReadable() async throws {
        let loop = try EventLoop(name: "test.marked")
        loop.start()
        defer { loop.stop() }
        // Never written: only the marks make its handler run.
        let pipe = try SystemCalls.makePipe().get()
        let runs = Collector<Bool>()
        _ = try loop.register(pipe.readEnd.rawValue) { runs.append(loop.isCurrent) }.get()
        let handOffsBefore = loop.handOffs
        for count in 1...100 {
            loop.markReadable(pipe.readEnd.rawValue)
            await runs.wait(forCount: count)
        }
        #expect(runs.values.count == 100 && runs.values.allSatisfy { $0 })
        #expect(loop.handOffs == handOffsBefore)
        // A descriptor with no handler is not marked.
        loop.markReadable(pipe.writeEnd.rawValue)
        let after = Signal()
        loop.execute { after.fire() }
        await after.wait()
        #expect(runs.values.count == 100)
    }

    @Test("a timer fires on the loop's thread, never before its time")
    func timer() async throws {
        let loop = try EventLoop(name: "test.timer")
        loop.start()
        defer { loop.stop() }
        let start = SystemClock.monotonicNanoseconds()
        let fired = Collector<(UInt64, Bool)>()
        loop.schedule(after: 20_000_000) { fired.append((SystemClock.monotonicNanoseconds(), loop.isCurrent)) }
        await fired.wait(forCount: 1)
        #expect(fired.values[0].0 - start >= 20_000_000)
        #expect(fired.values[0].1)
    }

    @Test("an actor on the loop runs there; a task that prefers the loop runs its nonisolated code there")
    func executors() async throws {
        let loop = try EventLoop(name: "test.executors")
        loop.start()
        defer { loop.stop() }
        let bound = LoopActor(loop: loop)
        var onLoop = true
        for _ in 0..<100 { onLoop = await bound.bump() && onLoop }
        #expect(onLoop)
        #expect(await bound.count == 100)
        let preferred = await Task(executorPreference: loop) { loop.isCurrent }.value
        #expect(preferred)
        #expect(!loop.isCurrent)
    }

    @Test("a flood of jobs that enqueue each other does not keep the loop from its descriptors")
    func jobsDoNotStarveIO() async throws {
        let loop = try EventLoop(name: "test.flood")
        loop.start()
        let stopFlood = Flag()
        let floodRuns = Counter()
        @Sendable func flood() {
            floodRuns.increment()
            if !stopFlood.isSet { loop.execute(flood) }
        }
        loop.execute(flood)
        loop.execute(flood)
        let pipe = try SystemCalls.makePipe().get()
        let readEnd = pipe.readEnd.rawValue
        let readable = Signal()
        _ = try loop.register(readEnd) { readable.fire() }.get()
        _ = SystemCalls.writeAll(pipe.writeEnd, [1])
        let arrived = await readable.wait(upTo: safetyNet)
        stopFlood.set()
        loop.deregister(readEnd)
        loop.stop()
        #expect(arrived)
        #expect(floodRuns.count > 0)
    }

    @Test("the loop never waits for itself: stopAndJoin on its own thread returns at once, and join there traps")
    func joinOnItself() async throws {
        let loop = try EventLoop(name: "test.join")
        loop.start()
        let outcome = Collector<EventLoop.JoinOutcome>()
        loop.execute {
            outcome.append(loop.stopAndJoin(nanoseconds: 60_000_000_000))
        }
        await outcome.wait(forCount: 1)
        #expect(outcome.values == [.refusedOnLoopThread])
        #expect(loop.join(nanoseconds: 30_000_000_000) == .joined)
        #if DEBUG
            // A bare join there is a programming error, said loudly.
            await #expect(processExitsWith: .failure) {
                let loop = try EventLoop(name: "test.join.trap")
                loop.start()
                let done = OneShotEvent()
                loop.execute {
                    _ = loop.join(nanoseconds: 1_000_000_000)
                    done.signal()
                }
                _ = done.wait(nanoseconds: 30_000_000_000)
            }
        #endif
    }

    @Test("state bound to a loop is reached on the loop, and traps on another thread")
    func loopBound() async throws {
        let loop = try EventLoop(name: "test.bound")
        loop.start()
        defer { loop.stop() }
        let bound = LoopBound(Box(), on: loop)
        let seen = Collector<Int>()
        for _ in 0..<100 {
            loop.execute {
                bound.value.count += 1
                seen.append(bound.value.count)
            }
        }
        await seen.wait(forCount: 100)
        #expect(seen.values == Array(1...100))
        await #expect(processExitsWith: .failure) {
            let loop = try EventLoop(name: "test.bound.trap")
            _ = LoopBound(Box(), on: loop).value
        }
    }

    @Test("after stop, queued and later jobs still run one at a time in order, so no task is stranded")
    func jobsOutliveTheLoop() async throws {
        let loop = try EventLoop(name: "test.detached")
        loop.start()
        let bound = LoopActor(loop: loop)
        _ = await bound.bump()
        loop.stop()
        #expect(loop.join(nanoseconds: 30_000_000_000) == .joined)
        let seen = Collector<Int>()
        for index in 0..<1000 { loop.execute { seen.append(index) } }
        await seen.wait(forCount: 1000)
        #expect(seen.values == Array(0..<1000))
        for _ in 0..<100 { _ = await bound.bump() }
        #expect(await bound.count == 101)
    }

    @Test("a loop stopped before it started runs its jobs elsewhere and joins at once")
    func neverStarted() async throws {
        let loop = try EventLoop(name: "test.unstarted")
        let ran = Signal()
        loop.execute { ran.fire() }
        loop.stop()
        await ran.wait()
        #expect(loop.join(nanoseconds: 1_000_000_000) == .joined)
    }
}
