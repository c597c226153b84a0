@_spi(TransportAuthoring) import TypedNotifications

// The values a reader's state machine speaks in: where it reads from, the
// commands it sends, the replies it expects, and what a reply meant.
extension StreamReaderStateMachine {
    /// Where the next read starts.
    enum Position: Equatable {
        /// A plain observer: the entries after this ID.
        case after(StreamEntryID)
        /// A durable identity: its pending entries after this ID (delivered
        /// before, never acknowledged), each a redelivery.
        case pendingAfter(StreamEntryID)
        /// A durable identity: entries no one in its group has read yet.
        case new
    }

    /// One command of a read, in the order it is sent.
    enum Command: Equatable {
        /// `ASKING`, before a command to a node importing the slot.
        case asking
        /// `EXISTS`, alone, first on a new connection: a stream the server
        /// lost (a restart without persistence) or someone deleted is not
        /// asked for counters, which would fail.
        case exists
        /// `XINFO STREAM`, just before the read, which Redis runs right after
        /// with nothing between: the stream's counters as the read sees it.
        case streamInfo
        /// `XGROUP SETID … ENTRIESREAD`: the group's counter raised past the
        /// entries counted as trimmed, so a later run is not told again.
        case raiseCounter(position: StreamEntryID, entriesRead: Int)
        /// `XREVRANGE key <id> - COUNT 1`: the newest entry at or before the
        /// reader's last one, asked once after each new connection. When it
        /// is older than the last one read while older entries remain, the
        /// stream lost entries it had (a failover to a replica that lacked
        /// them), though new posts since may hide it from the counters.
        case lastKept(atOrBefore: StreamEntryID)
        /// The read: `XREAD` after an ID, `XREADGROUP` of pending entries
        /// after an ID, or `XREADGROUP` of new ones (`>`).
        case read(Position)
    }

    /// What a reply answers, in the order the commands went out.
    enum Reply: Equatable {
        case asking
        case exists
        case streamInfo
        case raiseCounter
        case lastKept
        case read
        /// `XINFO STREAM` just after a read that went without one and
        /// found entries (see ``nextRead()``).
        case confirmingInfo
    }

    /// What the reader does after a reply.
    enum Outcome: Equatable {
        /// Nothing yet: the reply answered a command before the read.
        case none
        /// Send these at once, without blocking, and wait for their reply:
        /// the entries just read are handed out once it came.
        case send([Command])
        /// Send the next read now (see ``nextRead()``).
        case readNow
        /// The read's entries, to hand out as the batch says.
        case deliver(Batch)
        /// The connection must be dropped and made again after a backoff.
        case reconnect
        /// The slot moved or is moving: learn where, then reconnect.
        case redirect(Redirection)
        /// Redis refused for good: fail the observers with this text.
        case fail(String)
    }

    /// One read's entries and what comes before them.
    struct Batch: Equatable {
        /// Entries trimmed after the reader's position before it read them:
        /// reported as missed before the entries.
        var missed = 0
        /// Whether ``missed`` is the whole count; `false` where the reader
        /// knows it may have lost entries it cannot count (see
        /// `countTrimmed(before:)`): at least ``missed``.
        var missedIsExact = true
        /// Entries the stream lost going back, as far as the reader knew of
        /// them (a failover to a replica that did not have them yet, or the
        /// stream deleted and made again). Counted, not reported as missed:
        /// those the reader had read it has; those it had not are reported
        /// as an inexact count (see ``missedIsExact``).
        var rewound = 0
        /// Raise the group's counter to this, and wait for Redis to take it,
        /// before the entries are handed out (see ``counterRaised()``).
        var raiseCounter: Command?
        /// The entries in order; fields are `nil` for a pending entry since
        /// deleted. Every one is a redelivery, or none is.
        var entries: [(StreamEntryID, [RESPValue]?)] = []
        var isRedelivery = false

        static func == (left: Batch, right: Batch) -> Bool {
            left.missed == right.missed && left.missedIsExact == right.missedIsExact && left.rewound == right.rewound
                && left.raiseCounter == right.raiseCounter
                && left.isRedelivery == right.isRedelivery && left.entries.map(\.0) == right.entries.map(\.0)
        }
    }
}
