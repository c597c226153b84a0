import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The directory's folders swapped for links by another process (anyone who
/// may write the directory: another member of a group-shared one). The
/// stop-78 review found a running observer's registration repair, and a
/// poster spooling for a stopped observer, still going by path: the repair
/// deleted the link target's `.registration` and `.entry.N`, and the poster
/// wrote 29 of 40 posts there, where no reader looks, and said they were
/// taken.
@Suite("Socket transport: folders swapped for links under running endpoints")
struct SwappedFolderTests {
    /// A folder outside the directory holding files named as an endpoint's
    /// own, and what each holds.
    private func victim(in outside: String) throws -> [String: String] {
        let files = [".registration": "precious registration", ".entry.0": "precious entry", "kept": "kept"]
        try FileManager.default.createDirectory(atPath: outside + "/victim", withIntermediateDirectories: true)
        for (name, text) in files {
            #expect(FileManager.default.createFile(atPath: outside + "/victim/" + name, contents: Data(text.utf8)))
        }
        return files
    }

    private func contents(of folder: String) -> [String: String] {
        var found: [String: String] = [:]
        for name in files(in: folder) {
            found[name] = (try? String(contentsOfFile: folder + "/" + name, encoding: .utf8)) ?? "?"
        }
        return found
    }

    /// Moves `directory/spool` to `outside/moved` and leaves a link to
    /// `outside/fake`, whose entry `id` leads to `outside/victim`.
    private func swapSpool(_ directory: String, _ outside: String, id: String) throws {
        #expect(rename(directory + "/spool", outside + "/moved") == 0)
        try FileManager.default.createDirectory(atPath: outside + "/fake", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(
            atPath: outside + "/fake/" + id, withDestinationPath: outside + "/victim")
        try FileManager.default.createSymbolicLink(atPath: directory + "/spool", withDestinationPath: outside + "/fake")
    }

    @Test(
        "spool/ swapped for a link, then the observer's entry removed: the repair links it to the endpoint's own registration; the link's target keeps its files"
    )
    func repairKeepsToItsOwnSpool() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let outside = try makeTemporaryDirectory()
        defer { removeDirectory(outside) }
        let observer = try socketHub(directory, endpoint: "observer")
        let token = try observer.addObserver(.of(Ping.self)) { _, _ in }
        defer { token.cancel() }
        let id = observer.transport.identifier
        let kept = try victim(in: outside)
        try swapSpool(directory, outside, id: id)
        // Another process removes the observer's entry: its registration
        // file's link count changes, which wakes a repair.
        let entry = directory + "/names/" + Ping.name.rawValue + "/" + id
        #expect(unlink(entry) == 0)
        #expect(await waitUntil { observer.transport.statistics.repairedEntries >= 1 })
        var made = stat()
        var own = stat()
        #expect(lstat(entry, &made) == 0)
        #expect(lstat(outside + "/moved/\(id)/.registration", &own) == 0)
        #expect(made.st_ino == own.st_ino && made.st_dev == own.st_dev, "the entry links to the endpoint's own file")
        #expect(contents(of: outside + "/victim") == kept)
        observer.close()
        await observer.closed()
        #expect(contents(of: outside + "/victim") == kept)
    }

    @Test(
        "spool/ID of a stopped observer swapped for a link: a poster that must spool says the post was undelivered, and writes nothing at the link's target"
    )
    func posterSpoolsOnlyIntoTheEndpointsFolder() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let outside = try makeTemporaryDirectory()
        defer { removeDirectory(outside) }
        let kept = try victim(in: outside)
        let watcher = try HelperProcess(["observe", directory, "1000000"])
        await watcher.waitForLine(startingWith: "ready")
        let id = try #require(files(in: directory + "/spool").first)
        let poster = try socketHub(directory, endpoint: "poster")
        watcher.signal(SIGSTOP)
        await waitUntilStopped(watcher.pid)
        #expect(rename(directory + "/spool/" + id, outside + "/moved") == 0)
        try FileManager.default.createSymbolicLink(
            atPath: directory + "/spool/" + id, withDestinationPath: outside + "/victim")
        var undelivered = 0
        for index in 0..<40 {
            do throws(TypedNotificationError) {
                try poster.post(HelperPing(poster: 1, index: index))
            } catch {
                #expect(error.code == .undelivered, "\(error)")
                undelivered += 1
            }
        }
        // The socket's queue took what it holds; every later post needed the spool.
        #expect(undelivered > 0)
        #expect(contents(of: outside + "/victim") == kept)
        #expect(files(in: outside + "/moved").allSatisfy { $0 == ".registration" })
        watcher.signal(SIGKILL)
        #expect(await watcher.waitForExit() == 128 + SIGKILL)
        poster.close()
        await poster.closed()
        #expect(contents(of: outside + "/victim") == kept)
    }

    /// An endpoint removes what in its spool is no spool file. It used to
    /// list and empty its spool by path, so with `spool/` swapped for a
    /// link it removed every file of the link's target.
    @Test(
        "spool/ swapped for a link under a running observer: it empties its own spool folder, wherever it went, and never the link's target"
    )
    func observerKeepsToItsOwnSpool() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let outside = try makeTemporaryDirectory()
        defer { removeDirectory(outside) }
        let observer = try socketHub(directory, endpoint: "observer")
        let id = observer.transport.identifier
        let kept = try victim(in: outside)
        try swapSpool(directory, outside, id: id)
        // Something that is no spool file, in the endpoint's own folder.
        #expect(FileManager.default.createFile(atPath: outside + "/moved/\(id)/junk", contents: nil))
        // The nudge a poster sends when it starts a spool file: an empty datagram.
        let nudge = try SystemCalls.datagramSocket().get()
        try SystemCalls.connectSocket(nudge, toSocketPath: observer.transport.socketPath).get()
        let empty = [UInt8]()
        #expect(try empty.withUnsafeBytes { SystemCalls.sendDatagram(nudge, $0) }.get() == 0)
        #expect(await waitUntil { observer.transport.statistics.refusedMalformed >= 1 })
        #expect(!files(in: outside + "/moved/" + id).contains("junk"))
        #expect(contents(of: outside + "/victim") == kept)
        observer.close()
        await observer.closed()
        #expect(contents(of: outside + "/victim") == kept)
    }
}
