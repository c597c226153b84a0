import Testing

@testable import TypedNotificationsRedis

/// The Redis reader's decisions, replayed reply by reply without a server:
/// each ordering that a fix on main was once about, found there "once in 20
/// to 65 runs", happens here every time.
@Suite("Redis stream reader: reads, trims, counter raises and reconnects, as a state machine")
struct StreamReaderStateMachineTests {
    private typealias Machine = StreamReaderStateMachine

    private static func id(_ milliseconds: UInt64, _ sequence: UInt64 = 0) -> StreamEntryID {
        StreamEntryID(milliseconds: milliseconds, sequence: sequence)
    }

    /// An `XINFO STREAM` reply: `added` entries ever, `length` left.
    private static func info(added: Int, length: Int) -> RESPValue {
        .array([
            .bulkString(Array("length".utf8)), .integer(Int64(length)),
            .bulkString(Array("entries-added".utf8)), .integer(Int64(added)),
        ])
    }

    /// A read reply holding entries with these IDs (each with one field).
    private static func read(_ ids: [StreamEntryID]) -> RESPValue {
        let entries: [RESPValue] = ids.map { id in
            .array([
                .bulkString(Array(id.description.utf8)),
                .array([.bulkString([UInt8(ascii: "e")]), .bulkString([1, 2, 3])]),
            ])
        }
        return .array([.array([.bulkString(Array("tn:{x}".utf8)), .array(entries)])])
    }

    /// Sends the next read and answers it with `replies`, in order; returns the last outcome.
    private static func round(_ machine: inout Machine, _ replies: [RESPValue]) -> Machine.Outcome {
        var outcome = Machine.Outcome.none
        for reply in replies { outcome = machine.received(reply, host: "127.0.0.1") }
        return outcome
    }

