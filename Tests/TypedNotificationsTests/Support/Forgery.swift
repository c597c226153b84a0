import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A sender identity in this process with a label and instance of the
/// forger's choosing, as another program of the same user could claim.
func forgedSender(endpoint: String = "forger", instance: UInt64) throws -> NotificationSender {
    try NotificationSender(processID: getpid(), userID: getuid(), endpoint: endpoint, instance: instance)
}

/// A complete, valid envelope of `value` with any sequence number: what a
/// forger who knows the wire format can write.
func forgedMessage<N: TypedNotification>(
    _ value: N,
    from sender: NotificationSender,
    sequence: UInt64
) throws -> TransportMessage {
    try forgedMessage(value, named: N.name, from: sender, sequence: sequence)
}

/// A complete, valid envelope of any payload under any name: bytes that
/// observers of `name` may not be able to decode.
func forgedMessage<Payload: DarwinPayload>(
    _ value: Payload,
    named name: NotificationName,
    from sender: NotificationSender,
    sequence: UInt64
) throws -> TransportMessage {
    let timestamp = NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
    let encoded = try NotificationEnvelope.encode(
        name: name, sender: sender, sequence: sequence, timestamp: timestamp
    ) { buffer in
        try value.encodePayload(into: &buffer)
    }
    return TransportMessage(
        name: name, sender: sender, sequence: sequence, timestamp: timestamp, payload: .encoded(encoded))
}

/// A cross-process transport whose received messages come from the test:
/// ``inject(_:)`` hands any message to the hub as if it had arrived from
/// another process. Posts go nowhere.
final class InjectingTransport: NotificationTransport {
    private let receiver = Locked<TransportReceiver?>(nil)

    var payloadForm: TransportPayloadForm { .encoded }

    func open(as sender: NotificationSender, receiver: TransportReceiver) throws(TypedNotificationError) {
        self.receiver.withLock { $0 = receiver }
    }

    func subscribe(to selector: NotificationSelector) throws(TypedNotificationError) {}
    func unsubscribe(from selector: NotificationSelector) {}
    func send(_ message: TransportMessage) throws(TypedNotificationError) {}
    func close() { receiver.withLock { $0 = nil } }

    /// Delivers `message` to the hub, as a transport's receive thread would.
    func inject(_ message: TransportMessage) {
        receiver.withLock { $0 }?.receive(message)
    }
}
