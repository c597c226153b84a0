import Foundation
import Testing
import TypedNotifications

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The adversary of a durable namespace identity, played the same way over
/// every transport that keeps posts: `tnotify watch 'test.jobs.*' --cursor
/// dashboard` (plus `transport`, the flags that choose the transport) is
/// SIGKILLed with 60 of 300 posts printed. While it is away, this
/// process's long-lived poster (`post`) goes on with the old names and
/// makes five new ones, a new `tnotify post` process makes one more, and a
/// near miss (`test.jobsx`) is posted. The second run and the first
/// together must hold every post of this process at least once, the new
/// names from their first post and not marked as seen before, and never
/// the near miss.
func playDurableNamespaceKill(
    transport: [String], post: (NotificationName, Int) throws -> Void
) async throws {
    let arguments = ["watch", "test.jobs.*", "--cursor", "dashboard", "--json"] + transport
    let first = try HelperProcess(arguments, executable: HelperProcess.tnotify)
    await first.waitForLine(startingWith: "watching")
    for index in 0..<300 { try post(NotificationName(validating: "test.jobs.old\(index % 10)"), index) }
    // Killed with part of the backlog printed, part not.
    await first.lines.wait(forCount: 60)
    first.signal(SIGKILL)
    _ = await first.waitForExit()
    // Away: old names go on, new names appear, from this process and a new one.
    for index in 300..<400 { try post(NotificationName(validating: "test.jobs.old\(index % 10)"), index) }
    for index in 0..<50 { try post(NotificationName(validating: "test.jobs.new\(index % 5)"), index) }
    try post("test.jobsx", 0)
    let fresh = try await tnotify(["post", "test.jobs.while.away", "--text", "away"] + transport)
    #expect(fresh.status == 0, "\(fresh.errors)")
    let second = try HelperProcess(arguments, executable: HelperProcess.tnotify)
    await second.waitForLine(startingWith: "watching")
    // Every post of this process (400 + 50) and the new process's one.
    let ownPID = Int(getpid())
    let complete = await waitUntil {
        let all = Set(Watched.parse(first.lines.values) + Watched.parse(second.lines.values))
        return Set(all.filter { $0.pid == ownPID }.map { "\($0.name) \($0.sequence)" }).count >= 450
            && all.contains { $0.name == "test.jobs.while.away" }
    }
    second.signal(SIGTERM)
    #expect(await second.waitForExit() == 0)
    let before = Watched.parse(first.lines.values)
    let after = Watched.parse(second.lines.values)
    let union = Set((before + after).filter { $0.pid == ownPID }.map { "\($0.name) \($0.sequence)" })
    #expect(complete, "seen \(union.count) of 450")
    var expected: Set<String> = []
    for old in 0..<10 { for sequence in 1...40 { expected.insert("test.jobs.old\(old) \(sequence)") } }
    for new in 0..<5 { for sequence in 1...10 { expected.insert("test.jobs.new\(new) \(sequence)") } }
    #expect(union == expected)
    #expect(!(before + after).contains { $0.name == "test.jobsx" })
    // The second run read the names made while it was away from their
    // first post, none of it marked as seen before.
    for new in 0..<5 {
        let sequences = after.filter { $0.name == "test.jobs.new\(new)" }
        #expect(sequences.map(\.sequence) == Array(1...10))
        #expect(!sequences.contains { $0.isRedelivery })
    }
}
