/// Gap detection for one notification name: the last sequence number heard
/// from each sender, in bounded memory.
///
/// A pure value: no locks, no clocks, no I/O. The hub keeps one per observed
/// name under its table lock.
///
/// - **Bounded**: at most `2 × capacity` senders are remembered. Senders are
///   kept in two generations; when the newer one fills, the older one is
///   forgotten and the newer one takes its place. A sender heard from again is
///   moved to the newer generation, so a sender that posts at least once while
///   `capacity` other senders post is never forgotten. A long-lived observer of
///   a name that thousands of short-lived processes post to stays flat.
/// - **Never traps**: sequence numbers come from other processes. A step
///   forward of `n` reports `n − 1` missed (saturating at `Int.max`); a step
///   back or a repeat (a restart of the numbering, a replay, a duplicate) starts
///   a new run and reports nothing.
/// - **Forgotten means unknown**: the first number heard from a sender, or from
///   one forgotten, reports nothing; nobody can know what came before it.
struct SenderSequenceTracker {
    /// Senders per generation in every hub.
    static let defaultCapacity = 1_024

    private var senders: Generations<NotificationSender, UInt64>

    init(capacity: Int = Self.defaultCapacity) {
        senders = Generations(capacity: capacity)
    }

    /// How many senders are remembered now.
    var count: Int { senders.count }

    /// Records that `sender` sent `sequence`; returns how many of its
    /// notifications went missing just before it.
    mutating func note(_ sequence: UInt64, from sender: NotificationSender) -> Int {
        guard let last = remember(sequence, from: sender), sequence > last else { return 0 }
        // sequence > last, so the subtraction cannot overflow.
        return Int(clamping: sequence - last - 1)
    }

    /// Records that `sender`'s notifications up to `sequence` were lost, as
    /// its own report of `count` says; returns how many of them were not
    /// already counted: everything after the last one heard, through
    /// `sequence`. A sender not remembered (or a step back) counts as `count`.
    mutating func skip(through sequence: UInt64, from sender: NotificationSender, reported count: Int) -> Int {
        guard let last = remember(sequence, from: sender), sequence >= last else { return count }
        return Int(clamping: sequence - last)
    }

    /// Records that `sender`'s next `count` notifications were lost, their
    /// numbers unknown: the last one heard moves `count` on, if the sender
    /// is remembered (else its next number starts a run, reporting nothing).
    mutating func advance(by count: Int, from sender: NotificationSender) {
        senders.modifyIfPresent(sender) { last in
            last = last.addingReportingOverflow(UInt64(max(0, count))).partialValue
        }
    }

    /// Makes `sequence` the last one heard from `sender`; returns the one
    /// before it, if the sender was remembered.
    private mutating func remember(_ sequence: UInt64, from sender: NotificationSender) -> UInt64? {
        senders.insert(sequence, for: sender)
    }
}
