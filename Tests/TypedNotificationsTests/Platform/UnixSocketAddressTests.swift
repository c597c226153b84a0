import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The socket path of an app group container on an iPhone, with the
/// transport's directory in it: what Darwin's layout must hold.
private let appGroupSocketPath =
    "/private/var/mobile/Containers/Shared/AppGroup/0F6E3C2A-1B7D-4E59-9A4C-7D2E81F3B6A0/Library/notifications"
    + "/sockets/0123456789abcdef.sock"

@Suite("Unix socket addresses: both systems' layouts, any directory length")
struct UnixSocketAddressTests {
    @Test("Linux's layout: a 2-byte family, the path and its NUL; 107 bytes fit, 108 do not")
    func linuxLayout() throws {
        let address = try UnixSocketAddress(path: "/tmp/a.sock", layout: .linux)
        #expect(address.bytes == [1, 0] + Array("/tmp/a.sock".utf8) + [0])
        let longest = "/" + String(repeating: "l", count: 106)
        #expect(try UnixSocketAddress(path: longest, layout: .linux).bytes.count == 110)
        #expect(throws: Errno.nameTooLong) { try UnixSocketAddress(path: longest + "l", layout: .linux) }
    }

    @Test("Darwin's layout: sun_len carries the whole address, up to SOCK_MAXADDRLEN (a 252-byte path)")
    func darwinLayout() throws {
        let address = try UnixSocketAddress(path: "/tmp/a.sock", layout: .darwin)
        #expect(address.bytes == [UInt8(2 + 11 + 1), 1] + Array("/tmp/a.sock".utf8) + [0])
        // An app group container's socket does not fit in the 104 bytes
        // sun_path declares, and does in the address xnu accepts.
        #expect(appGroupSocketPath.utf8.count > 104)
        let inContainer = try UnixSocketAddress(path: appGroupSocketPath, layout: .darwin)
        #expect(Int(inContainer.bytes[0]) == inContainer.bytes.count)
        let longest = "/" + String(repeating: "d", count: 251)
        let full = try UnixSocketAddress(path: longest, layout: .darwin)
        #expect(full.bytes.count == 255 && full.bytes[0] == 255)
        #expect(throws: Errno.nameTooLong) { try UnixSocketAddress(path: longest + "d", layout: .darwin) }
    }

    @Test("an empty path or one with a NUL in it is an invalid argument, never a cut path")
    func invalidPaths() {
        for layout in [UnixSocketAddress.Layout.linux, .darwin] {
            #expect(throws: Errno.invalidArgument) { try UnixSocketAddress(path: "", layout: layout) }
            #expect(throws: Errno.invalidArgument) { try UnixSocketAddress(path: "/tmp/a\u{0}b", layout: layout) }
        }
    }

    @Test("a peer's address reads back as its path; unbound, abstract, foreign and cut ones as none")
    func peerAddresses() throws {
        for layout in [UnixSocketAddress.Layout.linux, .darwin] {
            for path in ["/tmp/a.sock", appGroupSocketPath] {
                guard let address = try? UnixSocketAddress(path: path, layout: layout) else { continue }
                var buffer = address.bytes + [UInt8](repeating: 0xAA, count: 256 - address.bytes.count)
                #expect(UnixSocketAddress.path(in: buffer, length: address.bytes.count, layout: layout) == path)
                // An unbound peer: the family alone.
                #expect(UnixSocketAddress.path(in: buffer, length: 2, layout: layout) == nil)
                // Not AF_UNIX.
                buffer[layout == .linux ? 0 : 1] = 2
                #expect(UnixSocketAddress.path(in: buffer, length: address.bytes.count, layout: layout) == nil)
            }
        }
        // Linux: an abstract address starts with a NUL.
        let abstract: [UInt8] = [1, 0, 0] + Array("hidden".utf8)
        #expect(UnixSocketAddress.path(in: abstract, length: abstract.count, layout: .linux) == nil)
        // Linux says how long the address was, even past the buffer: cut.
        let linux = try UnixSocketAddress(path: "/tmp/a.sock", layout: .linux).bytes
        #expect(UnixSocketAddress.path(in: linux.prefix(8), length: linux.count, layout: .linux) == nil)
        // Darwin copies what fits and keeps sun_len: longer than returned is cut.
        let darwin = try UnixSocketAddress(path: appGroupSocketPath, layout: .darwin).bytes
        #expect(UnixSocketAddress.path(in: darwin.prefix(106), length: 106, layout: .darwin) == nil)
    }

