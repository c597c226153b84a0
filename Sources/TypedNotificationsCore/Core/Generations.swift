/// A map that remembers what was used recently, in bounded memory: at most
/// `2 × capacity` keys, kept in two generations.
///
/// A key written goes to the newer generation. When the newer one holds
/// more than `capacity` keys, the older one is forgotten and the newer one
/// takes its place, with only the key just written starting the next. So a
/// key written at least once while `capacity` others are is never
/// forgotten. A pure value: no locks, no clocks, no I/O.
struct Generations<Key: Hashable, Value> {
    private var newer: [Key: Value] = [:]
    private var older: [Key: Value] = [:]
    private let capacity: Int

    init(capacity: Int) {
        self.capacity = Swift.max(1, capacity)
    }

    /// How many keys are remembered now.
    var count: Int { newer.count + older.count }

    /// Every remembered value, in no order (a copy: for counting, not for
    /// a hot path).
    var values: [Value] { Array(newer.values) + Array(older.values) }

    /// The value of `key`, if it is remembered.
    subscript(key: Key) -> Value? {
        newer[key] ?? older[key]
    }

    /// Writes `value` under `key`, in the newer generation; returns the value
    /// it replaced.
    @discardableResult
    mutating func insert(_ value: Value, for key: Key) -> Value? {
        if let replaced = newer.updateValue(value, forKey: key) { return replaced }
        let replaced = older.removeValue(forKey: key)
        if newer.count > capacity {
            older = newer
            older.removeValue(forKey: key)
            newer = [key: value]
        }
        return replaced
    }

    /// Runs `body` on the value of `key` (or on `initial` for a key not
    /// remembered) and writes the result back in the newer generation.
    mutating func update<Result>(
        _ key: Key, default initial: @autoclosure () -> Value, _ body: (inout Value) -> Result
    ) -> Result {
        var value = remove(key) ?? initial()
        let result = body(&value)
        insert(value, for: key)
        return result
    }

    /// Changes the value of `key` in place, in whichever generation holds
    /// it; does nothing for a key not remembered.
    mutating func modifyIfPresent(_ key: Key, _ body: (inout Value) -> Void) {
        // Through the index: the value is changed where it is, not copied.
        if let index = newer.index(forKey: key) {
            body(&newer.values[index])
        } else if let index = older.index(forKey: key) {
            body(&older.values[index])
        }
    }

    /// Forgets `key`; returns its value.
    @discardableResult
    mutating func remove(_ key: Key) -> Value? {
        newer.removeValue(forKey: key) ?? older.removeValue(forKey: key)
    }

    /// Forgets every key `shouldForget` picks.
    mutating func removeAll(where shouldForget: (Key) -> Bool) {
        newer = newer.filter { !shouldForget($0.key) }
        older = older.filter { !shouldForget($0.key) }
    }
}
extension Generations: Sendable where Key: Sendable, Value: Sendable {}
