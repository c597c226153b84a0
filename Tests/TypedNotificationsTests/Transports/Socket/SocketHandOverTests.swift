import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

/// An observer's buffer as the hand-over sees it: the center's answers to
/// `room` and `isBackedUp`, with a reader on another thread that may take
/// from it between any two questions.
private final class FakeBuffer: Sendable {
    let limit: Int
    let held = Locked(0)
    let observed = Locked(true)
    /// Run before the answer to `isBackedUp`: a reader taking meanwhile.
    let beforeBackedUp = Locked<(@Sendable () -> Void)?>(nil)
    let dropped = Locked(0)

    init(limit: Int) { self.limit = limit }

    var receiver: TransportReceiver {
        TransportReceiver(
            receive: { [self] _ in
                held.withLock { count in
                    if count == limit { dropped.withLock { $0 += 1 } } else { count += 1 }
                }
            },
            backedUp: { [self] _ in
                beforeBackedUp.withLock { $0 }?()
                return held.withLock { $0 } >= max(1, limit / 2)
            },
            room: { [self] _ in
                guard observed.withLock({ $0 }) else { return 0 }
                return limit - held.withLock { $0 }
            })
    }
}

@Suite("Socket hand-over: no more than the observers' buffers hold")
struct SocketHandOverTests {
    private func pings(_ count: Int) throws -> [TransportMessage] {
        let sender = try forgedSender(instance: 1)
        return try (0..<count).map { try forgedMessage(Ping(index: $0), from: sender, sequence: UInt64($0 + 1)) }
    }

    @Test(
        "a full buffer read down between the hand-over's two questions gets what it has room for, never a whole batch"
    )
    func bufferReadDownBetweenQuestions() throws {
        let buffer = FakeBuffer(limit: 8)
        buffer.held.withLock { $0 = 8 }
        let handOver = SocketHandOver(receiver: buffer.receiver, heldBytesPerName: 1 << 20)
        // The first round: full, nothing goes; 200 wait (a spool batch).
        handOver.startRound()
        for message in try pings(200) { handOver.handOver(.message(message)) }
        #expect(handOver.heldCount == 200)
        // The reader takes all but one after the room was asked, before
        // the hand-over asks whether the name is backed up.
        buffer.beforeBackedUp.withLock { $0 = { buffer.held.withLock { $0 = 1 } } }
        buffer.held.withLock { $0 = 8 }
        handOver.flush()
        #expect(buffer.dropped.withLock { $0 } == 0)
        #expect(buffer.held.withLock { $0 } == 8)
        #expect(handOver.heldCount == 193)
    }

    @Test("a name nobody observes any more is handed over whole, for the center to discard")
    func nobodyObserves() throws {
        let buffer = FakeBuffer(limit: 8)
        buffer.observed.withLock { $0 = false }
        let handOver = SocketHandOver(receiver: buffer.receiver, heldBytesPerName: 1 << 20)
        handOver.startRound()
        for message in try pings(50) { handOver.handOver(.message(message)) }
        #expect(handOver.heldCount == 0)
    }
}
