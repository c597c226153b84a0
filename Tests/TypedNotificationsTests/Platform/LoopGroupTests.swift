import Synchronization
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An actor whose jobs run on a loop that shares a thread.
private actor TenantActor {
    let loop: EventLoop
    init(loop: EventLoop) { self.loop = loop }
    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }
    func onLoop() -> Bool { loop.isCurrent }
}

/// Registers `body` on `loop` for a new pipe's read end, taking one byte
/// before each call; returns the pipe, whose write end wakes it.
private func pipeHandler(on loop: EventLoop, _ body: @escaping @Sendable () -> Void) throws -> SystemCalls.Pipe {
    let pipe = try SystemCalls.makePipe().get()
    let readEnd = pipe.readEnd.rawValue
    _ = try loop.register(readEnd) {
        var byte: UInt8 = 0
        _ = read(readEnd, &byte, 1)
        body()
    }.get()
    return pipe
}

/// A pipe kept in an array: its ends close when the holder goes.
private final class PipeHolder {
    let pipe: SystemCalls.Pipe

    init(_ pipe: consuming SystemCalls.Pipe) {
        self.pipe = pipe
    }
}

/// Loops of the process's group share a few threads; each keeps its own
/// handlers, timers, stop and finish (`EventLoop+Sharing`).
@Suite("Loops sharing a thread", .timeLimit(.minutes(10)))
struct LoopGroupTests {
    @Test("100 loops of a group of 2 run on 2 threads; a thread's loops leave it when they stop")
    func fewThreads() throws {
        let group = LoopGroup(threads: 2)
        var loops: [EventLoop] = []
        for index in 0..<100 {
            let loop = try group.loop(named: "test.group\(index)")
            loop.start()
            loops.append(loop)
        }
        #expect(group.threadCount == 2)
        #expect(Set(loops.map(\.threadLoop)).count == 2)
        #expect(loops.allSatisfy { $0.sharesThread })
        for loop in loops { loop.stop() }
        // Every loop left: the next one goes to the first thread, which is quietest.
        let next = try group.loop(named: "test.group.next")
        defer { next.stop() }
        #expect(group.threadCount == 2)
    }

    @Test(
        "one loop stopped from inside its own handler: the other loop on its thread goes on, and the stopped one finishes after that handler"
    )
    func stoppedFromItsHandler() async throws {
        let group = LoopGroup(threads: 1)
        let stopping = try group.loop(named: "test.stopping")
        let going = try group.loop(named: "test.going")
        #expect(stopping.threadLoop == going.threadLoop)
        stopping.start()
        going.start()
        defer { going.stop() }
        let order = Collector<String>()
        let first = try pipeHandler(on: stopping) {
            stopping.stop()
            stopping.whenFinished { order.append("finished") }
            order.append("handler returns")
        }
        // A timer of the stopping loop, due after its stop: it never fires.
        stopping.schedule(after: 200_000_000) { order.append("stopped loop's timer") }
        let reads = Collector<Bool>()
        let second = try pipeHandler(on: going) { reads.append(going.isCurrent) }
        _ = SystemCalls.writeAll(first.writeEnd, [1])
        #expect(await order.wait(forCount: 2, upTo: safetyNet))
        #expect(order.values == ["handler returns", "finished"])
        // Its descriptor is no longer watched; the other loop's still is.
        _ = SystemCalls.writeAll(first.writeEnd, [2])
        _ = SystemCalls.writeAll(second.writeEnd, [1])
        #expect(await reads.wait(forCount: 1, upTo: safetyNet))
        // Jobs given to the stopped loop still run, on the thread.
        let job = Signal()
        stopping.execute { job.fire() }
        #expect(await job.wait(upTo: safetyNet))
        // The other loop's timers fire, after the stopped loop's was due.
        let timer = Signal()
        going.schedule(after: 300_000_000) { timer.fire() }
        #expect(await timer.wait(upTo: safetyNet))
        #expect(!order.values.contains("stopped loop's timer"))
        _ = SystemCalls.writeAll(second.writeEnd, [2])
        #expect(await reads.wait(forCount: 2, upTo: safetyNet))
        #expect(reads.values == [true, true])
        // The stopped loop's handler never ran again.
        #expect(order.values == ["handler returns", "finished"])
    }

    @Test("300 loops on one thread, every other one stopped: the stopped ones' handlers never run, the others' all do")
    func manyTenantsHalfStopped() async throws {
        let group = LoopGroup(threads: 1)
        let ran = Collector<Int>()
        var loops: [EventLoop] = []
        var pipes: [PipeHolder] = []
        for index in 0..<300 {
            let loop = try group.loop(named: "test.many\(index)")
            loop.start()
            loops.append(loop)
            pipes.append(PipeHolder(try pipeHandler(on: loop) { ran.append(index) }))
        }
        defer { for loop in loops { loop.stop() } }
        for index in stride(from: 0, to: 300, by: 2) { loops[index].stop() }
        for holder in pipes { _ = SystemCalls.writeAll(holder.pipe.writeEnd, [1]) }
        #expect(await ran.wait(forCount: 150, upTo: safetyNet))
        // One more turn of the thread: a stopped loop's descriptor, were
        // it still watched, was ready in the same waits as the others'.
        let settled = Signal()
        loops[1].execute { settled.fire() }
        #expect(await settled.wait(upTo: safetyNet))
        #expect(ran.values.sorted() == Array(stride(from: 1, to: 300, by: 2)))
    }

    @Test("a loop sharing a thread runs none of its handlers, timers or jobs before it starts")
    func nothingBeforeStart() async throws {
        let group = LoopGroup(threads: 1)
        let loop = try group.loop(named: "test.unstarted")
        defer { loop.stop() }
        let ran = Collector<String>()
        let pipe = try pipeHandler(on: loop) { ran.append("handler") }
        loop.schedule(after: 0) { ran.append("timer") }
        loop.execute { ran.append("job") }
        _ = SystemCalls.writeAll(pipe.writeEnd, [1])
        // Another loop on the same thread runs a job meanwhile: the thread
        // is awake and passed by this loop's work.
        let other = try group.loop(named: "test.other")
        other.start()
        defer { other.stop() }
        let passed = Signal()
        other.schedule(after: 50_000_000) { passed.fire() }
        #expect(await passed.wait(upTo: safetyNet))
        #expect(ran.values.isEmpty)
        loop.start()
        #expect(await ran.wait(forCount: 3, upTo: safetyNet))
        #expect(Set(ran.values) == ["handler", "timer", "job"])
    }

    @Test("tasks that prefer a loop sharing a thread, and actors on it, run there; the thread outlives them")
    func tasksOnASharedThread() async throws {
        let group = LoopGroup(threads: 1)
        for round in 0..<50 {
            let loop = try group.loop(named: "test.tasks\(round)")
            loop.start()
            let actor = TenantActor(loop: loop)
            let onLoop = await Task(executorPreference: loop) { await actor.onLoop() }.value
            #expect(onLoop)
            loop.stop()
        }
        // The thread's own loop was never released by a task's end: a
        // new loop on it still runs jobs.
        let last = try group.loop(named: "test.tasks.last")
        last.start()
        defer { last.stop() }
        let ran = Signal()
        last.execute { ran.fire() }
        #expect(await ran.wait(upTo: safetyNet))
        #expect(group.threadCount == 1)
    }
}
