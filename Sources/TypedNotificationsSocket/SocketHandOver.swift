@_spi(TransportAuthoring) import TypedNotificationsCore

/// Hands what the socket and the spool bring to the center no faster than
/// its observers' buffers take it: the socket transport's backpressure.
///
/// A notification whose observers have no room left waits here, and so
/// does everything received after it, in the order received (a poster's
/// posts, of any name, keep their order). While anything waits, the
/// endpoint receives nothing more: datagrams stay in the socket's queue,
/// and once it is full posters put theirs in the spool, which is not taken
/// either. So a handler that is slow, or blocked for seconds, makes its
/// posters spool instead of making its buffer drop; only a spool at its
/// limit drops, and that is counted, as before. The loop looks again every
/// millisecond while anything waits (see `SocketTransport.holdOff`), and
/// not at all otherwise.
///
/// Used only on the transport's event loop, through ``SocketReceiving``.
final class SocketHandOver {
    /// Something received, in the order it must reach the center.
    enum Item {
        case message(TransportMessage)
        case missed(MissedNotifications)
        case refused(MissedNotifications)
    }

    let receiver: TransportReceiver
    /// Items not handed over yet, from `head` on.
    private var waiting: [Item] = []
    private var head = 0
    /// What each name's observers can take in this round; see ``takes(_:)``.
    private var rooms: [NotificationName: Int] = [:]
    private var handedOver = 0

    init(receiver: TransportReceiver) {
        self.receiver = receiver
    }

    /// Whether nothing waits, so receiving may go on.
    var isFlowing: Bool { head == waiting.count }

    /// How many items wait (for tests of the transport and its figures).
    var waitingCount: Int { waiting.count - head }

    /// Starts a round: what the observers' buffers hold is asked again.
    /// A round is one receive, one spool batch or one ``flush()``: no
    /// handler on this thread runs within it, and handlers elsewhere only
    /// make room, so what was asked at its start stays a safe bound.
    func startRound() {
        rooms.removeAll(keepingCapacity: true)
        handedOver = 0
    }

    /// Hands `item` over now if nothing waits and its observers have room;
    /// else it waits, behind what waits already.
    func handOver(_ item: Item) {
        guard isFlowing, takes(item) else {
            waiting.append(item)
            return
        }
        deliver(item)
    }

    /// Hands over what waits, oldest first, while observers have room.
    /// Returns whether nothing waits any more.
    @discardableResult
    func flush() -> Bool {
        guard !isFlowing else { return true }
        startRound()
        while head < waiting.count, takes(waiting[head]) {
            let item = waiting[head]
            head += 1
            deliver(item)
        }
        if head == waiting.count {
            waiting.removeAll(keepingCapacity: waiting.capacity <= 1_024)
            head = 0
        } else if head > 1_024, head * 2 > waiting.count {
            waiting.removeFirst(head)
            head = 0
        }
        return isFlowing
    }

    /// Whether `item` may be handed over now. Reports take no buffer
    /// space. A name's room is asked once a round (nil: no observer's
    /// buffer drops; 0 with nobody backed up: nobody observes it, and the
    /// center discards it at once), then every notification handed over in
    /// the round, of any name, counts against it: a namespace observer's
    /// buffer takes many names' notifications, so the bound is kept even
    /// then, and is only ever too careful, never too generous.
    private func takes(_ item: Item) -> Bool {
        guard case .message(let message) = item else { return true }
        let name = message.name
        let room: Int
        if let known = rooms[name] {
            room = known
        } else {
            switch receiver.room(for: name) {
            case nil: room = .max
            case 0 where !receiver.isBackedUp(name): room = .max
            case let left?: room = left + handedOver
            }
            rooms[name] = room
        }
        guard room == .max || room - handedOver > 0 else { return false }
        handedOver += 1
        return true
    }

    private func deliver(_ item: Item) {
        switch item {
        case .message(let message): receiver.receive(message)
        case .missed(let report): receiver.missed(report)
        case .refused(let report): receiver.refused(report)
        }
    }
}
