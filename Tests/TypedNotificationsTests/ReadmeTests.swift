import Foundation
import Testing
import TypedNotifications

struct BroadcastStarted: TypedNotification, Codable {
    static let name: NotificationName = "com.example.broadcast.started"
    var sessionID: UUID
}

/// The README's quick start, so that the README cannot drift from the API.
@Suite("README", .timeLimit(.minutes(10)))
struct ReadmeTests {
    @Test("the quick start runs as written")
    func quickStart() async throws {
        let seen = Collector<UUID>()
        let center = try NotificationHub(endpoint: "app", transport: InProcessTransport(bus: InProcessBus()))

        let token = try center.addObserver(.of(BroadcastStarted.self)) { note, delivery in
            print(note.sessionID, "from", delivery.sender, "#\(delivery.sequence)")
            seen.append(note.sessionID)
        }
        let starts = try center.notifications(.of(BroadcastStarted.self))

        let id = UUID()
        try center.post(BroadcastStarted(sessionID: id))
        for await note in starts {
            #expect(note.sessionID == id)
            break
        }
        await seen.wait(forCount: 1)
        await token.cancelAndWait()
        #expect(seen.values == [id])
    }
}
