import Foundation
import Testing
import TypedNotifications

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What a watcher printed, as counted by ``playStalledWatcher(transport:selector:names:count:durable:post:)``.
struct StalledWatch {
    /// The sequence numbers printed, by name, in the order printed.
    var printed: [String: [UInt64]] = [:]
    /// The sum of every line's `missed`.
    var missed = 0
    /// Lines marked as redeliveries.
    var redeliveries = 0

    var printedCount: Int { printed.values.reduce(0) { $0 + $1.count } }
}

/// The adversary of a small buffer, played the same way over every
/// transport that meets between processes: `tnotify watch SELECTOR
/// --buffer 8 --json` (plus `transport`; with `durable`, `--cursor
/// slow`) whose standard output nobody reads, so its loop stalls on a full
/// pipe while this process posts `count` notifications, the names taking
/// turns. Then its output is read until every post is printed or counted
/// as missed on a later line. Returns what was printed.
func playStalledWatcher(
    transport: [String], selector: String, names: [NotificationName], count: Int = 3_000, durable: Bool = false,
    post: (NotificationName, Int) throws -> Void
) async throws -> StalledWatch {
    let cursor = durable ? ["--cursor", "slow"] : []
    let watcher = try HelperProcess(
        ["watch", selector, "--buffer", "8", "--json"] + cursor + transport, executable: HelperProcess.tnotify,
        smallPipe: true)
    await watcher.waitForLine(startingWith: "watching")
    // From here the watcher's writes block once its one-page pipe is full:
    // its loop stops asking for deliveries, and its buffer of 8 fills.
    watcher.outputGate.close()
    for index in 1...count { try post(names[index % names.count], index) }
    // Every post is in (a log, a stream, a socket or a spool) before the
    // watcher prints again: what it reads now is a backlog.
    watcher.outputGate.open()
    var watch = StalledWatch()
    var seen = 0
    while watch.printedCount + watch.missed < count {
        guard await watcher.lines.wait(forCount: seen + 1, upTo: safetyNet) else {
            Issue.record(
                "after \(safetyNet): \(watch.printedCount) printed, \(watch.missed) missed, of \(count); \(watcher.errors.values)"
            )
            break
        }
        let lines = watcher.lines.values
        for line in lines[seen...] where line.hasPrefix("{") {
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let name = object["name"] as? String, let sequence = object["sequence"] as? NSNumber
            else {
                Issue.record("not a notification: \(line)")
                continue
            }
            watch.printed[name, default: []].append(sequence.uint64Value)
            watch.missed += object["missed"] as? Int ?? 0
            if object["redelivery"] as? Bool == true { watch.redeliveries += 1 }
        }
        seen = lines.count
    }
    watcher.signal(SIGTERM)
    #expect(await watcher.waitForExit() == 0)
    // Each name's notifications in post order, each once.
    for (name, sequences) in watch.printed {
        #expect(sequences == sequences.sorted() && Set(sequences).count == sequences.count, "\(name) out of order")
    }
    return watch
}
