import Testing

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

struct CacheCleared: PayloadlessNotification {
    static let name: NotificationName = "test.cache-cleared"
}

/// What code used before ``PayloadlessNotification``: an empty Codable struct.
struct LegacyCacheCleared: TypedNotification, Codable {
    static let name: NotificationName = "test.cache-cleared"
}

@Suite("Payload-less notifications")
struct PayloadlessNotificationTests {
    @Test("a payload-less notification is zero bytes, and decodes from zero bytes or an empty Codable's {}")
    func bytes() throws {
        #expect(try CacheCleared().encodedPayload() == [])
        _ = try CacheCleared(payload: [UInt8]())
        _ = try CacheCleared(payload: Array("{}".utf8))
        _ = try CacheCleared(payload: Array(" { } \n".utf8))
        #expect(throws: PayloadDecodingError.self) { try CacheCleared(payload: Array("{\"a\":1}".utf8)) }
        #expect(throws: PayloadDecodingError.self) { try CacheCleared(payload: [0]) }
    }

    @Test(
        "through a hub: a typed post, an empty raw post (tnotify post NAME) and a legacy empty struct all arrive; other bytes are counted undecodable"
    )
    func throughHub() async throws {
        let hub = try makeHub()
        let deliveries = try hub.deliveries(.of(CacheCleared.self))
        try hub.post(CacheCleared())
        try hub.post(RawNotification(bytes: []), as: CacheCleared.name)
        try hub.post(LegacyCacheCleared())
        try hub.post(RawNotification(bytes: [1, 2]), as: CacheCleared.name)
        try hub.post(CacheCleared())
        var iterator = deliveries.makeAsyncIterator()
        var missed: [Int] = []
        for _ in 0..<4 {
            guard let delivery = await iterator.next() else { break }
            missed.append(delivery.delivery.missed)
        }
        #expect(missed == [0, 0, 0, 1])
        #expect(hub.metrics.undecodable == 1)
    }
}
