/// Who subscribed to what, for a transport that routes posts itself: each
/// subscriber under a key, subscribed to names and namespaces.
///
/// A lookup by a post's name finds every subscriber whose selectors match
/// it, each once, at a cost of the name's depth however many namespaces
/// are subscribed; while none is, it costs one dictionary lookup and
/// allocates nothing.
@_spi(TransportAuthoring) public struct SelectorTable<Key: Hashable, Subscriber> {
    /// One subscriber under its key.
    @_spi(TransportAuthoring) public struct Entry {
        /// The key the subscriber was added under.
        @_spi(TransportAuthoring) public let key: Key
        /// The subscriber.
        @_spi(TransportAuthoring) public let subscriber: Subscriber
    }

    private var entries: [NotificationSelector: [Entry]] = [:]
    private var namespaces = 0

    /// An empty table.
    @_spi(TransportAuthoring) public init() {}

    /// Whether nobody is subscribed to anything.
    @_spi(TransportAuthoring) public var isEmpty: Bool { entries.isEmpty }

    /// Subscribes `subscriber`, under `key`, to `selector`; a second time
    /// under the same key changes nothing.
    @_spi(TransportAuthoring) public mutating func add(
        _ subscriber: Subscriber, key: Key, to selector: NotificationSelector
    ) {
        var list = entries[selector] ?? []
        guard !list.contains(where: { $0.key == key }) else { return }
        list.append(Entry(key: key, subscriber: subscriber))
        if list.count == 1, case .namespace = selector { namespaces += 1 }
        entries[selector] = list
    }

    /// Unsubscribes the subscriber under `key` from `selector`.
    @_spi(TransportAuthoring) public mutating func remove(_ key: Key, from selector: NotificationSelector) {
        guard var list = entries[selector] else { return }
        list.removeAll { $0.key == key }
        if list.isEmpty {
            entries[selector] = nil
            if case .namespace = selector { namespaces -= 1 }
        } else {
            entries[selector] = list
        }
    }

    /// Unsubscribes the subscriber under `key` from everything.
    @_spi(TransportAuthoring) public mutating func removeEverywhere(_ key: Key) {
        for selector in Array(entries.keys) { remove(key, from: selector) }
    }

    /// Every subscriber a post of `name` goes to, each once: those
    /// subscribed to the name first, then those of each namespace that
    /// contains it, shortest first.
    @_spi(TransportAuthoring) public func subscribers(of name: NotificationName) -> [Entry] {
        let named = entries[.name(name)] ?? []
        guard namespaces > 0 else { return named }
        var found = named
        var keys = Set(named.map(\.key))
        NotificationNamespace.forEach(containing: name) { namespace in
            for entry in entries[.namespace(namespace)] ?? [] where keys.insert(entry.key).inserted {
                found.append(entry)
            }
        }
        return found
    }
}

extension SelectorTable: Sendable where Key: Sendable, Subscriber: Sendable {}
extension SelectorTable.Entry: Sendable where Key: Sendable, Subscriber: Sendable {}
