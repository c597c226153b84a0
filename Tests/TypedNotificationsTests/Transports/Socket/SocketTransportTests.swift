import Foundation
import Testing

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

/// The helper's notification type, declared the same way here.
struct HelperPing: TypedNotification, Codable, Equatable {
    static let name: NotificationName = "test.helper.ping"
    var poster: Int
    var index: Int
}

func socketHub(
    _ directory: String,
    endpoint: String = "test",
    configuration: SocketTransportConfiguration = .init(),
    hubConfiguration: NotificationHubConfiguration = .init()
) throws -> NotificationHub<SocketTransport> {
    try NotificationHub(
        endpoint: endpoint,
        transport: SocketTransport(directory: directory, configuration: configuration),
        configuration: hubConfiguration
    )
}

@Suite("Socket transport within one process", .timeLimit(.minutes(10)))
struct SocketTransportLocalTests {
    @Test("several centers in one process exchange notifications, the poster's own included")
    func severalCenters() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let hubs = try (0..<3).map { try socketHub(directory, endpoint: "center\($0)") }
        let sequences = try hubs.map { try $0.deliveries(.of(HelperPing.self)) }
        for index in 0..<100 {
            try hubs[0].post(HelperPing(poster: 0, index: index))
        }
        for sequence in sequences {
            var indices: [Int] = []
            for await delivered in sequence {
                #expect(delivered.delivery.sender == hubs[0].sender)
                #expect(delivered.delivery.missed == 0)
                indices.append(delivered.notification.index)
                if indices.count == 100 { break }
            }
            #expect(indices == Array(0..<100))
        }
        for hub in hubs { hub.close() }
    }

    @Test("a poster lets go of an endpoint that unsubscribed")
    func unsubscribedEndpointReleased() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let posterTransport = try SocketTransport(directory: directory)
        let poster = try NotificationHub(endpoint: "poster", transport: posterTransport)
        let observer = try socketHub(directory, endpoint: "observer")
        let received = Collector<Int>()
        let token = try observer.addObserver(.of(HelperPing.self)) { note, _ in received.append(note.index) }
        try poster.post(HelperPing(poster: 0, index: 1))
        await received.wait(forCount: 1)
        #expect(posterTransport.statistics.connectedEndpoints == 1)
        await token.cancelAndWait()
        try poster.post(HelperPing(poster: 0, index: 2))
        #expect(posterTransport.statistics.connectedEndpoints == 0)
        #expect(received.values == [1])
        poster.close()
        observer.close()
    }
}

#if os(Linux)
    @Suite("Socket transport: what a closed hub holds")
    struct SocketTransportClosingTests {
        @Test("100 observing hubs opened and closed: none keeps its socket or registration file open")
        func closedHubsLetGo() async throws {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            for index in 0..<100 {
                let hub = try socketHub(directory, endpoint: "cycle-\(index)")
                let token = try hub.addObserver(.of(HelperPing.self)) { _, _ in }
                await token.cancelAndWait()
                // What the thread used goes once the close is done.
                hub.close()
                await hub.closed()
            }
            let held = try descriptors(under: directory)
            #expect(held.isEmpty, "\(held.count): \(held.prefix(4))")
        }
    }
#endif

@Suite("Durations from callers never overflow")
struct DurationClampingTests {
    @Test("huge, negative and ordinary durations clamp instead of trapping")
    func clamping() {
        #expect(Duration.seconds(Int64.max).clampedNanoseconds == .max)
        #expect(Duration.seconds(Int64.max).clampedMilliseconds == .max)
        #expect(Duration.seconds(-5).clampedNanoseconds == 0)
        #expect(Duration.seconds(-5).clampedMilliseconds == 0)
        #expect(Duration.milliseconds(1500).clampedMilliseconds == 1500)
        #expect(Duration.milliseconds(1500).clampedNanoseconds == 1_500_000_000)
    }

    @Test("flush with an enormous timeout returns at once when nothing is held")
    func hugeFlush() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let transport = try SocketTransport(directory: directory)
        #expect(transport.flush(timeout: .seconds(Int64.max)))
        transport.close()
    }
}
