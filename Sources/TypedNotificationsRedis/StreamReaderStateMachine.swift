@_spi(TransportAuthoring) import TypedNotifications

/// What one name's reader decides, as a value: which commands its next read
/// sends, what each reply means, how many entries were trimmed before it read
/// them, when a durable group's counter must be raised, where it goes on after
/// a reconnect. No connection, no clock, no lock: ``StreamReader`` performs
/// what this decides on the transport's event loop, and the unit tests replay
/// every ordering of replies, trims and reconnects without a server.
struct StreamReaderStateMachine {
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
    /// The stream's counters just before the read now waiting; `nil` when
    /// not known.
    private var snapshotBeforeRead: StreamSnapshot?
    /// The most entries the stream was ever seen to have had added: a later
    /// snapshot with fewer means the stream went backwards.
    private(set) var highestAdded: Int?
    /// The group position and count last recorded in Redis with
    /// `XGROUP SETID … ENTRIESREAD`, so the group's counter survives a
    /// failover (replicas do not keep what `XREADGROUP` counts).
    private(set) var recorded: (position: StreamEntryID, entriesRead: Int)?
    /// A `>` read was in flight when the connection was lost: Redis may
    /// have handed it entries this reader never saw, so the group's
    /// position is not known to be ``groupPosition`` until the pending
    /// entries were read again.
    private(set) var positionUncertain = false
    /// The next read asks whether the reader's last entry is still there:
    /// set by every new connection.
    private var checksKept = false
    /// The last read on this connection found nothing for a whole block:
    /// the next goes without the stream's counters, and is followed by
    /// them only if it finds entries (see ``nextRead()``).
    private var lastReadWasQuiet = false
    /// The read in flight went without the stream's counters.
    private var readWithoutCounters = false
    /// The next read on this connection is preceded by `EXISTS`, alone.
    private var asksExistence = false
    /// Entries the stream lost going back, found before a read, for the
    /// next batch's ``Batch/rewound``.
    private var rewoundBeforeRead = 0
    /// The reply of that read, with entries, until the counters that
    /// follow it came.
    private var unconfirmed: RESPValue?
    /// The stream's newest entry when its counters were last read.
    private var knownGenerated: StreamEntryID?
    /// No entry was seen in the stream yet, which was empty, or did not
    /// exist, when reading started: reads go without counters, even the
    /// first on a new connection, since there is nothing to have gone back
    /// from, and `XINFO` fails on a key that does not exist.
    private var streamMayBeMissing: Bool
    /// The answer to that, for the read now waiting: the last entry the
    /// reader read, and the newest the stream still has at or before it
    /// (`nil`: none).
    private var keptBeforeRead: (last: StreamEntryID, kept: StreamEntryID?)?
    /// The count (``accounted``) just after each of the newest entries read,
    /// the oldest first: what the count was where a stream that went back
    /// now ends. At most ``recentCountLimit``.
    private var recentCounts: [(id: StreamEntryID, accounted: Int)] = []
    /// How many entries' counts are kept: more than a replica lags its
    /// master by. A stream that went back further makes the count inexact.
    let recentCountLimit: Int
    /// After a read of new entries that found nothing: the entry after which
    /// the next new one will come, for a reader that waits for it without
    /// reading (see ``quieted()``); `nil` after any other read.
    private(set) var quietAfter: StreamEntryID?

    /// The reader stops reading until its stream has an entry after
    /// ``quietAfter``, and reads again later, perhaps on another connection
    /// to another node (a failover meanwhile): that read asks whether its
    /// last entry is still there and records the group's count again, as
    /// after a lost connection, but its position stands: the last read ended.
    mutating func quieted() {
        checksKept = true
        lastReadWasQuiet = false
        readWithoutCounters = false
        unconfirmed = nil
        recorded = nil
        snapshotBeforeRead = nil
        keptBeforeRead = nil
        expected.removeAll()
        awaitingReply = false
        quietAfter = nil
        forgetOlderCounts()
    }

    /// Keeps only the newest ``recentCountLimitWhileQuiet`` counts, for a
    /// reader that went quiet among thousands: a stream that goes back
    /// further while it is quiet is counted inexactly.
    mutating func forgetOlderCounts() {
        guard recentCounts.count > Self.recentCountLimitWhileQuiet else { return }
        recentCounts = Array(recentCounts.suffix(Self.recentCountLimitWhileQuiet))
    }

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

