import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@testable import TypedNotificationsSocket

/// A close does not wait for the transport's thread, so that thread can run
/// a handler of its loop once more while the transport is being released:
/// nothing it runs may reach a transport that is gone (an `unowned`
/// capture did, and crashed the process under ThreadSanitizer).
@Suite("Socket transport: released while datagrams arrive", .timeLimit(.minutes(10)))
struct SocketReleaseTests {
    @Test(
        "observers released mid-flood, in the event queue and sleeping in the receive: the process lives, the poster goes on",
        arguments: [false, true])
    func releasedMidFlood(sleepsInReceive: Bool) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        let stop = Flag()
        let failures = Counter()
        let posting = startThread {
            var index = 0
            while !stop.isSet {
                do throws(TypedNotificationError) {
                    try poster.post(Ping(index: index))
                } catch {
                    // An endpoint that went between the look-up and the send.
                    if error.code != .undelivered { failures.increment() }
                }
                index += 1
            }
        }
        var configuration = SocketTransportConfiguration()
        configuration.sleepsInReceive = sleepsInReceive
        configuration.sleepsInReceiveBeyondLimit = sleepsInReceive
        // Observers in the event queue share a thread of a group of their
        // own, not the process's: in a full run, other suites' hubs kept
        // the shared threads busy enough that one round waited over 60 s.
        configuration.loopGroup = LoopGroup(threads: 1)
        // 150 rounds: in a full parallel run under load one round took up
        // to a second, and 400 of them ran past the time limit (whose
        // cancellation then failed every wait that followed).
        for round in 0..<150 where !Task.isCancelled {
            let received = Signal()
            // Released while its thread is busy with the flood, at the end of
            // this scope: no close() first, so the release itself closes it.
            do {
                let observer = try socketHub(directory, endpoint: "observer-\(round)", configuration: configuration)
                let token = try observer.addObserver(.of(Ping.self)) { _, _ in received.fire() }
                let got = await received.wait(upTo: safetyNet)
                #expect(
                    got,
                    """
                    round \(round): observer failure \(String(describing: observer.failure)), \
                    poster failure \(String(describing: poster.failure)), failed posts \(failures.count); \
                    observer \(observer.transport.statistics), poster \(poster.transport.statistics), \
                    unread by \(poster.transport.endpointsWithUnreadPosts)
                    """
                )
                withExtendedLifetime(token) {}
            }
        }
        stop.set()
        #expect(posting.wait(nanoseconds: 60_000_000_000))
        #expect(failures.count == 0)
    }
}
