import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotifications

@Suite("Notification names and endpoint labels")
struct NotificationNameTests {
    @Test(
        "valid names are accepted",
        arguments: [
            "a", "com.example.broadcast.started", "A-Z_0-9", "x.y", "trailing.",
            String(repeating: "n", count: 200),
        ]
    )
    func validNames(_ text: String) throws {
        #expect(try NotificationName(validating: text).rawValue == text)
    }

    @Test(
        "invalid names throw invalidName and never trap",
        arguments: [
            ("", "is empty"),
            (String(repeating: "n", count: 201), "longer than 200"),
            (".hidden", "starts with a dot"),
            ("a..b", "contains \"..\""),
            ("..", "starts with a dot"),
            ("../etc/passwd", "starts with a dot"),
            ("a/b", "outside"),
            ("a b", "outside"),
            ("nul\u{0}byte", "outside"),
            ("émoji🎉", "outside"),
            ("semi;colon", "outside"),
            ("back\\slash", "outside"),
            ("new\nline", "outside"),
        ]
    )
    func invalidNames(_ text: String, _ reason: String) {
        #expect {
            try NotificationName(validating: text)
        } throws: { error in
            guard let error = error as? TypedNotificationError else { return false }
            return error.code == .invalidName && error.message.contains(reason)
        }
    }

    @Test("hostile text in an error message is escaped and cut short")
    func hostileTextIsQuoted() {
        let hostile = String(repeating: "\u{1b}[2J\n", count: 1000)
        do {
            _ = try NotificationName(validating: hostile)
            Issue.record("expected a throw")
        } catch {
            #expect(error.code == .invalidName)
            #expect(!error.message.contains("\n"))
            #expect(!error.message.contains("\u{1b}"))
            #expect(error.message.count < 400)
        }
    }

    @Test("the 200-byte limit counts UTF-8 bytes, not characters")
    func limitIsInBytes() {
        #expect(throws: TypedNotificationError.self) {
            try NotificationName(validating: String(repeating: "é", count: 150))
        }
    }

    @Test("endpoint labels follow the same rules with a 64-byte limit")
    func endpointLabels() throws {
        _ = try makeHub(endpoint: "widget-1.ext_2")
        for bad in ["", ".x", "a/b", String(repeating: "e", count: 65), "a..b"] {
            #expect {
                try makeHub(endpoint: bad)
            } throws: { error in
                (error as? TypedNotificationError)?.code == .invalidEndpoint
            }
        }
    }

    @Test("a literal name equals the same validated name")
    func literalMatchesValidated() throws {
        #expect(Ping.name == (try NotificationName(validating: "test.ping")))
        #expect(Ping.name.description == "test.ping")
    }

    @Test("an invalid literal traps nowhere: every use throws invalidName quoting the literal and the declaring type")
    func invalidLiteralNamesItsDeclaration() async throws {
        #expect(TypoNotification.name.validationError?.code == .invalidName)
        #expect(Ping.name.validationError == nil)
        let hub = try makeHub()
        let uses: [(String, () throws -> Void)] = [
            ("post", { try hub.post(TypoNotification()) }),
            ("addObserver", { _ = try hub.addObserver(.of(TypoNotification.self)) { _, _ in } }),
            ("deliveries", { _ = try hub.deliveries(.of(TypoNotification.self)) }),
            ("notifications", { _ = try hub.notifications(.of(TypoNotification.self)) }),
        ]
        for (use, call) in uses {
            do {
                try call()
                Issue.record("\(use) of an invalid name did not throw")
            } catch let error as TypedNotificationError {
                #expect(error.code == .invalidName, "\(use)")
                #expect(error.message.contains("TypoNotification.name"), "\(use): \(error.message)")
                #expect(error.message.contains(#""com.example:changed""#), "\(use): \(error.message)")
                #expect(error.message.contains("outside A-Z"), "\(use): \(error.message)")
            }
        }
        #expect(hub.metrics.posted == 0)
        // A literal given per call: the error quotes it.
        #expect {
            try hub.post(RawNotification(), as: "two words")
        } throws: { error in
            (error as? TypedNotificationError)?.message.contains(#"the literal "two words""#) == true
        }
        #expect(throws: TypedNotificationError.self) {
            _ = try hub.deliveries(.of(RawNotification.self, named: "../up"))
        }
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let file = try fileHub(directory)
        #expect(throws: TypedNotificationError.self) { _ = try file.latest(.of(TypoNotification.self)) }
        let entries = try FileManager.default.contentsOfDirectory(atPath: directory)
        #expect(!entries.contains { $0.contains(":") })
    }

    @Test("one call checks a module's notification types and lists every invalid name")
    func validateAll() throws {
        try NotificationName.validate([Ping.self, Note.self, CacheCleared.self])
        #expect {
            try NotificationName.validate([Ping.self, TypoNotification.self, Note.self, DotDotNotification.self])
        } throws: { error in
            guard let error = error as? TypedNotificationError else { return false }
            return error.code == .invalidName && error.message.contains("TypoNotification.name")
                && error.message.contains("DotDotNotification.name") && !error.message.contains("Ping")
        }
    }
}

/// A notification whose name literal has a typo (`:` for `.`).
struct TypoNotification: PayloadlessNotification {
    static let name: NotificationName = "com.example:changed"
}

struct DotDotNotification: PayloadlessNotification {
    static let name: NotificationName = "com..example"
}