    /// `streamMayBeMissing`: reading starts at a stream that was empty, or
    /// whose key did not exist, when its counters were read; its reads go
    /// without counters until it holds an entry (see ``nextRead()``).
    init(
        position: Position, accounted: Int?, isDurable: Bool, recentCountLimit: Int = Self.recentCountLimitOfName,
        streamMayBeMissing: Bool = false
    ) {
        self.position = position
        self.accounted = accounted
        self.streamMayBeMissing = streamMayBeMissing
        self.isDurable = isDurable
        self.recentCountLimit = recentCountLimit
    }

    // MARK: Reading
    /// The commands of the next read, noted as expected; `nil` while a read
    /// is awaited. The stream's counters go with every read but a read of
    /// pending entries (which counts nothing) and one that follows a read
    /// that found nothing; a counter raise that is still due goes with it.
    ///
    /// A read that follows a quiet one goes alone, so an idle reader sends
    /// one command per block timeout, none failing (`XINFO` fails on a key
    /// that does not exist). Should it find entries, the counters are asked
    /// for at once after it, and its entries wait for them: the read began
    /// where the last counters were read, and whatever was added and
    /// trimmed between is counted from the counters after it (see
    /// `countTrimmed(read:after:)`). That costs the first read after a
    /// quiet block one round trip more; a read that follows one that found
    /// entries carries the counters before it, as ever.
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
        readWithoutCounters = false
        if case .pendingAfter = position {
        } else if streamMayBeMissing {
            // (Nothing to ask on a new connection either: no counters go.)
            asksExistence = false
            readWithoutCounters = true
        } else if asksExistence {
            add(.exists, .exists)
            awaitingReply = true
            return commands
        } else if lastReadWasQuiet && !checksKept {
            // (A stream never seen to hold an entry has nothing to have
            // gone back from, even after a new connection; its key may not
            // exist, and `XINFO` would fail.)
            readWithoutCounters = true
        } else {
            add(.streamInfo, .streamInfo)
            if checksKept, lastRead != .zero { add(.lastKept(atOrBefore: lastRead), .lastKept) }
            // Asked (or, with nothing read yet, nothing to ask).
            if lastRead == .zero { checksKept = false }
        }
        if let raise = dueCounterRaise() ?? dueCounterRecord() {
            add(raise, .raiseCounter)
            groupCounterBehind = false
            if case .raiseCounter(let position, let entriesRead) = raise { recorded = (position, entriesRead) }
        }
        add(.read(position), .read)
        awaitingReply = true
        return commands
    }

    /// Redis took the raise of the batch that asked for it.
    mutating func counterRaised() {
        groupCounterBehind = false
        if let groupPosition, let accounted { recorded = (groupPosition, accounted) }
    }

    // MARK: Replies
    /// Takes the next reply from the reader's connection. `host` is the
    /// connection's, for a redirection that names none.
    mutating func received(_ reply: RESPValue, host: String) -> Outcome {
        switch expected.isEmpty ? .read : expected.removeFirst() {
        case .asking, .raiseCounter:
            return .none
        case .exists:
            awaitingReply = false
            asksExistence = false
            if case .integer(0) = reply {
                // Gone (a server restarted without persistence, a `DEL`):
                // read without counters until it holds an entry, and what it
                // had is counted as lost going back, as an empty stream's
                // counters would say.
                streamMayBeMissing = true
                checksKept = false
                if let highest = highestAdded, highest > 0 {
                    rewoundBeforeRead += highest
                    if let counted = accounted, counted > 0 {
                        accounted = 0
                        if isDurable { groupCounterBehind = true }
                    }
                    highestAdded = 0
                }
            }
            return .readNow
        case .lastKept:
            checksKept = false
            // `XREVRANGE` answers with entries alone, not per stream.
            if case .array = reply {
                keptBeforeRead = (lastRead, Self.entries(in: .array([.array([.bulkString([]), reply])])).first?.0)
            }
            return .none
        case .streamInfo:
            snapshotBeforeRead = StreamSnapshot(reply)
            if let generated = snapshotBeforeRead?.lastGenerated { knownGenerated = generated }
            return .none
        case .confirmingInfo:
            awaitingReply = false
            guard let read = unconfirmed else { return .none }
            unconfirmed = nil
            let snapshot = StreamSnapshot(reply)
            if let generated = snapshot?.lastGenerated { knownGenerated = generated }
            if let snapshot, let highestAdded, snapshot.added < highestAdded, case .after = position {
                // The stream went back meanwhile (deleted and posted again,
                // say): its entries are read again, with the counters
                // before the read, which count a stream that went back.
                lastReadWasQuiet = false
                quietAfter = nil
                return .readNow
            }
            return .deliver(batch(of: read, confirmedBy: .some(snapshot)))
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
        if readWithoutCounters, !Self.entries(in: reply).isEmpty {
            // Found entries with no counters before it: they come once
            // the counters after it did.
            unconfirmed = reply
            awaitingReply = true
            var commands: [Command] = []
            if askedNode != nil {
                commands.append(.asking)
                expected.append(.asking)
            }
            commands.append(.streamInfo)
            expected.append(.confirmingInfo)
            return .send(commands)
        }
        return .deliver(batch(of: reply))
    }

    /// The batch of a read reply, with the reader moved past it. A read that
    /// went without counters before it comes with those read just after it
    /// (`confirmedBy`; `.some(nil)` when they could not be read).
    private mutating func batch(
        of reply: RESPValue, confirmedBy confirmation: StreamSnapshot?? = nil
    ) -> Batch {
        var batch = Batch()
        batch.entries = Self.entries(in: reply)
        if !batch.entries.isEmpty { streamMayBeMissing = false }
        batch.rewound = rewoundBeforeRead
        rewoundBeforeRead = 0
        let seen = snapshotBeforeRead?.lastGenerated ?? knownGenerated
        quietAfter = nil
        if case .pendingAfter = position {
            lastReadWasQuiet = false
        } else {
            lastReadWasQuiet = batch.entries.isEmpty
        }
        if case .pendingAfter = position {
            // Pending entries past the group's known position were handed to
            // a read whose reply was lost: the group counted them.
            if positionUncertain, let known = groupPosition, let counted = accounted {
                let beyond = batch.entries.filter { $0.0 > known }
                accounted = counted + beyond.count
                groupPosition = beyond.last?.0 ?? known
            }
            // Every pending entry was delivered again: now the new ones.
            if batch.entries.isEmpty {
                position = .new
                positionUncertain = false
            }
        } else {
            if let confirmation {
                (batch.missed, batch.missedIsExact) = countTrimmed(read: batch.entries.map(\.0), after: confirmation)
            } else {
                let rewound: Int
                (batch.missed, rewound, batch.missedIsExact) = countTrimmed(before: batch.entries.count)
                batch.rewound += rewound
            }
            if let counted = accounted { remember(batch.entries.map(\.0), endingAt: counted) }
            if case .new = position, let last = batch.entries.last?.0 { groupPosition = last }
            batch.raiseCounter = dueCounterRaise()
            if batch.entries.isEmpty, !positionUncertain {
                switch position {
                case .after(let id): quietAfter = id
                // Nothing new for the group: its position is at least the
                // stream's newest entry when the counters were read, just
                // before the read.
                case .new: quietAfter = seen.map { max($0, groupPosition ?? .zero, lastDelivered) }
                case .pendingAfter: break
                }
            }
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

    /// Keeps the count just after each of `ids`, read in order, the last
    /// one's being `count`: the newest ``recentCountLimit`` of them.
    private mutating func remember(_ ids: [StreamEntryID], endingAt count: Int) {
        guard !ids.isEmpty else { return }
        let kept = ids.suffix(recentCountLimit)
        let first = count - kept.count + 1
        recentCounts += kept.enumerated().map { (id: $0.element, accounted: first + $0.offset) }
        if recentCounts.count > recentCountLimit * 2 {
            recentCounts.removeFirst(recentCounts.count - recentCountLimit)
        }
    }

    /// The entries trimmed after the reader's position before it read them,
    /// and those the stream lost going backwards, with the count moved past
    /// them and the `read` entries of this reply (which start at the first
    /// entry left).
    ///
    /// The count is exact but where it cannot be: a durable group whose
    /// count Redis does not know (`entries-read` null) on a stream that lost
    /// entries; a stream that went back further than the counts kept here;
    /// and a stream that went back while the reader knew of entries it had
    /// not read yet, some of which may be among those lost. Then the trim
    /// is reported as at least what is known, possibly 0.
    private mutating func countTrimmed(before read: Int) -> (trimmed: Int, rewound: Int, exact: Bool) {
        let snapshot = snapshotBeforeRead
        snapshotBeforeRead = nil
        guard let snapshot else {
            // No counters with this read (an error reply to XINFO): count on.
            keptBeforeRead = nil
            if let accounted { self.accounted = accounted + read }
            return (0, 0, true)
        }
        var rewound = 0
        var exact = true
        // Entries the reader knew the stream had and had not read.
        let unread = max(0, (highestAdded ?? 0) - (accounted ?? highestAdded ?? 0))
        if let (last, kept) = keptBeforeRead, let kept, kept < last, let counted = accounted {
            // The reader's last entry is gone while older ones remain: the
            // stream went back to `kept`. Where it ends now, the count was
            // what it was just after `kept`, if that is recent enough to be
            // known; else at most what the stream counts now.
            let known = recentCounts.last { $0.id == kept }?.accounted
            let countAtKept = known ?? min(counted, snapshot.added)
            if countAtKept < counted {
                rewound = max(counted, highestAdded ?? 0) - countAtKept
                accounted = countAtKept
                if isDurable { groupCounterBehind = true }
            }
            exact = known != nil && unread == 0
        } else if let highestAdded, snapshot.added < highestAdded {
            // The stream went backwards. What it holds now is a prefix of
            // what it held (a replica lags its master), so where the reader
            // stands it has at most every entry it has: count from there.
            rewound = highestAdded - snapshot.added
            if let counted = accounted, counted > snapshot.added {
                accounted = snapshot.added
                if isDurable { groupCounterBehind = true }
            }
            exact = unread == 0
        }
        keptBeforeRead = nil
        highestAdded = rewound > 0 ? snapshot.added : max(highestAdded ?? 0, snapshot.added)
        let removed = snapshot.removed
        if accounted == nil && isDurable && removed > 0 { exact = false }
        let counted = accounted ?? removed
        let trimmed = removed - counted
        accounted = max(counted, removed) + read
        guard trimmed > 0 else { return (0, rewound, exact) }
        if isDurable { groupCounterBehind = true }
        return (trimmed, rewound, exact)
    }

    /// The entries trimmed after the reader's position before a read that
    /// went without counters before it, from the counters read just after
    /// it (`snapshot`), with the count moved past them and the read's
    /// entries (`read`, never empty).
    ///
    /// The read began where the counters were last read (``accounted``):
    /// whatever was added after the reader's position and trimmed before
    /// the read is older than the first entry read, so once the read, the
    /// stream's removed entries are those, those the reader had, and those
    /// of the read trimmed since (the ones older than the stream's first
    /// entry now). Should even the read's last entry be gone (trimmed
    /// within a round trip), entries trimmed after it count here too: the
    /// total stays exact, reported before the read rather than after.
    /// Without counters (a server before Redis 7) the count is not known:
    /// 0, counted on from the next counters; when the stream went back
    /// meanwhile, 0 and inexact.
    private mutating func countTrimmed(read: [StreamEntryID], after snapshot: StreamSnapshot?) -> (Int, Bool) {
        snapshotBeforeRead = nil
        keptBeforeRead = nil
        guard let snapshot, let counted = accounted, let first = read.first, let last = read.last else {
            if let accounted { self.accounted = accounted + read.count }
            return (0, true)
        }
        if let highestAdded, snapshot.added < highestAdded {
            // Went back between the two (a plain reader reads again instead,
            // see `received`): the reader has at most what the stream
            // counts now, and what it lost is not known.
            self.highestAdded = snapshot.added
            accounted = min(counted + read.count, snapshot.added)
            if isDurable { groupCounterBehind = true }
            return (0, false)
        }
        highestAdded = max(highestAdded ?? 0, snapshot.added)
        let trimmedOfRead: Int
        if let oldest = snapshot.firstEntry, oldest <= first {
            trimmedOfRead = 0
        } else if let oldest = snapshot.firstEntry, oldest <= last {
            trimmedOfRead = read.count(where: { $0 < oldest })
        } else {
            trimmedOfRead = read.count
        }
        let trimmed = max(0, snapshot.removed - counted - trimmedOfRead)
        accounted = counted + trimmed + read.count
        if trimmed > 0, isDurable { groupCounterBehind = true }
        return (trimmed, true)
    }

    // MARK: Connections
    /// The connection was dropped (broken, redirected, or its read went
    /// unanswered too long): the replies it owed will not come. A durable
    /// reader reads again what it was handed and has not acknowledged.
    mutating func connectionLost() {
        // A read whose entries wait for counters took them from the group too.
        if awaitingReply, case .new = position, expected.contains(.read) || unconfirmed != nil {
            positionUncertain = true
        }
        unconfirmed = nil
        lastReadWasQuiet = false
        readWithoutCounters = false
        asksExistence = true
        // The first read on the next connection records the group's count
        // again (the node may be a promoted replica that lacks it) and asks
        // whether the reader's last entry is still there.
        recorded = nil
        checksKept = true
        expected.removeAll()
        snapshotBeforeRead = nil
        keptBeforeRead = nil
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
