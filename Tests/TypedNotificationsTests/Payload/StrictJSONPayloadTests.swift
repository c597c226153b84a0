import Foundation
import Testing

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

struct StrictTransfer: TypedNotification, Codable, Equatable, StrictJSONPayload {
    static let name: NotificationName = "test.strict.transfer"
    struct Party: Codable, Equatable {
        var account: String
        enum CodingKeys: String, CodingKey { case account = "acct" }
    }
    var from: Party
    var cents: Int
    var note: String?
    var tags: [Party] = []
}

/// The same fields, without the strict mode.
struct LenientTransfer: TypedNotification, Codable, Equatable {
    static let name: NotificationName = "test.strict.transfer"
    var cents: Int
}

@Suite("Strict JSON payloads: unknown keys are an error")
struct StrictJSONPayloadTests {
    func decode(_ json: String) throws -> StrictTransfer {
        try StrictTransfer(payload: Array(json.utf8))
    }

    func unknownKeys(_ json: String) -> [String]? {
        do {
            _ = try decode(json)
            return nil
        } catch let error as StrictJSONPayloadError {
            guard case .unknownKeys(let paths) = error else { return nil }
            return paths
        } catch {
            return nil
        }
    }

    @Test("exactly the known keys decode, with custom coding keys, nested types, and null for a nil optional")
    func knownKeys() throws {
        let value = try decode(#"{"from":{"acct":"a1"},"cents":5,"note":null,"tags":[{"acct":"t"}]}"#)
        #expect(value == StrictTransfer(from: .init(account: "a1"), cents: 5, note: nil, tags: [.init(account: "t")]))
        #expect(try decode(#"{"from":{"acct":"a1"},"cents":5,"tags":[]}"#).cents == 5)
    }

    @Test("an unknown key at any depth is refused, and named by its path")
    func unknownKeysRefused() {
        #expect(unknownKeys(#"{"from":{"acct":"a1"},"cents":5,"tags":[],"admin":true}"#) == [".admin"])
        #expect(unknownKeys(#"{"from":{"acct":"a1","account":"x"},"cents":5,"tags":[]}"#) == [".from.account"])
        #expect(
            unknownKeys(#"{"from":{"acct":"a1"},"cents":5,"tags":[{"acct":"t"},{"acct":"u","x":1}]}"#)
                == [".tags[1].x"])
        #expect(
            unknownKeys(#"{"from":{"acct":"a1"},"cents":5,"tags":[],"note":"n","z":null}"#) == nil,
            "a null the type leaves out counts as known")
    }

    @Test("a plain Codable type still drops unknown keys, as JSONDecoder does")
    func lenientDrops() throws {
        #expect(try LenientTransfer(payload: Array(#"{"cents":5,"admin":true}"#.utf8)).cents == 5)
    }

    @Test("through a hub: a payload with an unknown key is not delivered, counted undecodable, and reported missed")
    func throughHub() async throws {
        let hub = try makeHub()
        let deliveries = try hub.deliveries(.of(StrictTransfer.self))
        let good = #"{"from":{"acct":"a1"},"cents":1,"tags":[]}"#
        let forged = #"{"from":{"acct":"a1"},"cents":2,"tags":[],"admin":true}"#
        for json in [good, forged, good] {
            try hub.post(RawNotification(bytes: Array(json.utf8)), as: StrictTransfer.name)
        }
        var iterator = deliveries.makeAsyncIterator()
        let first = await iterator.next()
        let second = await iterator.next()
        #expect(first?.notification.cents == 1)
        #expect(first?.delivery.missed == 0)
        #expect(second?.notification.cents == 1)
        #expect(second?.delivery.missed == 1, "the refused one is reported, never silent")
        #expect(hub.metrics.undecodable == 1)
    }
}
