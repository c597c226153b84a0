import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("The test harness's own processes", .serialized, .timeLimit(.minutes(5)))
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
            // A free port can be taken before the server binds it: then it
            // exits, and the next attempt takes another port.
            for _ in 1...5 where server == nil {
                let attempt = try HelperProcess(
                    ["--port", "\(try RedisTestServer.freePort())", "--bind", "127.0.0.1", "--save", ""],
                    executable: redis, lifeline: lifeline)
                if await attempt.line(startingWith: "", containing: "Ready to accept connections") != nil {
                    server = attempt
                }
            }
            #expect(server != nil, "redis-server found no free port in five attempts")
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

    @Test(
        "a server that exits because its port is taken ends a wait for its ready line with no answer and no issue",
        .enabled(if: RedisTestServer.executable != nil))
    func takenPortIsAnAnswer() async throws {
        let first = try await RedisTestServer()
        let second = try HelperProcess(
            ["--port", "\(first.port)", "--bind", "127.0.0.1", "--save", ""],
            executable: try #require(RedisTestServer.executable))
        // Recorded issues would fail this test: `line` records none.
        #expect(await second.line(startingWith: "", containing: "Ready to accept connections") == nil)
        #expect(second.lines.values.contains { $0.contains("Address already in use") })
        #expect(await second.waitForExit() != 0)
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
