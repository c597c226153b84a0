import Foundation
import Testing
import TypedNotifications

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The adversaries of a plain namespace observer, played the same way over
/// every transport that meets between processes: `tnotify watch
/// 'test.jobs.*'` (plus `transport`) starts after this process's
/// long-lived poster (`post`) posted `test.jobs.a`; then that poster posts
/// to it, to a near miss (`test.jobsx`) and to a name never posted before,
/// a new `tnotify post` process posts a name of its own, and the poster
/// posts the namespace's first name and one more. Each arrives once, the
/// near miss never, and none of the history before the watch.
func playNewNamesFromEveryone(
    transport: [String], post: (NotificationName, Int) throws -> Void
) async throws {
    // A name there before the watcher, with history it must not print.
    try post("test.jobs.a", 0)
    let watcher = try HelperProcess(["watch", "test.jobs.*", "--json"] + transport, executable: HelperProcess.tnotify)
    await watcher.waitForLine(startingWith: "watching", containing: "test.jobs.*")
    try post("test.jobs.a", 1)
    try post("test.jobsx", 2)
    try post("test.jobs.never.posted.before", 3)
    let fresh = try await tnotify(["post", "test.jobs.from.a.new.process", "--text", "new"] + transport)
    #expect(fresh.status == 0, "\(fresh.errors)")
    try post("test.jobs", 4)
    await watcher.lines.wait(forCount: 5)
    // One more name after: anything extra would have come by now.
    try post("test.jobs.last", 5)
    await watcher.lines.wait(forCount: 6)
    watcher.signal(SIGTERM)
    #expect(await watcher.waitForExit() == 0)
    let seen = Watched.parse(watcher.lines.values)
    #expect(
        seen.map(\.name).sorted()
            == [
                "test.jobs", "test.jobs.a", "test.jobs.from.a.new.process", "test.jobs.last",
                "test.jobs.never.posted.before",
            ])
    #expect(seen.first { $0.name == "test.jobs.a" }?.sequence == 2, "no history")
}

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
