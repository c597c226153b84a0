import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("The test harness's own processes", .serialized, .timeLimit(.minutes(2)))
struct LifelineTests {
    @Test("when the test process ends, every process it started ends too, stopped or not, with what it started")
    func processesEndWithTheTests() async throws {
        let lifeline = try Lifeline()
        let parent = try HelperProcess(["spawn-and-hold"], lifeline: lifeline)
        await parent.waitForLine(startingWith: "grandchild")
        let stopped = try HelperProcess(["hold"], lifeline: lifeline)
        stopped.signal(SIGSTOP)
        await waitUntilStopped(stopped.pid)
        var server: HelperProcess?
        if let redis = RedisTestServer.executable {
            server = try HelperProcess(
                ["--port", "\(try RedisTestServer.freePort())", "--bind", "127.0.0.1", "--save", ""],
                executable: redis, lifeline: lifeline)
            await server?.waitForLine(startingWith: "", containing: "Ready to accept connections")
        }

        // What the kernel does when the test process ends, by SIGKILL or otherwise.
        lifeline.cut()
        // waitForExit returns once the output has ended as well, and the
        // grandchild shares its parent's output: so it has ended too.
        #expect(await parent.waitForExit() == 128 + SIGKILL)
        #expect(await stopped.waitForExit() == 128 + SIGKILL)
        if let server { #expect(await server.waitForExit() == 128 + SIGKILL) }
        var status: CInt = 0
        #expect(waitpid(lifeline.reaperPID, &status, 0) == lifeline.reaperPID)
        #expect(status == 0)
    }

    @Test("a helper that dies before the line a test waits for fails that test instead of hanging the run")
    func deadHelperEndsTheWait() async throws {
        let helper = try HelperProcess(["hold"])
        helper.signal(SIGKILL)
        // The line never comes: the wait ends when the output does, recorded
        // as an issue (known here); it used to wait for ever.
        var line: String?
        await withKnownIssue {
            line = await helper.waitForLine(startingWith: "never printed")
        }
        #expect(line == "")
        #expect(await helper.waitForExit() == 128 + SIGKILL)
    }

    @Test("processes reaped before the end are taken off the list; the others still end")
    func reapedProcessesAreForgotten() async throws {
        let lifeline = try Lifeline()
        let done = try HelperProcess(["hold"], lifeline: lifeline)
        done.signal(SIGTERM)
        #expect(await done.waitForExit() == 128 + SIGTERM)
        let running = try HelperProcess(["hold"], lifeline: lifeline)
        lifeline.cut()
        #expect(await running.waitForExit() == 128 + SIGKILL)
        var status: CInt = 0
        #expect(waitpid(lifeline.reaperPID, &status, 0) == lifeline.reaperPID)
    }
}
