/// When each read in flight (a reader's or a quiet names' watch's) counts
/// as unanswered, so that one timer, at the earliest of them, catches a
/// server that stopped answering. The loop's, like the readers.
///
/// It replaces a watchdog that woke every quarter of the patience whether
/// or not anything was read: a healthy read answers within the block
/// timeout, before its deadline, and the read sent next moves the deadline
/// on, so the timer moves with it and an idle transport is woken by its
/// replies alone. The deadlines are a min-heap with one entry per read in
/// flight, moved in place when its owner sends again: a read costs
/// O(log n) here, however many readers block meanwhile.
final class ReadDeadlines {
    /// Who owns a deadline, by identity.
    typealias Owner = ObjectIdentifier

    /// The timer set for ``earliest``, by its number on the loop, and its deadline.
    var armed: (number: UInt64, deadline: UInt64)?
    private var heap: [(deadline: UInt64, owner: Owner)] = []
    private var positions: [Owner: Int] = [:]

    /// The earliest deadline, if any.
    var earliest: UInt64? { heap.first?.deadline }

    /// `owner`'s read is due by `deadline`, in place of any earlier one.
    func set(_ owner: Owner, to deadline: UInt64) {
        if let position = positions[owner] {
            let old = heap[position].deadline
            heap[position].deadline = deadline
            if deadline < old { up(from: position) } else { down(from: position) }
        } else {
            heap.append((deadline, owner))
            positions[owner] = heap.count - 1
            up(from: heap.count - 1)
        }
    }

    /// Forgets `owner`'s deadline.
    func remove(_ owner: Owner) {
        guard let position = positions.removeValue(forKey: owner) else { return }
        let last = heap.removeLast()
        guard position < heap.count else { return }
        heap[position] = last
        positions[last.owner] = position
        up(from: position)
        down(from: positions[last.owner] ?? position)
    }

    /// Takes every owner whose deadline is at or before `now`.
    func takeDue(now: UInt64) -> [Owner] {
        var due: [Owner] = []
        while let first = heap.first, first.deadline <= now {
            due.append(first.owner)
            remove(first.owner)
        }
        return due
    }

    private func up(from start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].deadline < heap[parent].deadline else { return }
            swapAt(child, parent)
            child = parent
        }
    }

    private func down(from start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < heap.count, heap[left].deadline < heap[smallest].deadline { smallest = left }
            if right < heap.count, heap[right].deadline < heap[smallest].deadline { smallest = right }
            guard smallest != parent else { return }
            swapAt(parent, smallest)
            parent = smallest
        }
    }

    private func swapAt(_ first: Int, _ second: Int) {
        heap.swapAt(first, second)
        positions[heap[first].owner] = first
        positions[heap[second].owner] = second
    }
}
