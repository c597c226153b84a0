@_spi(TransportAuthoring) import TypedNotificationsCore

/// Hands what the socket and the spool bring to the center no faster than
/// its observers' buffers take it: the socket transport's backpressure.
///
/// A notification whose observers have no room left waits here, and so
/// does every later one of its name, in the order received; other names
/// go on. A name keeps at most ``heldBytesPerName`` waiting (envelopes'
/// bytes and a fixed cost each; over 100,000 small notifications, most of
/// what a default spool holds): beyond that its oldest waiting
/// notification goes, and its observers are told (`missed`, with the
/// sender and sequence, so nothing is counted twice). An observer that
/// stopped reading without cancelling costs its own name, not the hub's
/// others. Once ``heldBytesInAll`` wait, the endpoint receives nothing
/// more until some are handed over: datagrams stay in the socket's queue,
/// and once it is full posters put theirs in the spool, which is not taken
/// either. The loop looks again after 1 ms while anything waits; with
/// more names waiting than one look takes, it backs off to 64 ms while
/// nothing moves (see `SocketTransport.holdOff`). It does not look at all
/// otherwise.
///
/// Used only on the transport's event loop, through ``SocketReceiving``.
final class SocketHandOver {
    /// Something received, in the order it must reach the center.
    enum Item {
        case message(TransportMessage)
        case missed(MissedNotifications)
        case refused(MissedNotifications)

        var name: NotificationName {
            switch self {
            case .message(let message): message.name
            case .missed(let report), .refused(let report): report.name
            }
        }

        /// What keeping it costs, in bytes: its envelope and a fixed part.
        var weight: Int {
            guard case .message(let message) = self else { return 64 }
            if case .encoded(let encoded) = message.payload { return 160 + encoded.envelopeRange.count }
            return 160
        }
    }

    /// One name's waiting items, oldest first, and what they weigh.
    private struct Queue {
        var items = FIFOBuffer<Item>()
        var bytes = 0
        var count: Int { items.count }
    }

    /// The most one name keeps waiting for its observers, in bytes (see
    /// ``Item/weight``): 32 MiB unless the configuration says otherwise.
    let heldBytesPerName: Int
    /// The most kept in all before the endpoint stops receiving: four
    /// names' worth, 128 MiB.
    var heldBytesInAll: Int { 4 * heldBytesPerName }

    /// The most names one ``flush()`` looks at: a look costs a question to
    /// the center a name, and thousands of names whose observers stopped
    /// reading must not cost a core. They take turns, oldest first.
    static let namesPerFlush = 64

    let receiver: TransportReceiver
    private var held: [NotificationName: Queue] = [:]
    /// The names that wait, in turn from `turn` on (a name may be listed
    /// after its queue went: it is skipped).
    private var turns: [NotificationName] = []
    private var turn = 0
    /// Items waiting, of every name, and what they weigh.
    private(set) var heldCount = 0
    private var heldBytes = 0
    /// Whether the last ``flush()`` handed anything over.
    private(set) var lastFlushMoved = false
    /// What each name's observers can take in this round; see ``takes(_:)``.
    /// The round's first name is kept apart: most rounds have one name, and
    /// it costs no hashing then.
    private var firstRoom: (name: NotificationName, room: Int)?
    private var rooms: [NotificationName: Int] = [:]
    private var handedOver = 0

    init(receiver: TransportReceiver, heldBytesPerName: Int) {
        self.receiver = receiver
        self.heldBytesPerName = heldBytesPerName
    }

    /// Whether the endpoint may receive more: less than ``heldBytesInAll`` waits.
    var mayReceive: Bool { heldBytes < heldBytesInAll }

    /// Whether anything waits.
    var isHolding: Bool { heldCount > 0 }

    /// How many names have something waiting.
    var waitingNames: Int { held.count }

