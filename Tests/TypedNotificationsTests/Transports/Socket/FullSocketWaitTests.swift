import Testing

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

/// What a post does about full sockets, tested without a clock or sockets:
/// endpoints are plain strings and the tests say which have room.
@Suite("Full socket wait")
struct FullSocketWaitTests {
    typealias Wait = FullSocketWait<String>

    func polled(_ step: Wait.Step) -> (endpoints: [String], milliseconds: Int32)? {
        if case .poll(let endpoints, let milliseconds) = step { return (endpoints, milliseconds) }
        return nil
    }

    func lastTry(_ step: Wait.Step) -> [String]? {
        if case .lastTry(let endpoints) = step { return endpoints }
        return nil
    }

    @Test("before the deadline it polls every waiting socket, for the time left rounded up to a millisecond")
    func pollsUntilDeadline() {
        var wait = Wait(["a", "b"], deadline: 1_000_000)
        let first = polled(wait.next(now: 0))
        #expect(first?.endpoints == ["a", "b"])
        #expect(first?.milliseconds == 1)
        #expect(polled(wait.next(now: 999_999))?.milliseconds == 1, "never a zero-length poll before the deadline")
        var long = Wait(["a"], deadline: 5_000_000_001)
        #expect(polled(long.next(now: 1))?.milliseconds == 5_000)
    }

    @Test("sockets with room are retried; the others keep waiting; one full again waits again, behind them")
    func retriesWritable() {
        var wait = Wait(["a", "b", "c"], deadline: 10_000_000)
        _ = wait.next(now: 0)
        #expect(wait.polled(writable: [false, true, true]) == ["b", "c"])
        #expect(wait.waiting == ["a"])
        wait.stillFull("c")
        #expect(polled(wait.next(now: 1))?.endpoints == ["a", "c"])
        #expect(wait.polled(writable: [true]) == ["a"], "a short answer counts the rest as full")
        #expect(wait.waiting == ["c"])
    }

    @Test("a poll that found no room retries nothing and polls again while time is left")
    func nothingWritable() {
        var wait = Wait(["a"], deadline: 10_000_000)
        _ = wait.next(now: 0)
        #expect(wait.polled(writable: []) == [])
        #expect(polled(wait.next(now: 5_000_000))?.endpoints == ["a"])
    }

    @Test("at the deadline every endpoint still waiting gets one last try, and then nothing waits")
    func lastTryAtDeadline() {
        var wait = Wait(["a", "b"], deadline: 10_000_000)
        _ = wait.next(now: 0)
        _ = wait.polled(writable: [true, false])
        #expect(lastTry(wait.next(now: 10_000_000)) == ["b"])
        guard case .done = wait.next(now: 10_000_001) else {
            Issue.record("after the last try nothing waits: the post spools for those still full")
            return
        }
    }

    @Test("once every endpoint took the notification the wait is over before the deadline")
    func doneEarly() {
        var wait = Wait(["a"], deadline: 10_000_000)
        _ = wait.next(now: 0)
        #expect(wait.polled(writable: [true]) == ["a"])
        guard case .done = wait.next(now: 1) else {
            Issue.record("nothing waits")
            return
        }
    }
}
