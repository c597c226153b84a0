import Testing

@testable import TypedNotifications

@Suite("Per-endpoint send queue state machine")
struct PeerQueueStateMachineTests {
    @Test("send at once while nothing waits; once blocked, queue behind in order")
    func sendThenQueue() {
        var queue = PeerQueueStateMachine<Int>(limit: 10)
        let first = queue.post(1)
        #expect(first == .sendNow)
        // The send of 2 would block: it becomes first in line, and the endpoint must be watched.
        let second = queue.post(2)
        #expect(second == .sendNow)
        let mustWatch = queue.blocked(2)
        #expect(mustWatch)
        let third = queue.post(3)
        #expect(third == .queued)
        let watchAgain = queue.blocked(4)
        #expect(!watchAgain)  // already watched
        #expect(queue.next == 2)
        queue.removeNext()
        #expect(queue.next == 3)
        queue.removeNext()
        #expect(queue.next == 4)
        queue.removeNext()
        #expect(queue.isEmpty)
        let fifth = queue.post(5)
        #expect(fifth == .sendNow)
    }

    @Test("past the limit the oldest is dropped and counted")
    func dropsOldest() {
        var queue = PeerQueueStateMachine<Int>(limit: 3)
        _ = queue.blocked(0)
        var actions: [PeerQueueStateMachine<Int>.PostAction] = []
        for item in 1...4 { actions.append(queue.post(item)) }
        #expect(actions == [.queued, .queued, .queuedDroppingOldest, .queuedDroppingOldest])
        #expect(queue.dropped == 2)
        #expect(queue.count == 3)
        var sent: [Int] = []
        while let next = queue.next {
            sent.append(next)
            queue.removeNext()
        }
        #expect(sent == [2, 3, 4])
    }
}
