import TypedNotifications

/// What one name's reader decides, as a value: which commands its next read
/// sends, what each reply means, how many entries were trimmed before it read
/// them, when a durable group's counter must be raised, where it goes on after
/// a reconnect. No connection, no clock, no lock: ``StreamReader`` performs
/// what this decides on the transport's event loop, and the unit tests replay
/// every ordering of replies, trims and reconnects without a server.
struct StreamReaderStateMachine {
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
        /// `XINFO STREAM`, just before the read, which Redis runs right after
        /// with nothing between: the stream's counters as the read sees it.
        case streamInfo
        /// `XGROUP SETID … ENTRIESREAD`: the group's counter raised past the
        /// entries counted as trimmed, so a later run is not told again.
        case raiseCounter(position: StreamEntryID, entriesRead: Int)
        /// The read: `XREAD` after an ID, `XREADGROUP` of pending entries
        /// after an ID, or `XREADGROUP` of new ones (`>`).
        case read(Position)
    }

    /// What a reply answers, in the order the commands went out.
    enum Reply: Equatable {
        case asking
        case streamInfo
        case raiseCounter
        case read
    }

    /// What the reader does after a reply.
    enum Outcome: Equatable {
        /// Nothing yet: the reply answered a command before the read.
        case none
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
        /// Raise the group's counter to this, and wait for Redis to take it,
        /// before the entries are handed out (see ``counterRaised()``).
        var raiseCounter: Command?
        /// The entries in order; fields are `nil` for a pending entry since
        /// deleted. Every one is a redelivery, or none is.
        var entries: [(StreamEntryID, [RESPValue]?)] = []
        var isRedelivery = false

        static func == (left: Batch, right: Batch) -> Bool {
            left.missed == right.missed && left.raiseCounter == right.raiseCounter
                && left.isRedelivery == right.isRedelivery && left.entries.map(\.0) == right.entries.map(\.0)
        }
    }

    private(set) var position: Position
    /// The replies still to come, in the order their commands were sent.
    private(set) var expected: [Reply] = []
    /// A read was sent and its reply has not come.
    private(set) var awaitingReply = false
    /// How many entries were ever added to the stream up to where the reader
    /// is: up to its position for a plain observer, the group's entries-read
    /// for a durable identity. Trimming that removed more than this removed
    /// entries the reader never read. `nil` until known.
    private(set) var accounted: Int?
    /// How many entries the stream had lost to trimming (entries-added minus
    /// length) just before the read now waiting; `nil` when not known.
    private var removedBeforeRead: Int?
    /// The newest entry the group handed this reader with `>`: the group's position.
    private(set) var groupPosition: StreamEntryID?
    /// The group's entries-read in Redis is below ``accounted`` (trimmed
    /// entries were counted as missed): to be raised.
    private(set) var groupCounterBehind = false
    /// The newest entry handed out, so a durable reader that reconnects
    /// reads again only what came after it.
    private(set) var lastDelivered = StreamEntryID.zero
    /// The node an `ASK` sent reads to while the name's slot migrates there;
    /// `nil`: the node the slot map names.
    private(set) var askedNode: RedisNodeAddress?
    /// Whether the reader belongs to a durable identity (a consumer group).
    let isDurable: Bool

    init(position: Position, accounted: Int?, isDurable: Bool) {
        self.position = position
        self.accounted = accounted
        self.isDurable = isDurable
    }

    // MARK: Reading

    /// The commands of the next read, noted as expected; `nil` while a read
    /// is awaited. The stream's counters go with every read but a read of
    /// pending entries (which counts nothing); a counter raise that is
    /// still due goes with it.
    mutating func nextRead() -> [Command]? {
        guard !awaitingReply else { return nil }
        var commands: [Command] = []
        func add(_ command: Command, _ reply: Reply) {
            if askedNode != nil {
                commands.append(.asking)
                expected.append(.asking)
            }
            commands.append(command)
            expected.append(reply)
        }
        if case .pendingAfter = position {
        } else {
            add(.streamInfo, .streamInfo)
        }
        if let raise = dueCounterRaise() {
            add(raise, .raiseCounter)
            groupCounterBehind = false
        }
        add(.read(position), .read)
        awaitingReply = true
        return commands
    }

    /// The counter raise due now, if any.
    private func dueCounterRaise() -> Command? {
        guard isDurable, groupCounterBehind, let groupPosition, let accounted else { return nil }
        return .raiseCounter(position: groupPosition, entriesRead: accounted)
    }

    /// Redis took the raise of the batch that asked for it.
    mutating func counterRaised() {
        groupCounterBehind = false
    }

    // MARK: Replies

    /// Takes the next reply from the reader's connection. `host` is the
    /// connection's, for a redirection that names none.
    mutating func received(_ reply: RESPValue, host: String) -> Outcome {
        switch expected.isEmpty ? .read : expected.removeFirst() {
        case .asking, .raiseCounter:
            return .none
        case .streamInfo:
            removedBeforeRead = StreamSnapshot(reply)?.removed
            return .none
        case .read:
            break
        }
        awaitingReply = false
        if case .error(let text) = reply {
            if text.hasPrefix("NOGROUP") {
                // The group was deleted (or the server lost it): it is made
                // again, and this reader goes on from its pending entries.
                position = .pendingAfter(.zero)
                return .reconnect
            }
            if let redirection = Redirection(text, fallbackHost: host) {
                // `MOVED`: read from the new node; `ASK`: read from the
                // importing node until it owns the slot.
                askedNode = redirection.isPermanent ? nil : redirection.node
                return .redirect(redirection)
            }
            if Self.isTransient(text) { return .reconnect }
            return .fail(text)
        }
        return .deliver(batch(of: reply))
    }

    /// Errors a later attempt may not get.
    static func isTransient(_ text: String) -> Bool {
        ["TRYAGAIN", "CLUSTERDOWN", "LOADING", "UNBLOCKED", "MASTERDOWN"].contains { text.hasPrefix($0) }
    }

    /// The batch of a read reply, with the reader moved past it.
    private mutating func batch(of reply: RESPValue) -> Batch {
        var batch = Batch()
        batch.entries = Self.entries(in: reply)
        if case .pendingAfter = position {
            // Every pending entry was delivered again: now the new ones.
            if batch.entries.isEmpty { position = .new }
        } else {
            batch.missed = countTrimmed(before: batch.entries.count)
            if case .new = position, let last = batch.entries.last?.0 { groupPosition = last }
            batch.raiseCounter = dueCounterRaise()
        }
        if case .pendingAfter = position { batch.isRedelivery = true }
        for (id, _) in batch.entries {
            switch position {
            case .after: position = .after(id)
            case .pendingAfter: position = .pendingAfter(id)
            case .new: break
            }
            lastDelivered = max(lastDelivered, id)
        }
        return batch
    }

    /// The entries trimmed after the reader's position before it read them,
    /// with the count moved past them and the `read` entries of this reply
    /// (which start at the first entry left).
    private mutating func countTrimmed(before read: Int) -> Int {
        let removed = removedBeforeRead
        removedBeforeRead = nil
        guard let removed else {
            // No counters with this read (an error reply to XINFO): count on.
            if let accounted { self.accounted = accounted + read }
            return 0
        }
        let counted = accounted ?? removed
        let trimmed = removed - counted
        accounted = max(counted, removed) + read
        guard trimmed > 0 else { return 0 }
        if isDurable { groupCounterBehind = true }
        return trimmed
    }

    /// The `(id, fields)` of each entry of a read reply; fields are `nil` for
    /// a pending entry that was deleted from the stream.
    static func entries(in reply: RESPValue) -> [(StreamEntryID, [RESPValue]?)] {
        guard case .array(let streams?) = reply else { return [] }
        var result: [(StreamEntryID, [RESPValue]?)] = []
        for stream in streams {
            guard case .array(let pair?) = stream, pair.count == 2, case .array(let entries?) = pair[1] else {
                continue
            }
            for entry in entries {
                guard case .array(let parts?) = entry, parts.count == 2, case .bulkString(let idBytes?) = parts[0],
                    let id = StreamEntryID(idBytes)
                else { continue }
                if case .array(let fields) = parts[1] {
                    result.append((id, fields))
                } else {
                    result.append((id, nil))
                }
            }
        }
        return result
    }

    // MARK: Connections

    /// The connection was dropped (broken, redirected, or its read went
    /// unanswered too long): the replies it owed will not come. A durable
    /// reader reads again what it was handed and has not acknowledged.
    mutating func connectionLost() {
        expected.removeAll()
        removedBeforeRead = nil
        awaitingReply = false
        if case .new = position { position = .pendingAfter(lastDelivered) }
    }

    /// The group was (re)made with `entriesRead` as Redis's counter; the
    /// reader keeps its own count when it counted further and has not
    /// raised Redis's yet.
    mutating func groupReady(entriesRead: Int) {
        accounted = max(accounted ?? entriesRead, entriesRead)
    }
}
