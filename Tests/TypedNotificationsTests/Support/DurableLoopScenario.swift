import Testing
@_spi(TransportAuthoring) import TypedNotifications

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
    let sequence = try first.deliveries(.of(Ping.self))
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
    #expect(await inBody.wait(upTo: safetyNet))
    // Cancelled while the body runs; the body then finishes.
    loop.cancel()
    bodyMayEnd.fire()
    let handled = await loop.value
    try poster.post(Ping(index: 3))
    // A transport that failed meanwhile would explain a cursor not saved.
    #expect(first.failure == nil, "\(String(describing: first.failure))")
    // The cursor is saved once the close is done.
    first.close()
    await first.closed()
    let second = try durable()
    defer { second.close() }
    let arrived = Collector<DeliveredNotification<Ping>>()
    let token = try second.addObserver(.of(Ping.self)) { ping, delivery in
        arrived.append(DeliveredNotification(notification: ping, delivery: delivery))
    }
    defer { token.cancel() }
    _ = await arrived.wait(forCount: 1, upTo: safetyNet)
    return (handled, arrived.values.first)
}

/// What ``playCancelsAtRandomMoments(rounds:make:)`` saw.
struct CancelRounds {
    /// Posts made (indexes 0 to `posted - 1`).
    var posted = 0
    /// Deliveries of an index already handled, and how many of them were
    /// not marked as redeliveries.
    var repeated = 0
    var repeatedUnmarked = 0
    /// Indexes that never came (a later one came first).
    var skipped: [Int] = []
    /// The last index handled, in order.
    var last = -1
}

/// The adversary of a durable identity's `for await` loop that is stopped
/// often: `rounds` runs of the identity, each a new hub whose loop's task is
/// cancelled at a random moment (0 to 3 ms after a burst of 0 to 40 posts,
/// while another hub posts to the same name), with a body
/// that spins, yields or sleeps. A last run takes what is left. Across the
/// runs, each index must come in order, none skipped (posts returned, so a
/// skip is a loss) and none handled twice (a body that ran handled it).
func playCancelsAtRandomMoments<T: NotificationTransport>(
    rounds: Int, make: (_ identity: String?) throws -> T
) async throws -> CancelRounds {
    let poster = try NotificationHub(endpoint: "poster", transport: make(nil))
    defer { poster.close() }
    let other = try NotificationHub(endpoint: "other", transport: make(nil))
    defer { other.close() }
    var seen = CancelRounds()
    func tally(_ indexes: [(index: Int, redelivery: Bool)]) {
        for (index, redelivery) in indexes where index >= 0 {
            if index <= seen.last {
                seen.repeated += 1
                if !redelivery { seen.repeatedUnmarked += 1 }
                continue
            }
            seen.skipped += Array((seen.last + 1)..<index)
            seen.last = index
        }
    }
    for round in 0...rounds {
        let hub = try NotificationHub(endpoint: "durable", transport: make("w"))
        defer { hub.close() }
        let sequence = try hub.deliveries(.of(Ping.self), bufferingPolicy: .unbounded)
        let burst = round == rounds ? 0 : Int.random(in: 0...40)
        for _ in 0..<burst {
            try poster.post(Ping(index: seen.posted))
            seen.posted += 1
        }
        let posted = seen.posted
        let style = round % 3
        let loop = Task {
            var handled: [(index: Int, redelivery: Bool)] = []
            for await delivered in sequence {
                handled.append((delivered.notification.index, delivered.delivery.isRedelivery))
                // The last run takes everything.
                if round == rounds, delivered.notification.index == posted - 1 { break }
                switch style {
                case 0: for _ in 0..<Int.random(in: 0...2_000) { blackHole(round) }
                case 1: await Task.yield()
                default: try? await Task.sleep(for: .microseconds(Int.random(in: 0...300)))
                }
            }
            return handled
        }
        let noise = Task {
            for _ in 0..<Int.random(in: 0...10) { try? other.post(Ping(index: -1)) }
        }
        if round < rounds {
            try? await Task.sleep(for: .microseconds(Int.random(in: 0...3_000)))
            loop.cancel()
        } else if posted > 0, seen.last < posted - 1 {
            // A safety net for a last run that waits for what was lost.
            let safetyNet = Task {
                try await Task.sleep(for: .seconds(60))
                loop.cancel()
            }
            defer { safetyNet.cancel() }
            tally(await loop.value)
        } else {
            loop.cancel()
        }
        _ = await noise.value
        if round < rounds { tally(await loop.value) } else { _ = await loop.value }
        // The next round's hub starts where this one's close left the cursor.
        hub.close()
        await hub.closed()
    }
    return seen
}

/// Keeps a busy loop from being optimized away.
@inline(never) private func blackHole(_ value: Int) { _ = value }