    /// A new connection's first question, whether the stream exists (after
    /// `ASKING` where the machine was asked to), answered yes.
    private static func existsAnswered(_ machine: inout Machine) {
        let asked = machine.nextRead()
        #expect(asked == [.exists] || asked == [.asking, .exists])
        if asked?.first == .asking { #expect(machine.received(.simpleString("OK"), host: "h") == .none) }
        #expect(machine.received(.integer(1), host: "h") == .readNow)
    }

    private static func batch(_ outcome: Machine.Outcome) -> Machine.Batch? {
        if case .deliver(let batch) = outcome { return batch }
        return nil
    }

    @Test("a plain reader: each read asks for the stream's counters first, and moves past what it read")
    func plainReads() {
        var machine = Machine(position: .after(Self.id(5)), accounted: 5, isDurable: false)
        #expect(machine.nextRead() == [.streamInfo, .read(.after(Self.id(5)))])
        // A read is awaited: no second one goes out.
        #expect(machine.nextRead() == nil)
        let outcome = Self.round(&machine, [Self.info(added: 7, length: 7), Self.read([Self.id(6), Self.id(7)])])
        #expect(Self.batch(outcome) == Machine.Batch(missed: 0, entries: [(Self.id(6), nil), (Self.id(7), nil)]))
        #expect(machine.position == .after(Self.id(7)))
        #expect(machine.accounted == 7)
        #expect(machine.nextRead() == [.streamInfo, .read(.after(Self.id(7)))])
    }

    @Test("entries trimmed before the reader read them are missed, counted once, from the snapshot just before")
    func trimCountedOnce() throws {
        // Started with 10 entries ever added; 30 more are posted and 25 of all 40 trimmed.
        var machine = Machine(position: .after(Self.id(10)), accounted: 10, isDurable: false)
        _ = machine.nextRead()
        let first = try #require(
            Self.batch(
                Self.round(&machine, [Self.info(added: 40, length: 15), Self.read([Self.id(26), Self.id(27)])]))
        )
        // Entries 11 to 25 went before the reader got to them: 15 missed.
        #expect(first.missed == 15)
        #expect(machine.accounted == 27)
        // The next read sees the same trim: nothing is counted twice.
        _ = machine.nextRead()
        let second = try #require(
            Self.batch(Self.round(&machine, [Self.info(added: 40, length: 15), Self.read([Self.id(28)])])))
        #expect(second.missed == 0)
        #expect(machine.accounted == 28)
    }

    @Test("a read whose counters could not be read counts on from the reader's own count")
    func counterlessRead() throws {
        var machine = Machine(position: .after(Self.id(3)), accounted: 3, isDurable: false)
        _ = machine.nextRead()
        let batch = try #require(
            Self.batch(Self.round(&machine, [.error("ERR unknown command"), Self.read([Self.id(4), Self.id(5)])])))
        #expect(batch.missed == 0)
        #expect(machine.accounted == 5)
    }

    @Test("a durable trim: the counter raise comes before the entries; if Redis does not take it, with the next read")
    func counterRaiseOrdering() throws {
        var machine = Machine(position: .new, accounted: 0, isDurable: true)
        #expect(machine.nextRead() == [.streamInfo, .read(.new)])
        let batch = try #require(
            Self.batch(
                Self.round(&machine, [Self.info(added: 50, length: 20), Self.read([Self.id(31), Self.id(32)])]))
        )
        #expect(batch.missed == 30)
        // The raise is in the batch, so the driver runs it before handing the entries out.
        #expect(batch.raiseCounter == .raiseCounter(position: Self.id(32), entriesRead: 32))
        #expect(machine.groupCounterBehind)
        // Redis did not take it (the connection broke): it rides the next read, between counters and read.
        #expect(
            machine.nextRead() == [.streamInfo, .raiseCounter(position: Self.id(32), entriesRead: 32), .read(.new)])
        #expect(!machine.groupCounterBehind)
        // ...and its reply is not mistaken for the read's.
        #expect(machine.received(Self.info(added: 50, length: 20), host: "h") == .none)
        #expect(machine.received(.simpleString("OK"), host: "h") == .none)
        let next = try #require(Self.batch(machine.received(Self.read([Self.id(33)]), host: "h")))
        #expect(next.missed == 0 && next.raiseCounter == nil)
    }

    @Test("a durable trim whose raise Redis took is not raised again")
    func counterRaisedOnce() throws {
        var machine = Machine(position: .new, accounted: 0, isDurable: true)
        _ = machine.nextRead()
        let batch = try #require(
            Self.batch(Self.round(&machine, [Self.info(added: 10, length: 5), Self.read([Self.id(6)])])))
        #expect(batch.raiseCounter != nil)
        machine.counterRaised()
        #expect(machine.nextRead() == [.streamInfo, .read(.new)])
    }

    @Test("a plain reader's trim never asks for a counter raise")
    func plainNeverRaises() throws {
        var machine = Machine(position: .after(.zero), accounted: 0, isDurable: false)
        _ = machine.nextRead()
        let batch = try #require(
            Self.batch(Self.round(&machine, [Self.info(added: 10, length: 5), Self.read([Self.id(6)])])))
        #expect(batch.missed == 5 && batch.raiseCounter == nil)
        #expect(!machine.groupCounterBehind)
    }

    @Test("a durable reader that reconnects reads its unacknowledged entries again, marked, then new ones")
    func reconnectRedelivers() throws {
        var machine = Machine(position: .new, accounted: 0, isDurable: true)
        _ = machine.nextRead()
        _ = Self.round(&machine, [Self.info(added: 3, length: 3), Self.read([Self.id(1), Self.id(2), Self.id(3)])])
        // The connection broke with a read in flight: the replies it owed never come.
        _ = machine.nextRead()
        machine.connectionLost()
        #expect(machine.position == .pendingAfter(Self.id(3)))
        #expect(machine.expected.isEmpty && !machine.awaitingReply)
        // A pending read counts nothing: no counters asked.
        #expect(machine.nextRead() == [.read(.pendingAfter(Self.id(3)))])
        let pending = try #require(Self.batch(machine.received(Self.read([Self.id(4)]), host: "h")))
        #expect(pending.isRedelivery)
        #expect(machine.position == .pendingAfter(Self.id(4)))
        _ = machine.nextRead()
        let empty = try #require(Self.batch(machine.received(Self.read([]), host: "h")))
        #expect(empty.entries.isEmpty)
        #expect(machine.position == .new)
        Self.existsAnswered(&machine)
        // Entry 4 came from the lost read: the group counted it. The first
        // read on the new connection asks whether entry 4 is still there
        // and records the group's position and count (the node may be a
        // promoted replica, which does not keep what XREADGROUP counts).
        #expect(
            machine.nextRead() == [
                .streamInfo, .lastKept(atOrBefore: Self.id(4)), .raiseCounter(position: Self.id(4), entriesRead: 4),
                .read(.new),
            ])
    }

    @Test(
        "where no exact count exists the trim is reported as a lower bound: a group whose count Redis lost, a stream that went back under an unread backlog"
    )
    func inexactCounts() throws {
        // A durable group whose entries-read Redis reports as null, on a
        // stream that lost entries: how many after the group, unknown.
        var durable = Machine(position: .new, accounted: nil, isDurable: true)
        _ = durable.nextRead()
        let unknown = try #require(
            Self.batch(Self.round(&durable, [Self.info(added: 20, length: 5), Self.read([Self.id(16)])])))
        #expect(unknown.missed == 0 && !unknown.missedIsExact)
        // With nothing lost from the stream, nothing can have been missed.
        var whole = Machine(position: .new, accounted: nil, isDurable: true)
        _ = whole.nextRead()
        let exact = try #require(
            Self.batch(Self.round(&whole, [Self.info(added: 20, length: 20), Self.read([Self.id(1)])])))
        #expect(exact.missed == 0 && exact.missedIsExact)

        // A plain reader that read 10 of 30 (a backlog), then the stream went
        // back to 12 entries: some of the 20 it had not read may be gone.
        var plain = Machine(position: .after(.zero), accounted: 0, isDurable: false)
        _ = plain.nextRead()
        _ = Self.round(&plain, [Self.info(added: 30, length: 30), Self.read((1...10).map { Self.id($0) })])
        _ = plain.nextRead()
        let behind = try #require(
            Self.batch(Self.round(&plain, [Self.info(added: 12, length: 12), Self.read([Self.id(11), Self.id(12)])])))
        #expect(behind.rewound == 18 && !behind.missedIsExact)
    }

    @Test("a durable reader records its group's position and count with each read that follows new entries, once")
    func countRecordedWithReads() throws {
        var machine = Machine(position: .new, accounted: 10, isDurable: true)
        #expect(machine.nextRead() == [.streamInfo, .read(.new)])
        _ = Self.round(&machine, [Self.info(added: 12, length: 12), Self.read([Self.id(11), Self.id(12)])])
        #expect(
            machine.nextRead() == [
                .streamInfo, .raiseCounter(position: Self.id(12), entriesRead: 12), .read(.new),
            ])
        // A read that timed out with nothing: nothing new to record (and
        // the next read goes alone, without the counters).
        _ = Self.round(&machine, [Self.info(added: 12, length: 12), .simpleString("OK"), .array(nil)])
        #expect(machine.nextRead() == [.read(.new)])
    }

    /// An `XINFO STREAM` reply with the stream's oldest entry (`nil`: empty).
    private static func info(added: Int, length: Int, first: StreamEntryID?) -> RESPValue {
        guard case .array(var fields?) = info(added: added, length: length) else { return .array(nil) }
        fields += [
            .bulkString(Array("first-entry".utf8)),
            first.map { .array([.bulkString(Array($0.description.utf8)), .array([])]) } ?? .bulkString(nil),
        ]
        return .array(fields)
    }

    @Test(
        "an idle reader sends one command per block: after a read that found nothing, reads go alone, none asking a missing key's counters"
    )
    func idleReadsGoAlone() {
        var machine = Machine(position: .after(Self.id(10)), accounted: 10, isDurable: false)
        #expect(machine.nextRead() == [.streamInfo, .read(.after(Self.id(10)))])
        _ = Self.round(&machine, [Self.info(added: 10, length: 10), .array(nil)])
        for _ in 0..<3 {
            #expect(machine.nextRead() == [.read(.after(Self.id(10)))])
            #expect(Self.batch(machine.received(.array(nil), host: "h")) == Machine.Batch())
        }
        // A new connection asks for the counters again, with its first read.
        machine.connectionLost()
        Self.existsAnswered(&machine)
        #expect(machine.nextRead() == [.streamInfo, .lastKept(atOrBefore: Self.id(10)), .read(.after(Self.id(10)))])
    }

    @Test(
        "entries found by a read that went alone wait for the counters asked just after it: what was added and trimmed before it is missed, counted exactly, before them"
    )
    func entriesAfterQuietAreConfirmed() throws {
        // (read entries 16...20, stream's oldest after, added, left, missed)
        let cases: [(StreamEntryID?, Int, Int, Int)] = [
            // 11...15 trimmed before the read; the read's entries are all there.
            (Self.id(16), 20, 5, 5),
            // 11...19 trimmed by the counters: 16...19 were read, 11...15 not.
            (Self.id(20), 22, 3, 5),
            // Every entry read is gone too, and 21 after them: 11...15 and
            // 21 never read, the total exact.
            (Self.id(22), 22, 1, 6),
            // Nothing is left: 11...15 and 21...22.
            (nil, 22, 0, 7),
        ]
        for (first, added, left, missed) in cases {
            var machine = Machine(position: .after(Self.id(10)), accounted: 10, isDurable: false)
            _ = machine.nextRead()
            _ = Self.round(&machine, [Self.info(added: 10, length: 10), .array(nil)])
            #expect(machine.nextRead() == [.read(.after(Self.id(10)))])
            let read = (16...20).map { Self.id($0) }
            #expect(machine.received(Self.read(read), host: "h") == .send([.streamInfo]))
            // Still awaited: no other read goes out meanwhile.
            #expect(machine.nextRead() == nil)
            let batch = try #require(
                Self.batch(machine.received(Self.info(added: added, length: left, first: first), host: "h")))
            #expect(batch.missed == missed && batch.missedIsExact, "\(String(describing: first))")
            #expect(batch.entries.map(\.0) == read)
            #expect(machine.position == .after(Self.id(20)))
            #expect(machine.accounted == 10 + missed + 5)
            // The next read carries the counters before it, and counts on.
            #expect(machine.nextRead() == [.streamInfo, .read(.after(Self.id(20)))])
        }
    }

    @Test(
        "a stream that did not exist when reading started is read without counters, even after a new connection, until it holds an entry"
    )
    func missingStreamIsNotAskedFor() throws {
        var machine = Machine(position: .after(.zero), accounted: 0, isDurable: false, streamMayBeMissing: true)
        #expect(machine.nextRead() == [.read(.after(.zero))])
        _ = machine.received(.array(nil), host: "h")
        machine.connectionLost()
        #expect(machine.nextRead() == [.read(.after(.zero))])
        // Made, 3 posted, the first trimmed, before the read got to it.
        #expect(machine.received(Self.read([Self.id(2), Self.id(3)]), host: "h") == .send([.streamInfo]))
        let batch = try #require(
            Self.batch(machine.received(Self.info(added: 3, length: 2, first: Self.id(2)), host: "h")))
        #expect(batch.missed == 1 && batch.missedIsExact)
        // Counted from now on, and asked whether it went back since the new connection.
        #expect(machine.nextRead() == [.streamInfo, .lastKept(atOrBefore: Self.id(3)), .read(.after(Self.id(3)))])
    }

    @Test(
        "on a new connection a reader asks whether its stream exists before asking for its counters: one the server lost is read without them, and what it had counts as gone back"
    )
    func existenceAskedAfterReconnect() throws {
        for exists in [true, false] {
            var machine = Machine(position: .after(.zero), accounted: 0, isDurable: false)
            _ = machine.nextRead()
            _ = Self.round(&machine, [Self.info(added: 3, length: 3), Self.read((1...3).map { Self.id($0) })])
            machine.connectionLost()
            #expect(machine.nextRead() == [.exists])
            #expect(machine.nextRead() == nil)
            #expect(machine.received(.integer(exists ? 1 : 0), host: "h") == .readNow)
            if exists {
                #expect(
                    machine.nextRead() == [.streamInfo, .lastKept(atOrBefore: Self.id(3)), .read(.after(Self.id(3)))])
                continue
            }
            // No `XINFO` on a key that is not there, now or while it stays empty.
            #expect(machine.nextRead() == [.read(.after(Self.id(3)))])
            let quiet = try #require(Self.batch(machine.received(.array(nil), host: "h")))
            #expect(quiet.rewound == 3 && quiet.missed == 0)
            #expect(machine.nextRead() == [.read(.after(Self.id(3)))])
            // Posted again: counted from the counters just after.
            #expect(machine.received(Self.read([Self.id(7)]), host: "h") == .send([.streamInfo]))
            let batch = try #require(
                Self.batch(machine.received(Self.info(added: 1, length: 1, first: Self.id(7)), host: "h")))
            #expect(batch.missed == 0 && batch.missedIsExact && batch.entries.map(\.0) == [Self.id(7)])
        }
    }

    @Test(
        "a plain reader whose read went alone finds, in the counters after it, that the stream went back: it reads those entries again, with the counters before"
    )
    func wentBackWhileQuiet() throws {
        var machine = Machine(position: .after(.zero), accounted: 0, isDurable: false)
        _ = machine.nextRead()
        _ = Self.round(&machine, [Self.info(added: 3, length: 3), Self.read((1...3).map { Self.id($0) })])
        _ = machine.nextRead()
        _ = Self.round(&machine, [Self.info(added: 3, length: 3), .array(nil)])
        #expect(machine.nextRead() == [.read(.after(Self.id(3)))])
        // Deleted, and two posted again: the counters say 2 ever added.
        #expect(machine.received(Self.read([Self.id(8), Self.id(9)]), host: "h") == .send([.streamInfo]))
        #expect(machine.received(Self.info(added: 2, length: 2, first: Self.id(8)), host: "h") == .readNow)
        #expect(machine.position == .after(Self.id(3)))
        #expect(machine.nextRead() == [.streamInfo, .read(.after(Self.id(3)))])
        let batch = try #require(
            Self.batch(Self.round(&machine, [Self.info(added: 2, length: 2), Self.read([Self.id(8), Self.id(9)])])))
        #expect(batch.entries.map(\.0) == [Self.id(8), Self.id(9)])
        #expect(batch.rewound == 1 && batch.missed == 0)
    }

    @Test("a durable reader whose entries wait for counters when its connection is lost reads its pending ones again")
    func confirmationLost() {
        var machine = Machine(position: .new, accounted: 10, isDurable: true)
        _ = machine.nextRead()
        _ = Self.round(&machine, [Self.info(added: 10, length: 10), .array(nil)])
        #expect(machine.nextRead() == [.read(.new)])
        #expect(machine.received(Self.read([Self.id(11)]), host: "h") == .send([.streamInfo]))
        machine.connectionLost()
        #expect(machine.positionUncertain)
        #expect(machine.position == .pendingAfter(.zero))
    }

    @Test(
        "a plain reader whose last entry is gone after a reconnect while older ones remain: the stream went back, the count is what it was there, and a later trim is counted exactly"
    )
    func streamWentBack() throws {
        var machine = Machine(position: .after(.zero), accounted: 0, isDurable: false)
        _ = machine.nextRead()
        _ = Self.round(&machine, [Self.info(added: 30, length: 30), Self.read((1...30).map { Self.id($0) })])
        #expect(machine.accounted == 30)
        machine.connectionLost()
        Self.existsAnswered(&machine)
        // The new master has entries 1...20, and 10 new ones (31...40) posted
        // since: its counter says 30, as before, but entry 30 is gone.
        #expect(
            machine.nextRead() == [.streamInfo, .lastKept(atOrBefore: Self.id(30)), .read(.after(Self.id(30)))])
        let batch = try #require(
            Self.batch(
                Self.round(
                    &machine,
                    [
                        Self.info(added: 30, length: 30),
                        .array([.array([.bulkString(Array(Self.id(20).description.utf8)), .array([])])]),
                        Self.read((31...40).map { Self.id($0) }),
                    ])))
        #expect(batch.rewound == 10 && batch.missed == 0)
        #expect(machine.accounted == 30)
        // Ten more (41...50), then a trim to the newest five: the five it had
        // not read are counted as 5, not hidden by the 10 the stream lost.
        _ = machine.nextRead()
        let trimmed = try #require(
            Self.batch(
                Self.round(&machine, [Self.info(added: 40, length: 5), Self.read((46...50).map { Self.id($0) })])))
        #expect(trimmed.missed == 5)
    }

    /// A namespace's reader that read entries 1 to 100, then (having lost its
    /// connection, or gone quiet) finds its stream ending at `kept`, with
    /// one entry posted since: the batch of that read, and the count after it.
    private static func rewound(to kept: UInt64, whileQuiet: Bool) throws -> (Machine.Batch, Int?) {
        var machine = Machine(
            position: .after(.zero), accounted: 0, isDurable: false,
            recentCountLimit: Machine.recentCountLimitInNamespace)
        _ = machine.nextRead()
        _ = Self.round(&machine, [Self.info(added: 100, length: 100), Self.read((1...100).map { Self.id($0) })])
        if whileQuiet {
            _ = machine.nextRead()
            _ = Self.round(&machine, [Self.info(added: 100, length: 100), .array(nil)])
            machine.quieted()
        } else {
            machine.connectionLost()
            Self.existsAnswered(&machine)
        }
        _ = machine.nextRead()
        let batch = try #require(
            Self.batch(
                Self.round(
                    &machine,
                    [
                        Self.info(added: 100, length: 100),
                        .array([.array([.bulkString(Array(Self.id(kept).description.utf8)), .array([])])]),
                        Self.read([Self.id(101)]),
                    ])))
        return (batch, machine.accounted)
    }

    @Test(
        "a reader started for a namespace keeps the counts of its newest 64 entries: a stream that went back within them is counted exactly, further back inexactly, never silently"
    )
    func namespaceReaderKeepsFewerCounts() throws {
        let (within, accounted) = try Self.rewound(to: 90, whileQuiet: false)
        #expect(within.missedIsExact && within.rewound == 10 && accounted == 91)
        #expect(try !Self.rewound(to: 20, whileQuiet: false).0.missedIsExact)
    }

    @Test(
        "a quiet reader keeps the newest 8 counts: a rewind of up to 8 entries while quiet is exact, one further back is not"
    )
    func quietReaderKeepsEightCounts() throws {
        let (within, accounted) = try Self.rewound(to: 93, whileQuiet: true)
        #expect(within.missedIsExact && within.rewound == 7 && accounted == 94)
        #expect(try !Self.rewound(to: 91, whileQuiet: true).0.missedIsExact)
    }

    @Test(
        "a read that found nothing says where to wait: a plain reader after its position, a durable one after the stream's newest entry as counted before the read; never after a read of pending entries"
    )
    func quietAfterEmptyReads() {
        var plain = Machine(position: .after(Self.id(7)), accounted: 7, isDurable: false)
        _ = plain.nextRead()
        _ = Self.round(&plain, [Self.info(added: 7, length: 7), .array(nil)])
        #expect(plain.quietAfter == Self.id(7))

        var durable = Machine(position: .pendingAfter(.zero), accounted: 9, isDurable: true)
        _ = durable.nextRead()
        // Its pending entries, none: not quiet yet, now reading new ones.
        _ = Self.round(&durable, [.array([.array([.bulkString([]), .array([])])])])
        #expect(durable.quietAfter == nil)
        _ = durable.nextRead()
        let newest: RESPValue = .array([
            .bulkString(Array("length".utf8)), .integer(9), .bulkString(Array("entries-added".utf8)), .integer(9),
            .bulkString(Array("last-generated-id".utf8)), .bulkString(Array(Self.id(12).description.utf8)),
        ])
        _ = Self.round(&durable, [newest, .array(nil)])
        #expect(durable.quietAfter == Self.id(12))
        // Quiet: the position stands, and the next read asks again where the stream ends.
        durable.quieted()
        #expect(durable.position == .new && durable.quietAfter == nil)
        #expect(durable.nextRead()?.contains(.streamInfo) == true)
    }

    @Test("a group made again keeps the reader's own count when it counted further, not Redis's")
    func groupRemadeKeepsCount() {
        var machine = Machine(position: .new, accounted: 40, isDurable: true)
        machine.groupReady(entriesRead: 25)
        #expect(machine.accounted == 40)
        machine.groupReady(entriesRead: 60)
        #expect(machine.accounted == 60)
        var fresh = Machine(position: .pendingAfter(.zero), accounted: nil, isDurable: true)
        fresh.groupReady(entriesRead: 7)
        #expect(fresh.accounted == 7)
    }

    @Test("NOGROUP: the reader goes back to its pending entries from the start and reconnects")
    func groupLost() {
        var machine = Machine(position: .new, accounted: 0, isDurable: true)
        _ = machine.nextRead()
        #expect(machine.received(Self.info(added: 0, length: 0), host: "h") == .none)
        #expect(machine.received(.error("NOGROUP No such key"), host: "h") == .reconnect)
        #expect(machine.position == .pendingAfter(.zero))
    }

    @Test("MOVED and ASK: learnt, and after an ASK every command is preceded by ASKING")
    func redirections() throws {
        var machine = Machine(position: .after(.zero), accounted: 0, isDurable: false)
        _ = machine.nextRead()
        _ = machine.received(Self.info(added: 0, length: 0), host: "10.0.0.1")
        let ask = machine.received(.error("ASK 3999 :7002"), host: "10.0.0.1")
        guard case .redirect(let redirection) = ask else {
            Issue.record("expected a redirection, got \(ask)")
            return
        }
        #expect(!redirection.isPermanent && redirection.node.description == "10.0.0.1:7002")
        machine.connectionLost()
        #expect(machine.askedNode?.port == 7002)
        Self.existsAnswered(&machine)
        #expect(machine.nextRead() == [.asking, .streamInfo, .asking, .read(.after(.zero))])
        #expect(machine.expected == [.asking, .streamInfo, .asking, .read])
        #expect(machine.received(.simpleString("OK"), host: "h") == .none)
        _ = machine.received(Self.info(added: 0, length: 0), host: "h")
        #expect(machine.received(.simpleString("OK"), host: "h") == .none)
        let moved = machine.received(.error("MOVED 3999 10.0.0.3:7003"), host: "h")
        guard case .redirect(let permanent) = moved else {
            Issue.record("expected a redirection, got \(moved)")
            return
        }
        #expect(permanent.isPermanent)
        #expect(machine.askedNode == nil)
    }

    @Test("transient errors reconnect; any other error fails the observers")
    func errors() {
        for text in ["TRYAGAIN", "CLUSTERDOWN The cluster is down", "LOADING", "UNBLOCKED", "MASTERDOWN"] {
            var machine = Machine(position: .pendingAfter(.zero), accounted: 0, isDurable: true)
            _ = machine.nextRead()
            #expect(machine.received(.error(text), host: "h") == .reconnect)
        }
        var machine = Machine(position: .pendingAfter(.zero), accounted: 0, isDurable: true)
        _ = machine.nextRead()
        #expect(machine.received(.error("NOPERM no"), host: "h") == .fail("NOPERM no"))
    }

    @Test("a timed-out blocking read (a null reply) delivers nothing and the next read goes out")
    func timedOutRead() throws {
        var machine = Machine(position: .after(Self.id(9)), accounted: 9, isDurable: false)
        _ = machine.nextRead()
        let batch = try #require(Self.batch(Self.round(&machine, [Self.info(added: 9, length: 9), .array(nil)])))
        #expect(batch.entries.isEmpty && batch.missed == 0)
        #expect(machine.position == .after(Self.id(9)))
        #expect(machine.nextRead() != nil)
    }
}
