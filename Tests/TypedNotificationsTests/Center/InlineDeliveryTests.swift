import Foundation
import Testing

@_spi(TransportAuthoring) @testable import TypedNotifications
@testable import TypedNotificationsCore

// A handler on a center's executor, on a transport that receives on an
// event loop, runs inline: the thread that received the notification calls
// it there and then when the handler's loop is waiting, with no job queued
// and no task switched to. Observable from the handler: it runs outside any
// task. Everything else is the same as through the loop (the contract
// tests run both ways).
@Suite("Handlers on a transport's loop run inline", .timeLimit(.minutes(5)))
struct InlineDeliveryTests {
    @Test(
        "paced notifications to a handler on the executor run inline, in order, outside any task",
        arguments: ["socket", "file"])
    func pacedRunInline(_ kind: String) async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        if kind == "socket" {
            try await runPaced(
                poster: socketHub(directory, endpoint: "poster"), observer: socketHub(directory, endpoint: "observer"))
        } else {
            try await runPaced(
                poster: fileHub(directory, endpoint: "poster"), observer: fileHub(directory, endpoint: "observer"))
        }
    }

    private func runPaced<T: NotificationTransport>(
        poster: NotificationHub<T>, observer: NotificationHub<T>
    ) async throws {
        let runs = Collector<(index: Int, inTask: Bool, missed: Int)>()
        let token = try observer.addObserver(.of(HelperPing.self)) { ping, delivery in
            runs.append((ping.index, withUnsafeCurrentTask { $0 != nil }, delivery.missed))
        }
        let total = 20
        for index in 0..<total {
            try poster.post(HelperPing(poster: 0, index: index))
            // Paced: each one finds the handler's loop waiting again.
            #expect(await runs.wait(forCount: index + 1, upTo: safetyNet))
        }
        token.cancel()
        poster.close()
        observer.close()
        let values = runs.values
        #expect(values.map(\.index) == Array(0..<total))
        #expect(values.allSatisfy { $0.missed == 0 })
        // Alone on the machine all but the first run inline (the first may
        // come before the loop first waited). Beside other suites, a thread
        // whose loop iteration already ran 1 ms of handlers (its other hubs'
        // inline, or the thread descheduled meanwhile) queues instead: at
        // least one inline run shows the path is taken (none without it).
        let inline = values.dropFirst().filter { !$0.inTask }.count
        #expect(inline >= 1, "\(inline) of \(total - 1) ran inline")
        print("InlineDeliveryTests: \(inline) of \(total - 1) paced notifications ran inline")
    }
}
