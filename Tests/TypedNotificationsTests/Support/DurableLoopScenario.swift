import Testing
import TypedNotifications

/// The adversary of a durable `for await` loop, played the same way over
/// every transport that keeps posts: the loop's task is cancelled by another
/// task while the loop's body runs for the third of three posts (as
/// `tnotify watch --cursor` is, by SIGTERM, just after printing a line).
/// The body then runs to its end, so that delivery was handled. One more
/// post follows, and the identity's next run (`durable`, called twice) must
/// start with it, not marked as a redelivery: nothing the loop handled comes
/// again.
///
/// Returns the indexes the loop's body ran for, and the first delivery of
/// the next run (`nil` if none came within the safety net).
func playCancelWhileLoopBodyRuns<Durable: NotificationTransport, Posting: NotificationTransport>(
    durable: () throws -> NotificationHub<Durable>, poster: NotificationHub<Posting>
) async throws -> (handled: [Int], next: DeliveredNotification<Ping>?) {
    let first = try durable()
    defer { first.close() }
    let sequence = try first.deliveries(of: Ping.self)
    let inBody = Signal()
    let bodyMayEnd = Signal()
    let loop = Task {
        var handled: [Int] = []
        for await delivered in sequence {
            handled.append(delivered.notification.index)
            if delivered.notification.index == 2 {
                inBody.fire()
                await bodyMayEnd.wait()
            }
        }
        return handled
    }
    for index in 0..<3 { try poster.post(Ping(index: index)) }
    #expect(await inBody.wait(upTo: .seconds(30)))
    // Cancelled while the body runs; the body then finishes.
    loop.cancel()
    bodyMayEnd.fire()
    let handled = await loop.value
    try poster.post(Ping(index: 3))
    first.close()
    let second = try durable()
    defer { second.close() }
    let arrived = Collector<DeliveredNotification<Ping>>()
    let token = try second.addObserver(Ping.self) { ping, delivery in
        arrived.append(DeliveredNotification(notification: ping, delivery: delivery))
    }
    defer { token.cancel() }
    _ = await arrived.wait(forCount: 1, upTo: .seconds(30))
    return (handled, arrived.values.first)
}
