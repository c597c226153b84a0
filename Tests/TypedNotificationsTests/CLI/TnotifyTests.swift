import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotifications

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Runs `tnotify` with `arguments` and returns its exit status and output.
func tnotify(_ arguments: [String]) async throws -> (status: Int32, output: [String], errors: [String]) {
    let process = try HelperProcess(arguments, executable: HelperProcess.tnotify)
    let status = await process.waitForExit()
    return (status, process.lines.values, process.errors.values)
}

@Suite("tnotify, driven as a user would", .serialized, .timeLimit(.minutes(10)))
struct TnotifyTests {
    @Test("watch --json prints a sequence number above Int.max as it is", arguments: ["socket", "file"])
    func jsonSequenceAboveIntMax(transport: String) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let watcher = try HelperProcess(
            ["watch", Ping.name.rawValue, "--transport", transport, "--dir", directory, "--json"],
            executable: HelperProcess.tnotify)
        await watcher.waitForLine(startingWith: "watching")
        let forger = try forgedSender(instance: 5)
        let raw: any NotificationTransport =
            transport == "socket"
            ? try SocketTransport(directory: directory) : try FileSignalTransport(directory: directory)
        try raw.open(as: forger, receiver: TransportReceiver { _ in })
        defer { raw.close() }
        try raw.send(try forgedMessage(Ping(index: 1), from: forger, sequence: .max))
        let line = await watcher.waitForLine(startingWith: "{")
        #expect(line.contains(#""sequence":18446744073709551615"#), "\(line)")
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)
    }

    @Test(
        "watch in one process, post from others: every line arrives, in a short and a 200-byte directory",
        arguments: ["socket", "file"], [0, 200])
    func watchThenPost(transport: String, length: Int) async throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        let directory = length == 0 ? base : try makeLongDirectory(in: base, length: length)
        let watcher = try HelperProcess(
            ["watch", "com.example.reload", "--transport", transport, "--dir", directory, "--json"],
            executable: HelperProcess.tnotify
        )
        await watcher.waitForLine(startingWith: "watching")
        #expect(
            try await tnotify([
                "post", "com.example.reload", "--transport", transport, "--dir", directory, "--json",
                #"{"reason":"config"}"#,
            ]).status == 0)
        #expect(
            try await tnotify([
                "post", "com.example.reload", "--transport", transport, "--dir", directory, "--text", "hello",
            ]).status == 0)
        let first = await watcher.waitForLine(startingWith: "{")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(first.utf8)) as? [String: Any])
        #expect((object["payload"] as? [String: Any])?["reason"] as? String == "config")
        #expect(object["name"] as? String == "com.example.reload")
        #expect((object["sender"] as? [String: Any])?["endpoint"] as? String == "tnotify")
        await watcher.lines.wait(forCount: 3)
        #expect(watcher.lines.values.last?.contains(#""payloadText":"hello""#) == true)

        // Ctrl-C (SIGINT) or SIGTERM: a clean exit that unregisters.
        watcher.signal(transport == "socket" ? SIGTERM : SIGINT)
        #expect(await watcher.waitForExit() == 0)
        if transport == "socket" {
            let entries =
                (try? FileManager.default.contentsOfDirectory(atPath: directory + "/names/com.example.reload")) ?? []
            #expect(entries.isEmpty)
        }
    }

    @Test("watch several names; post from standard input; resume a durable cursor")
    func stdinNamesAndCursor() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let file = ["--transport", "file", "--dir", directory]
        // A durable watcher of two names that stops before anything is posted.
        let first = try HelperProcess(
            ["watch", "app.a", "app.b", "--cursor", "tool"] + file, executable: HelperProcess.tnotify)
        await first.waitForLine(startingWith: "watching app.a app.b")
        first.signal(SIGINT)
        #expect(await first.waitForExit() == 0)

        // Post to both names, one payload from standard input.
        var ends: [CInt] = [-1, -1]
        #expect(pipe(&ends) == 0)
        _ = Array("from stdin".utf8).withUnsafeBytes { write(ends[1], $0.baseAddress, $0.count) }
        close(ends[1])
        let poster = try HelperProcess(
            ["post", "app.a", "--stdin"] + file, executable: HelperProcess.tnotify, standardInput: ends[0])
        #expect(await poster.waitForExit() == 0)
        close(ends[0])
        #expect(try await tnotify(["post", "app.b", "--text", "second"] + file).status == 0)

        // The same cursor resumes where it stopped: both posts, nothing else.
        let second = try HelperProcess(
            ["watch", "app.a", "app.b", "--cursor", "tool"] + file, executable: HelperProcess.tnotify)
        await second.lines.wait(forCount: 3)
        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0)
        let lines = second.lines.values.dropFirst()
        #expect(lines.contains { $0.contains("app.a") && $0.hasSuffix(" from stdin") })
        #expect(lines.contains { $0.contains("app.b") && $0.hasSuffix(" second") })
        #expect(lines.count == 2)
    }

    @Test("watch of overlapping names and namespaces prints each notification once, under the widest namespace")
    func overlappingSelectors() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let socket = ["--dir", directory]
        let watcher = try HelperProcess(
            ["watch", "ov.b.x", "ov.*", "ov.b.*", "ov.b.x", "ov.*", "other"] + socket, executable: HelperProcess.tnotify
        )
        await watcher.waitForLine(startingWith: "watching ov.* other over")
        #expect(try await tnotify(["post", "ov.b.x", "--text", "once"] + socket).status == 0)
        #expect(try await tnotify(["post", "other", "--text", "last"] + socket).status == 0)
        await watcher.lines.wait(forCount: 3)
        watcher.signal(SIGTERM)
        #expect(await watcher.waitForExit() == 0)
        let lines = watcher.lines.values.dropFirst()
        #expect(lines.count == 2, "\(lines)")
        #expect(lines.filter { $0.hasSuffix(" once") }.count == 1)
        #expect(lines.filter { $0.hasSuffix(" last") }.count == 1)
    }

    @Test("watch --from chooses where a file watcher without a saved cursor starts; a bad choice is a usage error")
    func watchFrom() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let file = ["--transport", "file", "--dir", directory]
        for text in ["one", "two", "three"] {
            #expect(try await tnotify(["post", "app.kept", "--text", text] + file).status == 0)
        }
        func watched(_ from: String, count: Int) async throws -> [String] {
            let watcher = try HelperProcess(
                ["watch", "app.kept", "--from", from] + file, executable: HelperProcess.tnotify)
            await watcher.lines.wait(forCount: 1 + count)
            watcher.signal(SIGTERM)
            #expect(await watcher.waitForExit() == 0)
            return watcher.lines.values.dropFirst().compactMap { $0.split(separator: " ").last.map(String.init) }
        }
        #expect(try await watched("newest:2", count: 2) == ["two", "three"])
        #expect(try await watched("beginning", count: 3) == ["one", "two", "three"])
        for bad in ["newest:0", "middle", "newest:x"] {
            let result = try await tnotify(["watch", "app.kept", "--from", bad] + file)
            #expect(result.status == 64)
            #expect(result.errors.contains { $0.contains("--from takes end, beginning or newest:N") })
        }
        let socket = try await tnotify([
            "watch", "app.kept", "--from", "beginning", "--transport", "socket", "--dir", directory + "/s",
        ])
        #expect(socket.status == 64)
    }

    @Test("watch holds a bounded buffer (--buffer N) and accounts for every notification it drops")
    func boundedWatch() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let file = ["--transport", "file", "--dir", directory]
        let first = try HelperProcess(
            ["watch", "app.flood", "--cursor", "tool"] + file, executable: HelperProcess.tnotify)
        await first.waitForLine(startingWith: "watching app.flood")
        first.signal(SIGINT)
        #expect(await first.waitForExit() == 0)

        // 3,000 waiting in the log; the durable watcher replays them as fast as
        // it reads, faster than it prints, through a buffer of 4.
        let poster = try fileHub(directory, endpoint: "flood")
        for index in 1...3_000 { try poster.post(RawNotification(bytes: Array("\(index)".utf8)), as: "app.flood") }
        let second = try HelperProcess(
            ["watch", "app.flood", "--cursor", "tool", "--buffer", "4", "--json"] + file,
            executable: HelperProcess.tnotify)
        let last = await second.waitForLine(startingWith: "{", containing: #""sequence":3000"#)
        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0)
        #expect(last.contains(#""payload":3000"#))
        // Every notification is printed or counted as missed on a later line.
        var accounted = 0
        for line in second.lines.values where line.hasPrefix("{") {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            accounted += 1 + (object?["missed"] as? Int ?? 0)
        }
        #expect(accounted == 3_000)

        #expect(try await tnotify(["watch", "a", "--buffer", "0"]).status == 64)
        #expect(try await tnotify(["watch", "a", "--buffer", "lots"]).status == 64)
    }

    @Test("latest, ls and gc report what is there")
    func inspect() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        // A durable watcher that stops before anything is posted.
        let auditor = try HelperProcess(
            ["watch", "app.state", "--transport", "file", "--dir", directory, "--cursor", "auditor"],
            executable: HelperProcess.tnotify
        )
        await auditor.waitForLine(startingWith: "watching")
        auditor.signal(SIGTERM)
        #expect(await auditor.waitForExit() == 0)
        for text in ["one", "two"] {
            #expect(
                try await tnotify(["post", "app.state", "--transport", "file", "--dir", directory, "--text", text])
                    .status == 0)
        }
        let latest = try await tnotify(["latest", "app.state", "--dir", directory])
        #expect(latest.status == 0)
        #expect(latest.output.first?.hasSuffix(" two") == true)
        let list = try await tnotify(["ls", "--transport", "file", "--dir", directory])
        #expect(list.status == 0)
        #expect(list.output.contains { $0.contains("app.state") && $0.contains("segment") })
        // The auditor is behind by both posts: the whole log.
        let logSize = try #require(
            list.output.first { $0.contains("app.state") }?.split(separator: " ").dropFirst(1).first { Int($0) != nil }
        )
        #expect(list.output.contains("    cursor auditor: \(logSize) bytes behind, kept from retention for it"))
        let gc = try await tnotify(["gc", "--transport", "file", "--dir", directory])
        #expect(gc.status == 0)
        #expect(gc.output.first?.contains("deleted 0") == true)
    }

    @Test(
        "ls shows a killed watcher as dead, and gc reaps it, in a short and a 200-byte directory", arguments: [0, 200])
    func reapDeadWatcher(length: Int) async throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        let directory = length == 0 ? base : try makeLongDirectory(in: base, length: length)
        let watcher = try HelperProcess(["watch", "app.ping", "--dir", directory], executable: HelperProcess.tnotify)
        await watcher.waitForLine(startingWith: "watching")
        watcher.signal(SIGKILL)
        _ = await watcher.waitForExit()
        let list = try await tnotify(["ls", "--transport", "socket", "--dir", directory])
        #expect(list.output.contains { $0.contains("app.ping") && $0.contains("pid \(watcher.pid) dead") })
        let gc = try await tnotify(["gc", "--transport", "socket", "--dir", directory])
        #expect(gc.output.first == "socket transport: reaped 1 dead endpoint(s)")
    }

    @Test("every error has its sysexits code and a message; a bad name touches nothing")
    func exitCodes() async throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        let untouched = base + "/never-created"
        let badName = try await tnotify(["post", "../etc/passwd", "--dir", untouched])
        #expect(badName.status == 64)
        #expect(badName.errors.first?.contains("starts with a dot") == true)
        #expect(!FileManager.default.fileExists(atPath: untouched))
        #expect(try await tnotify(["post", "", "--dir", untouched]).status == 64)
        #expect(try await tnotify(["post", String(repeating: "n", count: 201), "--dir", untouched]).status == 64)
        #expect(!FileManager.default.fileExists(atPath: untouched))

        #expect(try await tnotify(["frobnicate"]).status == 64)
        #expect(try await tnotify(["post"]).status == 64)
        #expect(try await tnotify(["post", "a", "--bogus"]).status == 64)
        #expect(try await tnotify(["watch", "a", "--cursor", "id"]).status == 64)
        let badJSON = try await tnotify(["post", "a", "--json", "{nope", "--dir", base + "/s"])
        #expect(badJSON.status == 65)
        #expect(badJSON.errors.first?.contains("not valid JSON") == true)
        #expect(try await tnotify(["latest", "nothing.here", "--dir", base + "/f"]).status == 69)
        #expect(try await tnotify(["post", "a", "--dir", "/etc/hostname/sub"]).status == 74)
        let open = base + "/open"
        mkdir(open, 0o700)
        chmod(open, 0o777)
        #expect(try await tnotify(["post", "a", "--dir", open]).status == 77)
    }

    @Test("--help works on every command")
    func help() async throws {
        for command in ["post", "watch", "latest", "ls", "gc", "demo"] {
            let result = try await tnotify([command, "--help"])
            #expect(result.status == 0)
            #expect(result.output.first?.hasPrefix("usage: tnotify \(command)") == true)
        }
        #expect(try await tnotify(["--help"]).output.first == "usage: tnotify COMMAND [ARGUMENTS]")
    }

    @Test("demo shows typed notifications crossing processes over both transports")
    func demo() async throws {
        let result = try await tnotify(["demo"])
        #expect(result.status == 0, "\(result.errors)")
        #expect(result.output.filter { $0.contains("clip.mov 100%") }.count == 2)
        #expect(result.output.last?.hasPrefix("demo: every notification crossed") == true)
    }
}
