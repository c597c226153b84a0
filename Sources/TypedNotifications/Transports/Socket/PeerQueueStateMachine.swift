/// What a poster holds for one receiving endpoint that cannot take more right
/// now, as a pure state machine: no sockets, no locks.
///
/// A notification is sent at once while nothing waits; once a send would
/// block, later notifications queue behind it, in order, up to `limit`. Past
/// the limit the oldest is dropped and counted; the receiver sees the gap in
/// the sender's sequence numbers and reports it as missed.
struct PeerQueueStateMachine<Item> {
    private var pending = FIFOBuffer<Item>()
    private let limit: Int
    /// How many queued items were dropped to stay within the limit.
    private(set) var dropped = 0

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Items waiting to be sent.
    var count: Int { pending.count }
    var isEmpty: Bool { pending.isEmpty }

    enum PostAction: Equatable {
        /// Nothing is waiting: send now, and call ``blocked(_:)`` if the send would block.
        case sendNow
        /// Queued behind earlier items.
        case queued
        /// Queued after dropping the oldest item.
        case queuedDroppingOldest
    }

    mutating func post(_ item: Item) -> PostAction {
        guard !isEmpty else { return .sendNow }
        return enqueue(item)
    }

    /// A send of `item` (after ``post(_:)`` said `sendNow`) would block: keep it
    /// first in line. Returns whether the endpoint's writability must now be watched.
    mutating func blocked(_ item: Item) -> Bool {
        let wasEmpty = isEmpty
        _ = enqueue(item)
        return wasEmpty
    }

    /// The oldest waiting item, to try sending.
    var next: Item? { pending.first }

    /// The oldest waiting item was sent, or given up on.
    mutating func removeNext() {
        pending.removeFirst()
    }

    private mutating func enqueue(_ item: Item) -> PostAction {
        pending.append(item)
        guard count > limit else { return .queued }
        removeNext()
        dropped += 1
        return .queuedDroppingOldest
    }
}
