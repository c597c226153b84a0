@_spi(TransportAuthoring) import TypedNotificationsCore
/// What a post does about the endpoints whose sockets were full, as a pure
/// state machine.
///
/// A Unix datagram socket queues only a few datagrams, so a post that finds
/// an endpoint's socket full waits a moment for it to drain before it starts
/// a spool file for it (see ``Spool``): up to a deadline, it polls the full
/// sockets for room and retries those that have it; an endpoint still full
/// after a retry waits again; at the deadline, every endpoint still waiting
/// gets one last try, after which the post spools for those still full.
///
/// No clock, no sockets: the post reads the time, polls and sends, and
/// reports back. `Endpoint` is what the post knows of an endpoint (its
/// identifier and socket; a plain value in tests).
struct FullSocketWait<Endpoint> {
    /// The endpoints waiting for room, in the order they became full.
    private(set) var waiting: [Endpoint]
    /// When the wait ends, in monotonic nanoseconds.
    let deadline: UInt64

    init(_ full: [Endpoint], deadline: UInt64) {
        waiting = full
        self.deadline = deadline
    }

    enum Step {
        /// Wait until one of these sockets has room, at most this long, and
        /// report which have it with ``polled(writable:)``.
        case poll([Endpoint], milliseconds: Int32)
        /// The deadline passed: try these once more, and spool for those
        /// still full (they are no longer waiting).
        case lastTry([Endpoint])
        /// Nothing waits any more.
        case done
    }

    /// What to do at `now`.
    mutating func next(now: UInt64) -> Step {
        guard !waiting.isEmpty else { return .done }
        guard now < deadline else {
            defer { waiting = [] }
            return .lastTry(waiting)
        }
        // Rounded up: a poll never ends before the deadline it waits for.
        let milliseconds = (deadline - now + 999_999) / 1_000_000
        return .poll(waiting, milliseconds: Int32(clamping: milliseconds))
    }

    /// The poll of ``Step/poll(_:milliseconds:)`` said which sockets have
    /// room (`writable`, in the order polled; missing entries count as
    /// full). Returns the endpoints to retry now; report each that is still
    /// full with ``stillFull(_:)``.
    mutating func polled(writable: [Bool]) -> [Endpoint] {
        var ready: [Endpoint] = []
        var rest: [Endpoint] = []
        for (index, endpoint) in waiting.enumerated() {
            if index < writable.count && writable[index] {
                ready.append(endpoint)
            } else {
                rest.append(endpoint)
            }
        }
        waiting = rest
        return ready
    }

    /// A retried endpoint's socket was full again: it waits on.
    mutating func stillFull(_ endpoint: Endpoint) {
        waiting.append(endpoint)
    }
}
