import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@Suite("The platform layer's typed file calls", .timeLimit(.minutes(10)))
struct FileStatusTests {
    @Test("each kind of file, its permissions, owner, size and identity, read through FileStatus")
    func kindsAndFields() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let file = directory + "/file"
        let opened = try SystemCalls.openFile(
            file, .writeOnly, options: [.create, .exclusive, .noFollow], permissions: 0o640
        ).get()
        try SystemCalls.writeAll(opened, [1, 2, 3]).get()
        // The umask may take bits away at creation; set them exactly.
        try SystemCalls.changeMode(opened, permissions: 0o640).get()
        let status = try SystemCalls.linkStatus(file).get()
        #expect(status.kind == .regular)
        #expect(status.permissions == 0o640)
        #expect(status.permissions.description == "640")
        #expect(status.owner == SystemProcess.userID)
        #expect(status.size == 3)
        #expect(status.links == 1)
        #expect(try SystemCalls.fileStatus(opened).get().identity == status.identity)

        // O_EXCL: a second exclusive create fails with the typed error.
        #expect(throws: Errno.fileExists) {
            _ = try SystemCalls.openFile(file, .writeOnly, options: [.create, .exclusive]).get()
        }
        try FileManager.default.createSymbolicLink(atPath: directory + "/link", withDestinationPath: file)
        #expect(try SystemCalls.linkStatus(directory + "/link").get().kind == .symbolicLink)
        #expect(try SystemCalls.status(directory + "/link").get().identity == status.identity)
        // O_NOFOLLOW: a link as the last part of the path is refused.
        #expect(throws: Errno.tooManySymbolicLinks) {
            _ = try SystemCalls.openFile(directory + "/link", .readOnly, options: .noFollow).get()
        }
        #expect(try SystemCalls.linkStatus(directory).get().kind == .directory)
        #expect(mkfifo(directory + "/fifo", 0o600) == 0)
        #expect(try SystemCalls.linkStatus(directory + "/fifo").get().kind == .fifo)
        // A FIFO opened for reading without a writer would block; not with nonBlocking.
        _ = try SystemCalls.openFile(directory + "/fifo", .readOnly, options: .nonBlocking).get()
        let socket = try SystemCalls.datagramSocket().get()
        try SystemCalls.bindSocket(socket, toSocketPath: directory + "/socket").get()
        #expect(try SystemCalls.linkStatus(directory + "/socket").get().kind == .socket)
        #expect(try SystemCalls.linkStatus("/dev/null").get().kind == .device)

        // Removed while open: no names left.
        try SystemCalls.removeFile(file).get()
        #expect(try SystemCalls.fileStatus(opened).get().links == 0)
        #expect(throws: Errno.noSuchFile) { try SystemCalls.linkStatus(file).get() }
    }

    @Test("a growing file's extent: size, links and identity as fstat reads them, until it is removed")
    func extentOfAGrowingFile() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let file = directory + "/log"
        let opened = try SystemCalls.openFile(file, .readWrite, options: [.create, .exclusive]).get()
        for round in 1...3 {
            try SystemCalls.writeAll(opened, [UInt8](repeating: 7, count: 1_000 * round)).get()
            let extent = try SystemCalls.fileExtent(opened).get()
            let status = try SystemCalls.fileStatus(opened).get()
            #expect(extent.size == status.size)
            #expect(extent.size == 1_000 * (1...round).reduce(0, +))
            #expect(extent.links == 1)
            #expect(extent.identity == status.identity)
        }
        // At its path: the same file; a link there is not followed; a C
        // path made once answers the same.
        let atPath = try SystemCalls.pathExtent(file).get()
        #expect(atPath == (try SystemCalls.fileExtent(opened).get()))
        #expect(try SystemCalls.pathExtent(SystemPath(file)).get() == atPath)
        try FileManager.default.createSymbolicLink(atPath: directory + "/link", withDestinationPath: file)
        #expect(try SystemCalls.pathExtent(directory + "/link").get().identity != atPath.identity)
        #expect(throws: Errno.noSuchFile) { try SystemCalls.pathExtent(directory + "/missing").get() }
        // Another name for it, then both removed: the count follows.
        #expect(link(file, directory + "/other") == 0)
        #expect(try SystemCalls.fileExtent(opened).get().links == 2)
        try SystemCalls.removeFile(file).get()
        try SystemCalls.removeFile(directory + "/other").get()
        #expect(try SystemCalls.fileExtent(opened).get().links == 0)
        #expect(throws: Errno.noSuchFile) { try SystemCalls.pathExtent(file).get() }
        // A descriptor that is not open is a typed error, not a trap (-1:
        // never another test's descriptor, and closing it does nothing).
        #expect(throws: Errno.self) { try SystemCalls.fileExtent(FileDescriptor(adopting: -1)).get() }
    }

    @Test("permissions keep only permission bits and print as chmod takes them")
    func permissions() {
        #expect(FilePermissions(rawValue: 0o100644) == 0o644)
        #expect(FilePermissions(rawValue: 0o1777).description == "1777")
        #expect((0o750 as FilePermissions).intersects(0o007) == false)
        #expect((0o755 as FilePermissions).intersects(0o007))
    }

    @Test("waiting for a writable or readable descriptor reports which is ready")
    func readiness() throws {
        let pipe = try SystemCalls.makePipe().get()
        #expect(try SystemCalls.waitUntilReadable(pipe.readEnd.rawValue, milliseconds: 0).get() == false)
        #expect(try SystemCalls.waitUntilWritable([pipe.writeEnd.rawValue], milliseconds: 0).get() == [true])
        try SystemCalls.writeAll(pipe.writeEnd, [7]).get()
        #expect(try SystemCalls.waitUntilReadable(pipe.readEnd.rawValue, milliseconds: 1_000).get())
    }

    @Test("the default directory follows XDG_RUNTIME_DIR only when it is an absolute path")
    func runtimeDirectory() {
        #expect(SystemProcess.runtimeDirectory(named: "x", runtime: "/run/user/4242") == "/run/user/4242/x")
        #expect(SystemProcess.runtimeDirectory(named: "x", runtime: "relative") == "/tmp/x-\(SystemProcess.userID)")
        #expect(SystemProcess.runtimeDirectory(named: "x", runtime: nil) == "/tmp/x-\(SystemProcess.userID)")
        #expect(
            SystemProcess.runtimeDirectory(named: "x")
                == SystemProcess.runtimeDirectory(
                    named: "x", runtime: ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"]))
    }
}
