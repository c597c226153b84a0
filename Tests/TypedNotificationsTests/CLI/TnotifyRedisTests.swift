import Foundation
import Testing
import TypedNotifications

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite(
    "tnotify over Redis, driven as a user would", .serialized, .timeLimit(.minutes(10)),
    .enabled(if: RedisTestServer.suitesRun, RedisTestServer.skipReason))
struct TnotifyRedisTests {
    @Test("watch in one process, post from others with --url; latest reads the newest; a socket latest is refused")
    func watchPostLatest() async throws {
        let server = try await RedisTestServer()
        let redis = ["--transport", "redis", "--url", server.url()]
        let watcher = try HelperProcess(
            ["watch", "app.remote", "--json"] + redis, executable: HelperProcess.tnotify)
        let banner = await watcher.waitForLine(startingWith: "watching")
        #expect(banner.contains("over the redis transport, redis://127.0.0.1:\(server.port)"))
        // --url alone chooses Redis.
        let json = try await tnotify(["post", "app.remote", "--url", server.url(), "--json", #"{"reason":"deploy"}"#])
        #expect(json.status == 0, "\(json.errors)")
        #expect(try await tnotify(["post", "app.remote", "--text", "hello"] + redis).status == 0)
        await watcher.lines.wait(forCount: 3)
        let first = try #require(watcher.lines.values.dropFirst().first)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(first.utf8)) as? [String: Any])
        #expect((object["payload"] as? [String: Any])?["reason"] as? String == "deploy")
        #expect((object["sender"] as? [String: Any])?["endpoint"] as? String == "tnotify")
        #expect(watcher.lines.values.last?.contains(#""payloadText":"hello""#) == true)
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)

        let latest = try await tnotify(["latest", "app.remote"] + redis)
        #expect(latest.status == 0, "\(latest.errors)")
        #expect(latest.output.first?.hasSuffix(" hello") == true)
        let none = try await tnotify(["latest", "app.nothing"] + redis)
        #expect(none.status == 69)
        let socket = try await tnotify(["latest", "app.remote", "--transport", "socket"])
        #expect(socket.status == 64)
        #expect(socket.errors.contains { $0.contains("the socket transport keeps nothing") })
    }

    @Test(
        "watch says on stderr when its server cannot be reached and when it reads again, and misses nothing posted after"
    )
    func watchSaysWhenUnreachable() async throws {
        let server = try await RedisTestServer()
        let redis = ["--transport", "redis", "--url", server.url()]
        let watcher = try HelperProcess(["watch", "app.outage"] + redis, executable: HelperProcess.tnotify)
        await watcher.waitForLine(startingWith: "watching")
        await server.kill()
        #expect(await waitUntil { watcher.errors.values.contains { $0.contains("cannot read app.outage now") } })
        try await server.start()
        #expect(await waitUntil { watcher.errors.values.contains { $0.contains("reading app.outage again") } })
        #expect(try await tnotify(["post", "app.outage", "--text", "back"] + redis).status == 0)
        await watcher.waitForLine(startingWith: "", containing: " back")
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)
    }

    @Test(
        "watch --cursor resumes a durable identity: what was posted while it was stopped arrives once, nothing it printed comes again; ls shows how far behind it is"
    )
    func cursor() async throws {
        let server = try await RedisTestServer()
        let redis = ["--transport", "redis", "--url", server.url()]
        let first = try HelperProcess(
            ["watch", "app.jobs", "--cursor", "auditor"] + redis, executable: HelperProcess.tnotify)
        await first.waitForLine(startingWith: "watching")
        #expect(try await tnotify(["post", "app.jobs", "--text", "one"] + redis).status == 0)
        await first.waitForLine(startingWith: "", containing: " one")
        first.signal(SIGTERM)
        #expect(await first.waitForExit() == 0)
        for text in ["two", "three"] {
            #expect(try await tnotify(["post", "app.jobs", "--text", text] + redis).status == 0)
        }

        let list = try await tnotify(["ls"] + redis)
        #expect(list.status == 0, "\(list.errors)")
        #expect(list.output.contains("  app.jobs  3 entries"))
        #expect(list.output.contains("    identity auditor: 0 pending, 2 behind"))

        // The identity resumes after "one"; a post made once it runs ends the wait.
        let second = try HelperProcess(
            ["watch", "app.jobs", "--cursor", "auditor"] + redis, executable: HelperProcess.tnotify)
        await second.waitForLine(startingWith: "watching")
        #expect(try await tnotify(["post", "app.jobs", "--text", "four"] + redis).status == 0)
        await second.waitForLine(startingWith: "", containing: " four")
        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0)
        let printed = second.lines.values.dropFirst().compactMap { $0.split(separator: " ").last.map(String.init) }
        #expect(printed == ["two", "three", "four"])

