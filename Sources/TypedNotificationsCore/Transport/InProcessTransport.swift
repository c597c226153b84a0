@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Hands notifications between centers in one process, with no encoding.
///
/// Centers whose transports share an ``InProcessBus`` see each other's posts;
/// by default they all use ``InProcessBus/shared``, as code using Foundation's
/// `NotificationCenter.default` does. Give a center a bus of its own to keep it
/// apart (tests do).
public final class InProcessTransport: NotificationTransport {
    /// The bus this transport posts to and receives from.
    package let bus: InProcessBus

    // Open, it holds the id under which this transport's receiver is
    // registered on the bus. Only the lifecycle of the transport skeleton
    // (TransportCore): no thread, nothing to wait for, nothing to encode; a
    // post reaches the other centers' receivers on the poster's thread.
    private let state = Locked(TransportLifecycle<UInt64>(kind: "in-process"))

    /// Creates a transport on `bus`.
    public init(bus: InProcessBus = .shared) {
        self.bus = bus
    }

    /// In-process transports hand values over as they are.
    @_spi(TransportAuthoring) public var payloadForm: TransportPayloadForm { .value }

    /// Attaches the receiver to the bus.
    @_spi(TransportAuthoring) public func open(as sender: NotificationSender, receiver: TransportReceiver)
        throws(TypedNotificationError)
    {
        // Attached first, subscribed to nothing yet: if the transport was
        // opened or closed before, it is detached again.
        let id = bus.attach(receiver)
        do {
            try state.withLock { (state: inout TransportLifecycle<UInt64>) throws(TypedNotificationError) in
                try state.open(id)
            }
        } catch {
            bus.detach(id)
            throw error
        }
    }

    /// Routes messages of the name or namespace `selector` says on the bus
    /// to this transport's receiver.
    @_spi(TransportAuthoring) public func subscribe(to selector: NotificationSelector) throws(TypedNotificationError) {
        bus.subscribe(try openID(for: "subscribe"), to: selector)
    }

    /// Stops routing messages that only `selector` selected to this
    /// transport's receiver.
    @_spi(TransportAuthoring) public func unsubscribe(from selector: NotificationSelector) {
        guard let id = try? openID(for: "unsubscribe") else { return }
        bus.unsubscribe(id, from: selector)
    }

    /// Hands the message to every receiver on the bus subscribed to its name.
    @_spi(TransportAuthoring) public func send(_ message: TransportMessage) throws(TypedNotificationError) {
        _ = try openID(for: "post")
        bus.deliver(message)
    }

    /// Detaches from the bus.
    @_spi(TransportAuthoring) public func close() {
        if case .wasOpen(let id) = state.withLock({ $0.close() }) { bus.detach(id) }
    }

    private func openID(for operation: String) throws(TypedNotificationError) -> UInt64 {
        try state.withLock { (state: inout TransportLifecycle<UInt64>) throws(TypedNotificationError) -> UInt64 in
            try state.opened(for: operation)
        }
    }
}

/// A process-local switchboard that in-process transports share.
///
/// Delivery looks up one immutable array of receivers per name; subscription
/// changes replace it, so a send never holds the bus's lock while it calls
/// out.
public final class InProcessBus: Sendable {
    /// The bus every ``InProcessTransport`` uses unless given another.
    public static let shared = InProcessBus()

    // Protects the receiver table. Guarantees that a subscribe that returned is
    // seen by every later deliver (registration is immediate).
    private let table = Locked<Table>(Table())

    private struct Table {
        var nextID: UInt64 = 1
        var receivers: [UInt64: TransportReceiver] = [:]
        var subscriptions = SelectorTable<UInt64, TransportReceiver>()
    }

    /// Creates a bus of its own, apart from ``shared``.
    public init() {}

    func attach(_ receiver: TransportReceiver) -> UInt64 {
        table.withLock { table in
            let id = table.nextID
            table.nextID += 1
            table.receivers[id] = receiver
            return id
        }
    }

    func detach(_ id: UInt64) {
        table.withLock { table in
            table.receivers[id] = nil
            table.subscriptions.removeEverywhere(id)
        }
    }

    func subscribe(_ id: UInt64, to selector: NotificationSelector) {
        table.withLock { table in
            guard let receiver = table.receivers[id] else { return }
            table.subscriptions.add(receiver, key: id, to: selector)
        }
    }

    func unsubscribe(_ id: UInt64, from selector: NotificationSelector) {
        table.withLock { $0.subscriptions.remove(id, from: selector) }
    }

    func deliver(_ message: TransportMessage) {
        for entry in table.withLock({ $0.subscriptions.subscribers(of: message.name) }) {
            entry.subscriber.receive(message)
        }
    }
}