    #if os(Linux)
        @Test("bind and connect reach a socket in a directory of any length", arguments: [200, 2_000])
        func longDirectories(length: Int) throws {
            let base = try makeTemporaryDirectory()
            defer { removeDirectory(base) }
            let directory = try makeLongDirectory(in: base, length: length)
            let path = directory + "/receiver.sock"
            let receiver = try SystemCalls.datagramSocket().get()
            try SystemCalls.bindSocket(receiver, toSocketPath: path).get()
            #expect(try SystemCalls.linkStatus(path).get().kind == .socket)
            let sender = try SystemCalls.datagramSocket().get()
            let reached = SystemCalls.connectSocket(sender, toSocketFile: path) { _ in true }
            #expect(try reached.get()?.identity == SystemCalls.linkStatus(path).get().identity)
            try sendAndExpect(sender, reaches: receiver)
        }

        @Test(
            "connecting to a checked socket file reaches that file: a socket swapped in after the check gets nothing",
            arguments: [60, 200])
        func swappedSocketThroughDescriptor(length: Int) throws {
            let base = try makeTemporaryDirectory()
            defer { removeDirectory(base) }
            let directory = try makeLongDirectory(in: base, length: length)
            let pair = try twoBoundSockets(in: directory)
            let sender = try SystemCalls.datagramSocket().get()
            // The intruder's socket is renamed over the checked one between
            // the check and the connect: the connect still reaches the file checked.
            let reached = SystemCalls.connectSocket(sender, toSocketFile: directory + "/endpoint.sock") { _ in
                rename(directory + "/intruder.sock", directory + "/endpoint.sock") == 0
            }
            #expect(try reached.get() != nil)
            try sendAndExpect(sender, reaches: pair.checked, not: pair.intruder.rawValue)
        }

        @Test("Darwin's way, run on Linux: a socket swapped in after the check is refused after connect")
        func swappedSocketDarwinWay() throws {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            let pair = try twoBoundSockets(in: directory)
            let sender = try SystemCalls.datagramSocket().get()
            let reached = SystemCalls.connectSocket(
                sender, toSocketFile: directory + "/endpoint.sock", throughDescriptor: false
            ) { _ in
                rename(directory + "/intruder.sock", directory + "/endpoint.sock") == 0
            }
            // Connected to the intruder's socket, whose bound path is gone:
            // refused, and the caller never sends on it.
            #expect(try reached.get() == nil)
            var byte: UInt8 = 0
            #expect(recv(pair.intruder.rawValue, &byte, 1, dontWait) == -1)
        }

        @Test("a symbolic link at the path is refused either way, in a short and a 200-byte directory")
        func linkRefused() throws {
            for (length, throughDescriptor) in [(60, true), (200, true), (60, false)] {
                let base = try makeTemporaryDirectory()
                defer { removeDirectory(base) }
                let directory = try makeLongDirectory(in: base, length: length)
                let pair = try twoBoundSockets(in: directory)
                #expect(symlink(directory + "/intruder.sock", directory + "/link.sock") == 0)
                let sender = try SystemCalls.datagramSocket().get()
                let reached = SystemCalls.connectSocket(
                    sender, toSocketFile: directory + "/link.sock", throughDescriptor: throughDescriptor
                ) { _ in true }
                #expect(try reached.get() == nil, "length \(length), through a descriptor: \(throughDescriptor)")
                var byte: UInt8 = 0
                #expect(recv(pair.intruder.rawValue, &byte, 1, dontWait) == -1)
            }
        }