    /// Starts a round: what the observers' buffers hold is asked again.
    /// A round is one receive, one spool batch or one ``flush()``: no
    /// handler on this thread runs within it, and handlers elsewhere only
    /// make room, so what was asked at its start stays a safe bound.
    func startRound() {
        firstRoom = nil
        if !rooms.isEmpty { rooms.removeAll(keepingCapacity: true) }
        handedOver = 0
    }

    /// Hands `item` over now if nothing of its name waits and its
    /// observers have room; else it waits, behind its name's others.
    func handOver(_ item: Item) {
        let name = item.name
        if heldCount == 0 || held[name] == nil {
            guard !takes(item) else {
                deliver(item)
                return
            }
        }
        var queue = held.removeValue(forKey: name) ?? Queue()
        if queue.count == 0 { turns.append(name) }
        let weight = item.weight
        queue.items.append(item)
        queue.bytes += weight
        heldCount += 1
        heldBytes += weight
        while queue.bytes > heldBytesPerName, queue.count > 1 {
            // The oldest goes, and its observers are told at once, with
            // whose and which it was (a report takes no room): a gap alone
            // would say nothing when none of that sender's came before.
            guard let oldest = queue.items.removeFirst() else { break }
            queue.bytes -= oldest.weight
            heldCount -= 1
            heldBytes -= oldest.weight
            switch oldest {
            case .message(let message):
                deliver(
                    .missed(
                        MissedNotifications(
                            count: 1, name: message.name, sender: message.sender, lastSequence: message.sequence)))
            case .missed, .refused:
                deliver(oldest)
            }
        }
        held[name] = queue
    }

    /// Hands over what waits, each name's oldest first, as far as observers
    /// have room, looking at up to ``namesPerFlush`` names in turn.
    /// Returns whether nothing waits any more.
    @discardableResult
    func flush() -> Bool {
        lastFlushMoved = false
        guard isHolding else {
            turns.removeAll()
            turn = 0
            return true
        }
        startRound()
        var looked = 0
        while looked < Self.namesPerFlush, turn < turns.count {
            let name = turns[turn]
            turn += 1
            guard var queue = held.removeValue(forKey: name) else { continue }
            looked += 1
            while let next = queue.items.first, takes(next) {
                guard let item = queue.items.removeFirst() else { break }
                queue.bytes -= item.weight
                heldCount -= 1
                heldBytes -= item.weight
                deliver(item)
                lastFlushMoved = true
            }
            if queue.count > 0 {
                held[name] = queue
                turns.append(name)
            }
        }
        if turn > 1_024, turn * 2 > turns.count {
            turns.removeFirst(turn)
            turn = 0
        }
        return !isHolding
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
        if let first = firstRoom, first.name == name {
            room = first.room
        } else if let known = rooms[name] {
            room = known
        } else {
            switch receiver.room(for: name) {
            case nil: room = .max
            case 0: room = roomWhenFull(name)
            case let left?: room = left + handedOver
            }
            if firstRoom == nil { firstRoom = (name, room) } else { rooms[name] = room }
        }
        guard room == .max || room - handedOver > 0 else { return false }
        handedOver += 1
        return true
    }

    /// The room of a name whose observers had none when asked: none while
    /// one is backed up; else asked again, and unbounded only if it is
    /// still none, which then means that nobody observes the name.
    ///
    /// Asked in this order because a reader on another thread only ever
    /// empties a buffer during a round: a full one that was read down below
    /// backed up between the two questions has room by the second ask. The
    /// other way round (room 0, then not backed up, then unbounded) took a
    /// buffer read down meanwhile for a name nobody observes, and handed it
    /// a whole spool batch at once, which its policy then dropped.
    private func roomWhenFull(_ name: NotificationName) -> Int {
        guard !receiver.isBackedUp(name) else { return 0 }
        switch receiver.room(for: name) {
        case nil, 0?: return .max
        case let left?: return left + handedOver
        }
    }

    private func deliver(_ item: Item) {
        switch item {
        case .message(let message): receiver.receive(message)
        case .missed(let report): receiver.missed(report)
        case .refused(let report): receiver.refused(report)
        }
    }
}