        // A new identity chooses where its first run starts.
        let fresh = try HelperProcess(
            ["watch", "app.jobs", "--cursor", "fresh", "--from", "newest:2"] + redis,
            executable: HelperProcess.tnotify)
        await fresh.lines.wait(forCount: 3)
        fresh.signal(SIGTERM)
        #expect(await fresh.waitForExit() == 0)
        #expect(
            fresh.lines.values.dropFirst().compactMap { $0.split(separator: " ").last.map(String.init) } == [
                "three", "four",
            ])
    }

    @Test("errors over Redis have their sysexits codes: unreachable 69, a wrong password 77, misused options 64")
    func errors() async throws {
        let port = try RedisTestServer.freePort()
        let unreachable = try await tnotify(["post", "app.x", "--url", "redis://127.0.0.1:\(port)"])
        #expect(unreachable.status == 69)
        #expect(unreachable.errors.first?.contains("127.0.0.1:\(port)") == true)

        let server = try await RedisTestServer(arguments: ["--requirepass", "right-pw"])
        let wrong = try await tnotify(["post", "app.x", "--url", server.url(credentials: "default:bad-pw-91@")])
        #expect(wrong.status == 77)
        #expect(wrong.errors.first?.contains("bad-pw-91") == false)
        let right = try await tnotify(["post", "app.x", "--url", server.url(credentials: "default:right-pw@")])
        #expect(right.status == 0, "\(right.errors)")

        for arguments in [
            ["post", "app.x", "--transport", "redis", "--dir", "/tmp"],
            ["post", "app.x", "--transport", "file", "--url", server.url()],
            ["post", "app.x", "--url", "rediss://127.0.0.1:\(server.port)"],
            ["gc", "--transport", "redis", "--url", server.url()],
            ["watch", "app.x", "--transport", "redis", "--url", server.url(), "--from", "middle"],
        ] {
            let result = try await tnotify(arguments)
            #expect(result.status == 64, "\(arguments): \(result.errors)")
        }
    }

    @Test(
        "a durable watcher sent SIGTERM the moment its line appears has acknowledged that line: 20 rounds, nothing printed twice, nothing left pending"
    )
    func terminatedOnItsLine() async throws {
        let server = try await RedisTestServer()
        let redis = ["--transport", "redis", "--url", server.url()]
        for round in 0..<20 {
            let watcher = try HelperProcess(
                ["watch", "app.term", "--cursor", "auditor"] + redis, executable: HelperProcess.tnotify)
            await watcher.waitForLine(startingWith: "watching")
            #expect(try await tnotify(["post", "app.term", "--text", "n\(round)"] + redis).status == 0)
            await watcher.waitForLine(startingWith: "", containing: " n\(round)")
            watcher.signal(SIGTERM)
            #expect(await watcher.waitForExit() == 0)
            // This round's line only: no earlier one came again.
            let printed = watcher.lines.values.dropFirst().compactMap { $0.split(separator: " ").last.map(String.init) }
            #expect(printed == ["n\(round)"], "round \(round)")
        }
        #expect(try server.pendingCount("tn:{app.term}", group: "auditor") == 0)
    }
}
