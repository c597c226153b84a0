/// A first-in, first-out array: appends at the back, removes from the front
/// in constant amortized time, and compacts so a long-lived buffer that is
/// never empty does not grow without bound.
package struct FIFOBuffer<Element> {
    private var storage: [Element] = []
    // Index of the oldest live element; those before it were removed.
    private var head = 0

    /// An empty buffer.
    package init() {}

    package var count: Int { storage.count - head }
    package var isEmpty: Bool { count == 0 }
    package var first: Element? { isEmpty ? nil : storage[head] }

    package mutating func append(_ element: Element) {
        storage.append(element)
    }

    /// Changes the element `offset` places after the oldest, in place.
    package mutating func update(at offset: Int, _ body: (inout Element) -> Void) {
        guard offset >= 0, offset < count else { return }
        body(&storage[head + offset])
    }

    /// Changes the oldest element in place.
    package mutating func updateFirst(_ body: (inout Element) -> Void) {
        guard !isEmpty else { return }
        body(&storage[head])
    }

    @discardableResult
    package mutating func removeFirst() -> Element? {
        guard !isEmpty else { return nil }
        let element = storage[head]
        advanceHead(by: 1)
        return element
    }

    /// Moves at most `limit` elements, oldest first, to the end of `batch`.
    package mutating func move(upTo limit: Int, into batch: inout [Element]) {
        guard limit < count else { return moveAll(into: &batch) }
        guard limit > 0 else { return }
        batch.append(contentsOf: storage[head..<(head + limit)])
        advanceHead(by: limit)
    }

    // Forgets the `n` oldest elements, compacting once the dead prefix is at
    // least half the storage so memory follows the live count.
    private mutating func advanceHead(by n: Int) {
        head += n
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64 && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
    }

    /// Moves every element, oldest first, to the end of `batch`. When `batch`
    /// is empty the storages are swapped, so the consumer's drained array is
    /// reused and nothing is copied.
    package mutating func moveAll(into batch: inout [Element]) {
        if head == 0 && batch.isEmpty {
            swap(&storage, &batch)
        } else {
            batch.append(contentsOf: storage[head...])
            storage.removeAll(keepingCapacity: true)
            head = 0
        }
    }

    package mutating func removeAll() {
        storage = []
        head = 0
    }
}

extension FIFOBuffer: Sendable where Element: Sendable {}
