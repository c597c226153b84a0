import Testing

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

@Suite("TransportLifecycle: the lifecycle every transport shares, without threads")
struct TransportLifecycleTests {
    @Test("opens once, holding what open kept, and says what close must do")
    func openOnce() throws {
        var lifecycle = TransportLifecycle<Int>(kind: "test")
        #expect(throws: TypedNotificationError.self) { try lifecycle.opened(for: "post") }
        try lifecycle.open(7)
        #expect(lifecycle.isOpen)
        #expect(try lifecycle.opened(for: "post") == 7)
        do throws(TypedNotificationError) {
            try lifecycle.open(8)
            Issue.record("opened twice")
        } catch {
            #expect(error.code == .closed)
            #expect(error.message.contains("already opened"))
        }
        guard case .wasOpen(7) = lifecycle.close() else {
            Issue.record("close of an open lifecycle did not hand back what open kept")
            return
        }
        #expect(lifecycle.isClosed)
        guard case .alreadyClosed = lifecycle.close() else {
            Issue.record("a second close asked for work")
            return
        }
    }

    @Test("closed before it opened: nothing to join, and it never opens")
    func closedUnopened() {
        var lifecycle = TransportLifecycle<Void>(kind: "test")
        let closing = lifecycle.close()
        #expect(!closing.wasOpen)
        guard case .neverOpened = closing else {
            Issue.record("an unopened close was not told so")
            return
        }
        do throws(TypedNotificationError) {
            try lifecycle.open()
            Issue.record("opened after close")
        } catch {
            #expect(error.code == .closed)
        }
        do throws(TypedNotificationError) {
            _ = try lifecycle.opened(for: "subscribe")
            Issue.record("used after close")
        } catch {
            #expect(error.message == "subscribe on a test transport that is closed")
        }
    }
}