        @Test("a directory that is a symbolic link (sockets/ swapped for one) is refused either way")
        func directoryLinkRefused() throws {
            for throughDescriptor in [true, false] {
                let base = try makeTemporaryDirectory()
                defer { removeDirectory(base) }
                let elsewhere = base + "/elsewhere"
                try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: false)
                let pair = try twoBoundSockets(in: elsewhere)
                #expect(symlink(elsewhere, base + "/sockets") == 0)
                let sender = try SystemCalls.datagramSocket().get()
                let reached = SystemCalls.connectSocket(
                    sender, toSocketFile: base + "/sockets/endpoint.sock", throughDescriptor: throughDescriptor
                ) { _ in true }
                #expect(try reached.get() == nil, "through a descriptor: \(throughDescriptor)")
                var byte: UInt8 = 0
                #expect(recv(pair.checked.rawValue, &byte, 1, dontWait) == -1)
            }
        }
    #endif

    @Test("a directory past what sockets reach is pathTooLong naming the limit: Darwin's, tested here")
    func darwinLimitNamed() throws {
        // Darwin: sockets reach 252 bytes (SOCK_MAXADDRLEN), files 1,023 (PATH_MAX).
        let socketLimit = UnixSocketAddress.Layout.darwin.maximumPathLength
        let limit = SocketRegistry.maximumDirectoryLength(socketLimit: socketLimit, pathLimit: 1023)
        #expect(limit == 222)
        let fits = "/" + String(repeating: "c", count: limit - 1)
        try SocketRegistry.checkDirectory(fits, socketLimit: socketLimit, pathLimit: 1023)
        // Its socket path is the longest an address of SOCK_MAXADDRLEN holds.
        #expect(
            try UnixSocketAddress(path: fits + "/sockets/0123456789abcdef.sock", layout: .darwin).bytes.count == 255)
        let longer = fits + "c"
        do {
            try SocketRegistry.checkDirectory(longer, socketLimit: socketLimit, pathLimit: 1023)
            Issue.record("expected pathTooLong")
        } catch {
            #expect(error.code == .pathTooLong)
            #expect(error.message.contains(longer))
            #expect(error.message.contains("at most 222"))
        }
    }
}

/// Sends one byte on `sender` and expects it at `receiver` (and not at `other`).
private func sendAndExpect(
    _ sender: borrowing FileDescriptor, reaches receiver: borrowing FileDescriptor, not other: CInt? = nil
) throws {
    let byte: [UInt8] = [42]
    _ = try byte.withUnsafeBytes { try SystemCalls.sendDatagram(sender, $0).get() }
    var got: UInt8 = 0
    #expect(recv(receiver.rawValue, &got, 1, dontWait) == 1 && got == 42)
    if let other {
        #expect(recv(other, &got, 1, dontWait) == -1)
    }
}

/// `recv`'s flag for "do not wait", as an `Int32` on both systems.
private let dontWait = Int32(MSG_DONTWAIT)

/// Two datagram sockets bound in a directory: `endpoint.sock`, the one a
/// poster checks, and `intruder.sock`.
private struct BoundPair: ~Copyable {
    let checked: FileDescriptor
    let intruder: FileDescriptor
}

private func twoBoundSockets(in directory: String) throws -> BoundPair {
    let checked = try SystemCalls.datagramSocket().get()
    try SystemCalls.bindSocket(checked, toSocketPath: directory + "/endpoint.sock").get()
    let intruder = try SystemCalls.datagramSocket().get()
    try SystemCalls.bindSocket(intruder, toSocketPath: directory + "/intruder.sock").get()
    return BoundPair(checked: checked, intruder: intruder)
}
