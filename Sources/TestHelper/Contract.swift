import Foundation
import TypedNotifications
import TypedNotificationsCatalog

// The contract suite's roles: the same observer and poster over any
// cross-process transport, so one test body plays each adversary (a stopped
// observer, a poster that exits, a killed observer) against every transport.
//
//   tnotify-test-helper contract observe KIND PLACE COUNT
//                               like observe: "ready", "progress N", "done count=… inorder=… missed=…"
//   tnotify-test-helper contract post KIND PLACE COUNT POSTER
//                               posts COUNT pings, says "posted failed=N codes=…" and exits at
//                               once: no close, no flush
//
// KIND is the name of an entry of the transport catalog that meets across
// processes (socket, socket-without-credentials, file, file-sleeping-in-read,
// file-in-event-queue, file-without-change-events, redis, and any added
// there); PLACE is the
// shared directory, of any length, or the server's URL.

/// What a contract role does with a hub, whatever its transport.
protocol ContractRole: HubBody where Result == Void {}

/// Runs `role` on a hub over the transport called `kind` at `place`.
func runContractRole(kind: String, place: String, endpoint: String, _ role: some ContractRole) async throws {
    guard let entry = TransportCatalog.entry(named: kind), entry.crossesProcesses else {
        let kinds = TransportCatalog.entries.filter(\.crossesProcesses).map(\.name).joined(separator: ", ")
        fail("KIND must be one of \(kinds)")
    }
    try await entry.withHub(at: entry.place(place), endpoint: endpoint, role)
}

/// Observes `count` pings, reporting order and missed counts.
struct ContractObserver: ContractRole {
    let count: Int

    func run<Transport: NotificationTransport>(_ hub: NotificationHub<Transport>) async throws {
        try await observe(hub, count: count, countingMissed: false)
    }
}

/// Posts `count` pings as poster `poster`, then exits at once: whatever the
/// transport still had to do after a post returned is lost with the process.
struct ContractPosterThatExits: ContractRole {
    let count: Int
    let poster: Int

    func run<Transport: NotificationTransport>(_ hub: NotificationHub<Transport>) async throws {
        var failed = 0
        var codes = Set<String>()
        for index in 0..<count {
            do {
                try hub.post(HelperPing(poster: poster, index: index))
            } catch {
                failed += 1
                codes.insert(error.code.description)
            }
        }
        say("posted failed=\(failed) codes=\(codes.sorted().joined(separator: ","))")
        exit(0)
    }
}

/// Parses and runs `contract ROLE KIND PLACE …` (the arguments after `contract`).
func runContractCommand(_ arguments: ArraySlice<String>) async throws {
    let words = Array(arguments)
    switch words.first {
    case "observe" where words.count == 4:
        guard let count = Int(words[3]) else { fail("COUNT must be a number") }
        try await runContractRole(kind: words[1], place: words[2], endpoint: "observer", ContractObserver(count: count))
    case "post" where words.count == 5:
        guard let count = Int(words[3]), let poster = Int(words[4]) else { fail("COUNT and POSTER must be numbers") }
        try await runContractRole(
            kind: words[1], place: words[2], endpoint: "poster\(poster)",
            ContractPosterThatExits(count: count, poster: poster))
    default:
        fail("usage: contract observe KIND PLACE COUNT | contract post KIND PLACE COUNT POSTER")
    }
}
