import Testing
import TypedNotifications

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
}
