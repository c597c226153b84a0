import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotifications

/// The socket registry's rules as *Formats* states them, played by the
/// second implementation in `Tests/Interop/tn_interop.py` (Python, written
/// from the article) against a long-lived poster in this process.
@Suite("Socket transport: an endpoint of another implementation", .timeLimit(.minutes(10)))
struct SecondImplementationTests {
    /// The Python program, run by `python3` from the `PATH`.
    static let program = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../../Interop/tn_interop.py").standardized.path

    @Test(
        "a long-lived poster that routed a name reaches an endpoint registered later by the article's steps, which moved the generation with a random write, not an add"
    )
    func randomGenerationWriteIsSeen() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try socketHub(directory, endpoint: "poster")
        defer { poster.close() }
        let name: NotificationName = "test.second.generation"
        // Routed once with nobody observing: the poster now caches "no one"
        // for the name, and looks again only when the generation moved.
        try poster.post("before", as: name)
        let generation = directory + "/names/.generation"
        let counterBefore = try Data(contentsOf: URL(fileURLWithPath: generation)).prefix(8)

        let watcher = try HelperProcess(
            ["python3", Self.program, "watch", name.rawValue, "--count", "1", "--dir", directory],
            executable: "/usr/bin/env")
        await watcher.waitForLine(startingWith: "ready")
        let counterAfter = try Data(contentsOf: URL(fileURLWithPath: generation)).prefix(8)
        #expect(counterAfter != counterBefore, "the Python endpoint moved the generation")

        try poster.post("after", as: name)
        let line = await watcher.waitForLine(startingWith: "{")
        let message = try #require(Watched.jsonObjects([line]).first)
        #expect(message["text"] as? String == "after")
        #expect(message["endpoint"] as? String == "poster")
        #expect(message["sequence"] as? Int == 2)
        #expect(await watcher.waitForExit() == 0)
    }
}
