/// One center's posts on their way to its transport, as a pure state machine.
///
/// Receivers find lost notifications by gaps in each sender's sequence
/// numbers, so a center's posts of a name must reach the transport in the
/// order of their numbers, and a post that fails must give its number back.
/// This machine decides that without any lock held across a send: one thread
/// at a time, the *leader*, sends; posts that arrive meanwhile wait in line
/// and go out together in the leader's next batch (a group commit: the file
/// transport appends a batch under one lock with one write). Numbers are
/// given when a batch is formed, never earlier, so a batch that fails from
/// some post on takes back exactly the numbers of the posts it did not send.
///
/// A leader sends at most ``batchesPerLeader`` batches, its own first, then
/// hands the lead to the oldest waiting post's thread: no poster serves
/// others for long.
///
/// No locks, no threads, no I/O: the center runs it under a mutex and does
/// the sending and the waking. `Post` is what a post carries (its payload);
/// `Waiter` is what wakes a post's blocked thread (a plain value in tests).
struct OutboundStateMachine<Post, Waiter> {
    /// A post with its sequence number, ready to send.
    struct Stamped {
        var post: Post
        var name: NotificationName
        var sequence: UInt64
        /// `nil` for the leader's own post, which nobody waits for.
        var waiter: Waiter?
    }

    /// A post waiting in line.
    struct Waiting {
        var post: Post
        var name: NotificationName
        var waiter: Waiter
    }

    enum PostAction {
        /// The center is closed: nothing was queued.
        case closed
        /// Nothing is being sent: the caller leads and sends its post now,
        /// with this sequence number.
        case send(sequence: UInt64)
        /// Another thread is sending: the caller must wait in line (see
        /// ``enqueue(_:named:waiter:)``).
        case busy
    }

    enum EnqueueAction {
        /// The center is closed: nothing was queued.
        case closed
        /// The sender finished meanwhile: the caller leads after all, and
        /// sends its post now with this sequence number. Nothing was queued.
        case send(sequence: UInt64)
        /// Queued: the caller blocks until its waiter is woken, with its
        /// outcome or with the lead.
        case queued
    }

    /// What the leader does once a batch came back.
    enum Next {
        /// Nothing waits: the leader is done.
        case idle
        /// The leader sends this batch too.
        case send([Stamped])
        /// The leader is done; wake this waiter to lead (it then calls ``lead()``).
        case handOff(Waiter)
    }

    private enum Phase {
        case idle
        case sending(batchesLeft: Int)
        case handingOff
    }

    /// The most posts in one batch.
    let batchLimit: Int
    /// The most batches one leader sends before handing the lead on.
    let batchesPerLeader: Int

    private var phase = Phase.idle
    private(set) var isClosed = false
    // The last number given per name.
    private var sequences = SequenceCounters()
    private var waiting: [Waiting] = []
    // The batch being sent, by name and number, to take numbers back. The
    // first post apart, so that a batch of one allocates nothing.
    private var inFlightFirst: (name: NotificationName, sequence: UInt64)?
    private var inFlightRest: [(name: NotificationName, sequence: UInt64)] = []

    init(batchLimit: Int = 64, batchesPerLeader: Int = 4) {
        self.batchLimit = max(1, batchLimit)
        self.batchesPerLeader = max(1, batchesPerLeader)
    }

    /// Posts waiting in line.
    var waitingCount: Int { waiting.count }

    /// A post arrives. When nothing is being sent, its caller leads.
    mutating func post(named name: NotificationName) -> PostAction {
        guard !isClosed else { return .closed }
        guard case .idle = phase else { return .busy }
        return .send(sequence: startSending(name))
    }

    /// A post that found the sender busy gets in line.
    mutating func enqueue(_ post: Post, named name: NotificationName, waiter: Waiter) -> EnqueueAction {
        guard !isClosed else { return .closed }
        if case .idle = phase { return .send(sequence: startSending(name)) }
        waiting.append(Waiting(post: post, name: name, waiter: waiter))
        return .queued
    }

