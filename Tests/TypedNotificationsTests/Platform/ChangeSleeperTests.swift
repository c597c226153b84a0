import Foundation
import Synchronization
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

#if os(Linux)
    import Glibc

    #if arch(x86_64)
        private let readCall = 0
    #elseif arch(arm64)
        private let readCall = 63
    #else
        private let readCall = -1
    #endif

    /// A monitor used by one thread at a time.
    private final class Held: @unchecked Sendable {
        // Sendable: the monitor is used by the test's thread before the loop
        // starts (to watch a directory), then only by the loop's thread (its
        // receive), until `stopAndJoin` has returned.
        let monitor: DirectoryMonitor
        init(_ monitor: DirectoryMonitor) { self.monitor = monitor }
    }

    /// A loop whose thread sleeps in a monitor's own inotify instance, as a
    /// file transport's does on Linux, recording each change it was woken for.
    private final class SleepingLoop: Sendable {
        private let held: Held
        let changes = Collector<Set<Int>?>()
        let loop: EventLoop

        var monitor: DirectoryMonitor { held.monitor }

        init(named name: String) throws {
            let made = try #require(DirectoryMonitor.sleeping(includingModifications: true, beyondLimit: true))
            let wake = try #require(made.wakeUp)
            let held = Held(made)
            self.held = held
            let changes = changes
            loop = try EventLoop(
                name: name,
                waiting: .receiving(
                    { timeout in
                        if held.monitor.sleep(timeoutMilliseconds: timeout) { changes.append(held.monitor.changes()) }
                    }, wake: wake))
        }
    }

    @Suite("Change sleeper: a loop asleep in the read of its own inotify instance", .timeLimit(.minutes(5)))
    struct ChangeSleeperTests {
        @Test("it sleeps in read, and a write to a watched directory's file wakes it with that change")
        func changeWakesIt() async throws {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            let sleeping = try SleepingLoop(named: "test.sleepsRead")
            let index = try sleeping.monitor.watch(directory)
            sleeping.loop.start()
            defer { sleeping.loop.stopAndJoin() }
            if readCall >= 0 {
                #expect(await waitUntil { systemCall(ofThreadNamed: "sleepsRead") == readCall })
            }
            // Another process appends to a file in the directory.
            let writer = try HelperProcess(["-c", "printf x >> '\(directory)/log'"], executable: "/bin/sh")
            #expect(await writer.waitForExit() == 0)
            await sleeping.changes.wait(forCount: 1)
            #expect(sleeping.changes.values.contains { $0?.contains(index) == true })
        }

        @Test("a job from another thread wakes it, and so does the next one after it woke")
        func jobsWakeIt() async throws {
            let sleeping = try SleepingLoop(named: "test.jobsWake")
            sleeping.loop.start()
            defer { sleeping.loop.stopAndJoin() }
            for round in 0..<3 {
                if readCall >= 0 {
                    #expect(await waitUntil { systemCall(ofThreadNamed: "jobsWake") == readCall })
                }
                let ran = Signal()
                sleeping.loop.execute { ran.fire() }
                #expect(await ran.wait(upTo: safetyNet), "job \(round) did not wake the loop")
            }
            #expect(sleeping.changes.values.isEmpty, "a wake-up is not a change")
        }

        @Test(
            "a timer fires while nothing changes: a near one in poll, a later one woken by the process's deadline thread"
        )
        func timerWakesIt() async throws {
            let sleeping = try SleepingLoop(named: "test.timerWakes")
            sleeping.loop.start()
            defer { sleeping.loop.stopAndJoin() }
            // A read has no timeout: from 100 ms on, only the deadline
            // thread's wake-up ends it.
            for delay: UInt64 in [5_000_000, 150_000_000, 2_000_000, 400_000_000] {
                let fired = Signal()
                sleeping.loop.schedule(after: delay) { fired.fire() }
                #expect(await fired.wait(upTo: safetyNet), "a timer \(delay / 1_000_000) ms away never fired")
            }
        }

        @Test("stopping a loop asleep in read ends its thread")
        func stopEndsIt() async throws {
            let sleeping = try SleepingLoop(named: "test.stopSleep")
            sleeping.loop.start()
            if readCall >= 0 {
                let seen = await waitUntil { systemCall(ofThreadNamed: "stopSleep") == readCall }
                #expect(seen)
            }
            let outcome = try await offThePool { sleeping.loop.stopAndJoin(nanoseconds: 20_000_000_000) }
            #expect(outcome == .joined)
        }

        @Test("a process makes at most a few sleepers, each an inotify instance; tests may go beyond")
        func fewPerProcess() throws {
            var held: [ChangeSleeper] = []
            while let sleeper = ChangeSleeper.make() {
                held.append(sleeper)
                #expect(held.count <= ChangeSleeper.ownQueuesAllowed)
                if held.count > ChangeSleeper.ownQueuesAllowed { break }
            }
            #expect(ChangeSleeper.make() == nil)
            #expect(ChangeSleeper.make(beyondLimit: true) != nil)
            held.removeAll()
        }
    }
#endif
