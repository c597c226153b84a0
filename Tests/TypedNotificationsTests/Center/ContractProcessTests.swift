import Foundation
import Testing
import TypedNotifications
import TypedNotificationsCatalog

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A contract body played by real processes beside a poster hub in this
/// process. `place` is where helper processes of the same transport meet
/// (`tnotify-test-helper contract … KIND PLACE …`).
protocol ProcessContractBody {
    func run<T: NotificationTransport>(kind: ContractTransport, place: String, poster: NotificationHub<T>)
        async throws
}

/// Runs `body` over `kind` (never in-process: these guarantees are between
/// processes), in a directory or on a Redis server made for this call.
func runProcessContract(_ kind: ContractTransport, _ body: some ProcessContractBody) async throws {
    guard kind.entry.crossesProcesses else {
        Issue.record("a process contract needs a cross-process transport")
        return
    }
    try await kind.withPlace { place in
        try await runProcessContract(kind, body, poster: try kind.entry.make(place, TransportRequest()), at: place)
    }
}

private func runProcessContract<T: NotificationTransport>(
    _ kind: ContractTransport, _ body: some ProcessContractBody, poster transport: T, at place: TransportPlace
) async throws {
    let poster = try NotificationHub(endpoint: "poster", transport: transport)
    defer { poster.close() }
    try await body.run(kind: kind, place: place.text, poster: poster)
}

/// A helper process playing a contract role over `kind` at `place`.
func contractHelper(_ role: String, _ kind: ContractTransport, _ place: String, _ rest: String...) throws
    -> HelperProcess
{
    try HelperProcess(["contract", role, kind.helperKind, place] + rest)
}

/// Guarantees 7, 8 and 12 where they meet: an observer process stopped
/// (SIGSTOP) while a poster process posts 20,000 and exits at once, without
/// closing or flushing, gets on SIGCONT every one, in order, none missed.
private struct StoppedObserverExitedPoster: ProcessContractBody {
    func run<T: NotificationTransport>(kind: ContractTransport, place: String, poster: NotificationHub<T>)
        async throws
    {
        let observer = try contractHelper("observe", kind, place, "20000")
        await observer.waitForLine(startingWith: "ready")
        observer.signal(SIGSTOP)
        await waitUntilStopped(observer.pid)
        let exiting = try contractHelper("post", kind, place, "20000", "9")
        let posted = parseDone(await exiting.waitForLine(startingWith: "posted"))
        #expect(await exiting.waitForExit() == 0)
        #expect(posted["failed"] == "0", "\(posted)")
        // The poster is gone; what it posted waits for the observer.
        #expect(isStopped(observer.pid))
        observer.signal(SIGCONT)
        let done = parseDone(await observer.waitForLine(startingWith: "done"))
        #expect(done["count"] == "20000")
        #expect(done["inorder"] == "true")
        #expect(done["missed"] == "0")
        #expect(await observer.waitForExit() == 0, "\(observer.errors.values)")
    }
}

/// An observer process killed (SIGKILL) mid-stream costs a long-lived
/// poster nothing: every later post succeeds, the other observer process
/// gets all of them in order, none missed, and an observer started after the
/// kill gets what is posted after it started.
private struct KilledObserver: ProcessContractBody {
    func run<T: NotificationTransport>(kind: ContractTransport, place: String, poster: NotificationHub<T>)
        async throws
    {
        let victim = try contractHelper("observe", kind, place, "1000")
        let witness = try contractHelper("observe", kind, place, "1000")
        await victim.waitForLine(startingWith: "ready")
        await witness.waitForLine(startingWith: "ready")
        for index in 0..<500 { try poster.post(HelperPing(poster: 1, index: index)) }
        // The victim was receiving when it died.
        await victim.waitForLine(startingWith: "progress")
        victim.signal(SIGKILL)
        #expect(await victim.waitForExit() == 128 + SIGKILL)
        for index in 500..<1000 { try poster.post(HelperPing(poster: 1, index: index)) }
        let done = parseDone(await witness.waitForLine(startingWith: "done"))
        #expect(done["count"] == "1000")
        #expect(done["inorder"] == "true")
        #expect(done["missed"] == "0")
        #expect(await witness.waitForExit() == 0, "\(witness.errors.values)")

        let newcomer = try contractHelper("observe", kind, place, "100")
        await newcomer.waitForLine(startingWith: "ready")
        for index in 0..<100 { try poster.post(HelperPing(poster: 2, index: index)) }
        let later = parseDone(await newcomer.waitForLine(startingWith: "done"))
        #expect(later["count"] == "100")
        #expect(later["inorder"] == "true")
        #expect(await newcomer.waitForExit() == 0, "\(newcomer.errors.values)")
    }
}

@Suite("The contract between processes: guarantees every cross-process transport keeps", .timeLimit(.minutes(10)))
struct ContractProcessTests {
    static let transports = ContractTransport.available.filter(\.entry.crossesProcesses)

    @Test(
        "a stopped observer gets everything a poster that exited at once posted, in order",
        arguments: transports)
    func stoppedObserverExitedPoster(_ kind: ContractTransport) async throws {
        try await runProcessContract(kind, StoppedObserverExitedPoster())
    }

    @Test(
        "an observer process killed mid-stream costs a long-lived poster and the other observers nothing",
        arguments: transports)
    func killedObserver(_ kind: ContractTransport) async throws {
        try await runProcessContract(kind, KilledObserver())
    }
}
