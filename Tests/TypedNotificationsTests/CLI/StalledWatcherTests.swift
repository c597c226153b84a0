import Foundation
import Testing
import TypedNotifications

@testable import TypedNotificationsRedis

/// A watcher whose output stalls with a buffer of 8 while a backlog of 3,000
/// arrives (see ``playStalledWatcher(transport:selector:names:count:durable:post:)``).
/// Where posts are kept (a log, a stream) nothing is dropped for being read
/// too fast: every post is printed once, in order, none missed. The socket
/// transport keeps nothing a live observer has not taken: its buffer drops
/// the oldest, and every drop is counted on a later line.
@Suite("A stalled watcher with a small buffer", .serialized, .timeLimit(.minutes(5)))
struct StalledWatcherTests {
    static let namespace: [NotificationName] = ["test.slow.a", "test.slow.b", "test.slow.c"]

    @Test(
        "file: a name and a namespace, plain and durable: all 3,000 printed, none missed",
        arguments: [(false, false), (false, true), (true, false), (true, true)])
    func file(inNamespace: Bool, durable: Bool) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        let names: [NotificationName] = inNamespace ? Self.namespace : ["test.slow"]
        let watch = try await playStalledWatcher(
            transport: ["--transport", "file", "--dir", directory], selector: inNamespace ? "test.slow.*" : "test.slow",
            names: names, durable: durable
        ) { name, index in
            try poster.post(RawNotification(bytes: Array("\(index)".utf8)), as: name)
        }
        #expect(watch.missed == 0)
        #expect(watch.printedCount == 3_000)
        #expect(watch.redeliveries == 0)
    }

    @Test("socket: a name and a namespace: every post printed or counted as missed", arguments: [false, true])
    func socket(inNamespace: Bool) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        let names: [NotificationName] = inNamespace ? Self.namespace : ["test.slow"]
        let watch = try await playStalledWatcher(
            transport: ["--transport", "socket", "--dir", directory],
            selector: inNamespace ? "test.slow.*" : "test.slow", names: names
        ) { name, index in
            try poster.post(RawNotification(bytes: Array("\(index)".utf8)), as: name)
        }
        #expect(watch.printedCount + watch.missed == 3_000)
        #expect(watch.printedCount >= 8)
    }
}

@Suite(
    "A stalled watcher with a small buffer, over Redis", .serialized, .timeLimit(.minutes(5)),
    .enabled(if: RedisTestServer.suitesRun, RedisTestServer.skipReason))
struct RedisStalledWatcherTests {
    @Test(
        "Redis: a name and a namespace, plain and durable: all 3,000 printed, none missed",
        arguments: [(false, false), (false, true), (true, false), (true, true)])
    func redis(inNamespace: Bool, durable: Bool) async throws {
        let server = try await RedisTestServer()
        let poster = try redisHub(server, endpoint: "poster")
        defer { poster.close() }
        let names: [NotificationName] = inNamespace ? StalledWatcherTests.namespace : ["test.slow"]
        let watch = try await playStalledWatcher(
            transport: ["--transport", "redis", "--url", server.url()],
            selector: inNamespace ? "test.slow.*" : "test.slow", names: names, durable: durable
        ) { name, index in
            try poster.post(RawNotification(bytes: Array("\(index)".utf8)), as: name)
        }
        #expect(watch.missed == 0)
        #expect(watch.printedCount == 3_000)
        #expect(watch.redeliveries == 0)
    }
}
