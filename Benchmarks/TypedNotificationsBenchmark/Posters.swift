import Foundation
import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Figures of one row of the concurrent-posters section.
struct PostersResult: Codable, Sendable {
    var threads: Int
    var posts: Int
    var postsPerSecond: Double
    /// Appends per write: how many posts each group commit carried.
    var postsPerWrite: Double
    /// System calls per post, every thread of the process.
    var systemCallsPerPost: Double
}

/// Posts `total` 16-byte notifications to one file-transport hub from
/// `threads` threads at once, with no observer: what a post costs the
/// poster, and how many posts share a write when they queue up behind one.
func measureConcurrentPosters(threads: Int, total: Int) throws -> PostersResult {
    let directory = makeScratchDirectory("posters")
    defer { removeScratchDirectory(directory) }
    let transport = try FileSignalTransport(directory: directory)
    let hub = try NotificationHub(endpoint: "posters", transport: transport)
    defer { hub.closeAndWait() }
    let filler = BenchTick.filler(forPayloadSize: 16)
    try hub.post(BenchTick(index: 0, filler: filler))  // the log exists
    let before = transport.statistics
    let callsBefore = SystemCalls.made.load(ordering: .relaxed)
    let perThread = total / threads
    let group = DispatchGroup()
    let start = now()
    for thread in 0..<threads {
        group.enter()
        Thread {
            for index in 0..<perThread {
                do {
                    try hub.post(BenchTick(index: UInt64(thread * perThread + index), filler: filler))
                } catch {
                    fail("post: \(error)")
                }
            }
            group.leave()
        }.start()
    }
    group.wait()
    let elapsed = now() - start
    let calls = SystemCalls.made.load(ordering: .relaxed) - callsBefore
    let after = transport.statistics
    let posts = perThread * threads
    return PostersResult(
        threads: threads,
        posts: posts,
        postsPerSecond: Double(posts) / (Double(elapsed) / 1e9),
        postsPerWrite: Double(after.appended - before.appended)
            / Double(max(1, after.appendWrites - before.appendWrites)),
        systemCallsPerPost: Double(calls) / Double(posts)
    )
}
