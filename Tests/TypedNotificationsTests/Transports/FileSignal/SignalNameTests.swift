import Foundation
import Testing

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

/// The notify(3) names that wake readers on Apple platforms, checked on
/// Linux: they are pure functions of the directory's identity and the name.
@Suite("File transport signal names (notify(3) on Apple platforms)")
struct SignalNameTests {
    @Test("two spellings of one directory (a symbolic link, as /var is to /private/var) share signal names")
    func spellingsShareNames() throws {
        let base = try makeTemporaryDirectory()
        defer { removeDirectory(base) }
        let real = base + "/private/var/group"
        try FileManager.default.createDirectory(
            atPath: real, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try FileManager.default.createSymbolicLink(atPath: base + "/var", withDestinationPath: base + "/private/var")
        let spelledDirectly = try FileSignalTransport(directory: real)
        let spelledThroughLink = try FileSignalTransport(directory: base + "/var/group")
        let another = try FileSignalTransport(directory: base + "/another")
        let name: NotificationName = "com.example.reload"
        let direct = try #require(spelledDirectly.signalName(for: name))
        #expect(spelledThroughLink.signalName(for: name) == direct)
        #expect(another.signalName(for: name) != direct)
        #expect(spelledDirectly.signalName(for: "com.example.other") != direct)
    }

    @Test("signal names keep notify(3)'s rules, the longest name included")
    func namesKeepTheRules() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let transport = try FileSignalTransport(directory: directory)
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_".utf8)
        for raw in ["a", "com.example.reload", String(repeating: "n", count: NotificationName.maximumLength)] {
            let name = try NotificationName(validating: raw)
            let signal = try #require(transport.signalName(for: name))
            #expect(signal.hasPrefix("org.typednotifications."))
            #expect(!signal.hasPrefix("com.apple.") && !signal.hasPrefix("self."))
            #expect(signal.utf8.allSatisfy(allowed.contains))
            #expect(signal.utf8.count <= FileLog.maximumSignalNameLength)
        }
        #expect(FileLog.maximumSignalNameLength <= 255)
    }
}
