import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A send owns the transport's routing while it runs, with no lock held;
/// a second send at the same time is refused, never interleaved.
@Suite("Socket transport: one send at a time, no lock held", .serialized, .timeLimit(.minutes(10)))
struct SocketSendOwnershipTests {
    @Test("while a post waits for a stopped observer's full socket, statistics answer and a second send is refused")
    func secondSendIsRefused() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let observer = try HelperProcess(["observe", directory, "100"])
        await observer.waitForLine(startingWith: "ready")
        observer.signal(SIGSTOP)
        await waitUntilStopped(observer.pid)
        defer { observer.signal(SIGKILL) }

        let transport = try SocketTransport(
            directory: directory, configuration: SocketTransportConfiguration(fullSocketWait: .seconds(1)))
        let hub = try NotificationHub(endpoint: "poster", transport: transport)
        // The stopped observer's socket takes about ten; the post that finds
        // it full waits up to a second for it, on the poster's thread.
        let returned = Flag()
        let poster = startThread {
            for index in 0..<20 { _ = try? hub.post(HelperPing(poster: 1, index: index)) }
            returned.set()
        }
        // The poster now waits for the full socket, holding the routing:
        // the second send is tried from a thread of its own the moment that
        // shows, not after a hop back to a (busy) cooperative pool.
        let sender = try NotificationSender.current(endpoint: "direct")
        let envelope = try PendingEnvelope(
            name: HelperPing.name, sender: sender, maximumPayloadSize: 1024, payloadSizeHint: nil
        ) { bytes in try HelperPing(poster: 2, index: 0).encodePayload(into: &bytes) }
        let message = TransportMessage(
            name: HelperPing.name, sender: sender, sequence: 1,
            timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0),
            payload: .encoded(
                envelope.finish(sequence: 1, timestamp: .init(wallClockNanoseconds: 0, monotonicNanoseconds: 0)))
        )
        let (waited, refusal, stillPosting) = try await offThePool {
            let waited = waitOnThisThread { transport.statistics.fullSocketWaits > 0 }
            var refusal: TypedNotificationError?
            if !returned.isSet {
                do throws(TypedNotificationError) {
                    try transport.send(message)
                } catch {
                    refusal = error
                }
            }
            return (waited, refusal, !returned.isSet)
        }
        #expect(waited)
        poster.wait()
        if stillPosting {
            #expect(refusal?.code == .transportFailure)
            #expect(refusal?.message.contains("another send is in progress") == true)
        }
        #expect(stillPosting, "the poster should still wait for the stopped observer's socket")
        hub.close()
    }
}