    /// The woken waiter takes the lead: its batch, its own post first.
    mutating func lead() -> [Stamped] {
        phase = .sending(batchesLeft: batchesPerLeader - 1)
        return takeBatch()
    }

    /// The leader's batch came back: its first `sent` posts count as sent;
    /// the post after them failed, and `unsent` (the posts after that one,
    /// ready to be numbered again) go back to the front of the line.
    mutating func finished(sent: Int, unsent: [Waiting] = []) -> Next {
        takeBackNumbers(sent: sent)
        inFlightFirst = nil
        inFlightRest.removeAll(keepingCapacity: true)
        if !unsent.isEmpty {
            waiting.insert(contentsOf: unsent, at: 0)
        }
        guard case .sending(let batchesLeft) = phase, let first = waiting.first else {
            phase = .idle
            return .idle
        }
        guard batchesLeft > 0 else {
            phase = .handingOff
            return .handOff(first.waiter)
        }
        phase = .sending(batchesLeft: batchesLeft - 1)
        return .send(takeBatch())
    }

    /// Later posts find the center closed; those in line are still sent
    /// (the transport decides what becomes of them).
    mutating func close() {
        isClosed = true
    }

    /// The caller of an idle center leads, with its own post as a batch of one.
    private mutating func startSending(_ name: NotificationName) -> UInt64 {
        phase = .sending(batchesLeft: batchesPerLeader - 1)
        let sequence = next(name)
        inFlightFirst = (name, sequence)
        return sequence
    }

    private mutating func next(_ name: NotificationName) -> UInt64 {
        sequences.next(name)
    }

    private mutating func takeBatch() -> [Stamped] {
        let count = min(batchLimit, waiting.count)
        var batch: [Stamped] = []
        batch.reserveCapacity(count)
        for entry in waiting[..<count] {
            let sequence = next(entry.name)
            if inFlightFirst == nil {
                inFlightFirst = (entry.name, sequence)
            } else {
                inFlightRest.append((entry.name, sequence))
            }
            batch.append(Stamped(post: entry.post, name: entry.name, sequence: sequence, waiter: entry.waiter))
        }
        waiting.removeFirst(count)
        return batch
    }

    /// Gives back the numbers of every post from `sent` on: each name's
    /// counter goes back to just before its first unsent post, which is
    /// above every number of it that was sent.
    private mutating func takeBackNumbers(sent: Int) {
        guard let first = inFlightFirst, sent < 1 + inFlightRest.count else { return }
        var restored: Set<NotificationName> = []
        for (index, entry) in ([first] + inFlightRest).enumerated() where index >= sent {
            if restored.insert(entry.name).inserted { sequences.restart(entry.name, at: entry.sequence) }
        }
    }
}

extension OutboundStateMachine.Stamped: Sendable where Post: Sendable, Waiter: Sendable {}
extension OutboundStateMachine.Waiting: Sendable where Post: Sendable, Waiter: Sendable {}

/// A sender's sequence numbers, per name: the one numbering every center
/// uses (a hub's posts in line, and each identity of the Foundation bridge).
/// The first number of a name is 1.
package struct SequenceCounters {
    // The last number given per name.
    private var last: [NotificationName: UInt64] = [:]

    /// No number given yet.
    package init() {}

    /// The next number of `name`.
    package mutating func next(_ name: NotificationName) -> UInt64 {
        // Counted in place: one hash of the name, not a lookup and a store.
        func increment(_ value: inout UInt64) -> UInt64 {
            value &+= 1
            return value
        }
        return increment(&last[name, default: 0])
    }

    /// Makes `sequence` the next number of `name` again: it was given and
    /// not used.
    package mutating func restart(_ name: NotificationName, at sequence: UInt64) {
        last[name] = sequence &- 1
    }
}
