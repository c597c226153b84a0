import Foundation
import Testing
import TypedNotifications

@Suite("Raw notifications under names chosen at run time", .timeLimit(.minutes(10)))
struct RawNotificationTests {
    @Test("a raw post reaches typed observers of its name; a typed post reaches raw observers as bytes")
    func rawAndTypedMeet() async throws {
        let hub = try makeHub()
        let typed = try hub.notifications(.of(Note.self))
        let raw = try hub.deliveries(.of(RawNotification.self, named: try NotificationName(validating: "test.note")))
        try hub.post(RawNotification(bytes: Array(#"{"text":"from the command line"}"#.utf8)), as: Note.name)
        try hub.post(Note(text: "typed"))
        var typedIterator = typed.makeAsyncIterator()
        #expect(await typedIterator.next() == Note(text: "from the command line"))
        #expect(await typedIterator.next() == Note(text: "typed"))
        var rawIterator = raw.makeAsyncIterator()
        #expect(await rawIterator.next()?.notification.bytes == Array(#"{"text":"from the command line"}"#.utf8))
        let second = try #require(await rawIterator.next())
        #expect(try Note(payload: second.notification.bytes) == Note(text: "typed"))
        // Raw and typed posts under one name share the sender's numbering.
        #expect(second.delivery.sequence == 2)
    }

    @Test("raw bytes that are not the observer's type are counted and reported, not delivered")
    func undecodableRaw() async throws {
        let hub = try makeHub()
        let typed = try hub.deliveries(.of(Note.self))
        try hub.post(RawNotification(bytes: Array("not json".utf8)), as: Note.name)
        try hub.post(Note(text: "fine"))
        var iterator = typed.makeAsyncIterator()
        let delivered = try #require(await iterator.next())
        #expect(delivered.notification == Note(text: "fine"))
        #expect(delivered.delivery.missed == 1)
        #expect(hub.metrics.undecodable == 1)
    }

    @Test("raw notifications cross processes' transports like typed ones")
    func rawOverSockets() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try socketHub(directory, endpoint: "cli")
        let observer = try socketHub(directory, endpoint: "app")
        let name = try NotificationName(validating: "com.example.reload")
        let raw = try observer.deliveries(.of(RawNotification.self, named: name))
        try poster.post(RawNotification(bytes: Array("now".utf8)), as: name)
        var iterator = raw.makeAsyncIterator()
        let delivered = try #require(await iterator.next())
        #expect(String(decoding: delivered.notification.bytes, as: UTF8.self) == "now")
        #expect(delivered.delivery.sender.endpoint == "cli")
        poster.close()
        observer.close()
    }
}
