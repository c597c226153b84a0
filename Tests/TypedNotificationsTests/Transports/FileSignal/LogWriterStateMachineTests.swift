import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

/// The writer's decisions, step by step, without files or threads: each
/// test answers the machine's actions as the file system would in one
/// situation another process left, and checks the system calls it asks for.
/// (`LogSimulationTests` drives it through thousands of faulted schedules.)
@Suite("File log writer: state machine")
struct LogWriterStateMachineTests {
    private static let segmentSize = 64 * 1024
    private static let markSize: Int = {
        var mark: [UInt8] = []
        _ = LogFormat.appendRollover(next: 2, index: 0, at: LogFormat.startSize, to: &mark)
        return mark.count
    }()

    /// A short name for an action, for comparing transcripts.
    private static func label(_ action: LogWriterStateMachine.Action) -> String {
        switch action {
        case .measure: "measure"
        case .checkLogRemoved: "checkLogRemoved"
        case .read(let offset, let count): "read \(offset)+\(count)"
        case .listSegments: "list"
        case .readNewestCreated: "newestCreated"
        case .checkExists(let number): "exists \(number)"
        case .checkIsSegment(let number): "isSegment \(number)"
        case .open(let number): "open \(number)"
        case .create(let number, let bytes): "create \(number) \(bytes.count)"
        case .write(let bytes, let offset): "write \(bytes.count) at \(offset)"
        case .repairTail(let offset, let count): "zero \(count) at \(offset)"
        case .truncate(let length): "truncate \(length)"
        case .readStart(let number): "readStart \(number)"
        case .newLogIdentifier: "newLog"
        case .applyRetention(let active): "retain \(active)"
        case .inspect(let number): "inspect \(number)"
        case .writeInspected(let bytes, let offset): "writeInspected \(bytes.count) at \(offset)"
        case .append(let first, let offset, let index): "append \(first) at \(offset) index \(index)"
        case .finish(let appended, let failure): "finish \(appended) \(failure.map { "\($0.code)" } ?? "ok")"
        }
    }

    /// Answers each action in turn with `events` and returns the labels of
    /// the actions asked for, the last one included.
    private static func run(
        _ machine: inout LogWriterStateMachine, count: Int, _ events: [LogWriterStateMachine.Event]
    ) -> [String] {
        var action = machine.startAppend(count: count)
        var labels = [label(action)]
        for event in events {
            action = machine.receive(event)
            labels.append(label(action))
        }
        return labels
    }

    /// A new writer's first append to a log whose one segment, 1, holds
    /// `bytes`: it opens it, reads its start mark, measures it and reads it
    /// whole, then `then` answers what follows. Returns the labels of what follows.
    private static func firstAppend(
        _ machine: inout LogWriterStateMachine, to bytes: [UInt8], _ then: [LogWriterStateMachine.Event]
    ) -> [String] {
        let start = LogFormat.startSize
        let opening: [LogWriterStateMachine.Event] = [
            .segments([1]), .done, .read(Array(bytes.prefix(start))), .measured(size: bytes.count, links: 1),
            .read(bytes),
        ]
        let labels = run(&machine, count: 1, opening + then)
        #expect(labels.prefix(5) == ["list", "open 1", "read 0+\(start)", "measure", "read 0+\(bytes.count)"])
        return Array(labels.dropFirst(5))
    }

    private static func newMachine() -> LogWriterStateMachine {
        LogWriterStateMachine(name: Ping.name, segmentSize: segmentSize)
    }

    /// A machine that appended `records` records (of `recordBytes` each)
    /// to a segment 1 it created, of log `testLogIdentifier`.
    private static func machineHolding(records: Int, recordBytes: Int = 100) -> LogWriterStateMachine {
        var machine = newMachine()
        let start = LogFormat.startSize
        _ = run(
            &machine, count: records,
            [
                .segments([]), .newestCreated(nil), .answer(false), .identifier(testLogIdentifier), .done,
                .measured(size: start, links: 1), .appended(count: records, end: start + records * recordBytes),
            ])
        return machine
    }

    @Test("a new log: the first segment is created whole with its start mark, then appended to")
    func startsTheLog() {
        var machine = Self.newMachine()
        let start = LogFormat.startSize
        let labels = Self.run(
            &machine, count: 1,
            [
                .segments([]), .newestCreated(nil), .answer(false), .identifier(7), .done,
                .measured(size: start, links: 1), .appended(count: 1, end: start + 100),
            ])
        #expect(
            labels == [
                "list", "newestCreated", "exists 1", "newLog", "create 1 \(start)", "measure",
                "append 0 at \(start) index 0", "finish 1 ok",
            ])
        #expect(machine.log == 7)
        #expect(machine.nextIndex == 1)
    }

    @Test("nothing changed since the last append: one status, one write")
    func fastPath() {
        var machine = Self.machineHolding(records: 3)
        let end = LogFormat.startSize + 300
        let labels = Self.run(
            &machine, count: 2, [.measured(size: end, links: 1), .appended(count: 2, end: end + 200)])
        #expect(labels == ["measure", "append 0 at \(end) index 3", "finish 2 ok"])
    }

    @Test("another process appended: what it wrote is read and the index learned from it")
    func followsOtherAppends() {
        var segment = SegmentBuilder(firstIndex: 0)
        segment.append(pings: 0..<5)
        // This writer appended the first record; four more came from another process.
        let mine = segment.ends[0]
        var machine = Self.newMachine()
        _ = Self.run(
            &machine, count: 1,
            [
                .segments([]), .newestCreated(nil), .answer(false), .identifier(testLogIdentifier), .done,
                .measured(size: LogFormat.startSize, links: 1), .appended(count: 1, end: mine),
            ])
        let labels = Self.run(
            &machine, count: 1,
            [
                .measured(size: segment.bytes.count, links: 1), .read(Array(segment.bytes[mine...])),
                .newestCreated(1), .appended(count: 1, end: segment.bytes.count + 100),
            ])
        #expect(
            labels == [
                "measure", "read \(mine)+\(segment.bytes.count - mine)", "newestCreated",
                "append 0 at \(segment.bytes.count) index 5", "finish 1 ok",
            ])
    }

    @Test("a torn tail left by a killed writer is zeroed and stepped over to the next block, never cut off")
    func tornTail() {
        var segment = SegmentBuilder(firstIndex: 0)
        segment.append(pings: 0..<3)
        let whole = segment.bytes.count
        let torn = segment.bytes + Array(segment.framed(pingEnvelope(3)).prefix(20))
        var machine = Self.newMachine()
        let labels = Self.firstAppend(
            &machine, to: torn,
            [.segments([1]), .done, .newestCreated(1), .appended(count: 1, end: LogFormat.blockSize + 100)])
        #expect(
            labels == [
                "list", "zero 20 at \(whole)", "newestCreated", "append 0 at \(LogFormat.blockSize) index 3",
                "finish 1 ok",
            ])
        #expect(machine.log == testLogIdentifier)
    }

    @Test("a damaged last record is left as it is and its index never used again")
    func damagedLastRecord() {
        var segment = SegmentBuilder(firstIndex: 0)
        segment.append(pings: 0..<3)
        var bytes = segment.bytes
        bytes[bytes.count - 1] ^= 0xFF
        var machine = Self.newMachine()
        let labels = Self.firstAppend(
            &machine, to: bytes,
            [.segments([1]), .newestCreated(1), .appended(count: 1, end: LogFormat.blockSize + 100)])
        #expect(labels == ["list", "newestCreated", "append 0 at \(LogFormat.blockSize) index 3", "finish 1 ok"])
    }

    @Test("a damaged header at the log's end is not a tear: left as it is, and its index never used again")
    func damagedLastHeader() {
        var segment = SegmentBuilder(firstIndex: 0)
        segment.append(pings: 0..<3)
        var bytes = segment.bytes
        bytes[segment.ends[1] + 17] ^= 0xFF
        var machine = Self.newMachine()
        let labels = Self.firstAppend(
            &machine, to: bytes,
            [.segments([1]), .newestCreated(1), .appended(count: 1, end: LogFormat.blockSize + 100)])
        #expect(labels == ["list", "newestCreated", "append 0 at \(LogFormat.blockSize) index 3", "finish 1 ok"])
    }

    @Test(
        "a repair of a torn tail cut short (its header's first bytes zeroed) is a tear still: zeroed, its index used again"
    )
    func repairCutShort() {
        var segment = SegmentBuilder(firstIndex: 0)
        segment.append(pings: 0..<2)
        let whole = segment.bytes.count
        var torn = segment.bytes + Array(segment.framed(pingEnvelope(2)).prefix(60))
        for zeroed in 1...6 {
            torn.replaceSubrange(whole..<(whole + zeroed), with: [UInt8](repeating: 0, count: zeroed))
            var machine = Self.newMachine()
            let labels = Self.firstAppend(
                &machine, to: torn,
                [.segments([1]), .done, .newestCreated(1), .appended(count: 1, end: LogFormat.blockSize + 100)])
            #expect(labels[1] == "zero 60 at \(whole)", "\(zeroed) bytes zeroed")
            #expect(labels[3] == "append 0 at \(LogFormat.blockSize) index 2", "\(zeroed) bytes zeroed")
        }
    }

    @Test("a rollover by another process is followed into the next segment, opened for appending")
    func followsRollover() {
        var segment = SegmentBuilder(firstIndex: 0)
        segment.append(pings: 0..<2)
        var machine = Self.newMachine()
        let mine = segment.framed(pingEnvelope(2))
        _ = Self.firstAppend(
            &machine, to: segment.bytes,
            [.newestCreated(1), .appended(count: 1, end: segment.bytes.count + mine.count)])
        segment.append(pings: 2..<3)
        let end = segment.bytes.count
        // Another process closes the segment.
        segment.close(next: 2)
        let next = SegmentBuilder(firstIndex: 3)
        let start = LogFormat.startSize
        let labels = Self.run(
            &machine, count: 1,
            [
                .measured(size: segment.bytes.count, links: 1), .read(Array(segment.bytes[end...])),
                .answer(true), .answer(true), .done, .read(next.bytes), .measured(size: start, links: 1),
                .read(next.bytes), .newestCreated(2), .appended(count: 1, end: start + 100),
            ])
        #expect(
            labels == [
                "measure", "read \(end)+\(segment.bytes.count - end)", "exists 2", "isSegment 2", "open 2",
                "read 0+\(start)", "measure", "read 0+\(start)", "newestCreated", "append 0 at \(start) index 3",
                "finish 1 ok",
            ])
        #expect(machine.current == 2)
    }

    @Test("a full segment is closed with a rollover mark, the next created with the index after, then retention")
    func rollsOver() {
        var machine = Self.machineHolding(records: 3)
        let end = LogFormat.startSize + 300
        let labels = Self.run(
            &machine, count: 1,
            [
                .measured(size: end, links: 1), .segmentFull, .newestCreated(1), .answer(false), .done, .done, .done,
                .measured(size: LogFormat.startSize, links: 1), .appended(count: 1, end: LogFormat.startSize + 100),
            ])
        #expect(
            labels == [
                "measure", "append 0 at \(end) index 3", "newestCreated", "exists 2",
                "write \(Self.markSize) at \(end)",
                "create 2 \(LogFormat.startSize)", "retain 2", "measure", "append 0 at \(LogFormat.startSize) index 3",
                "finish 1 ok",
            ])
        #expect(machine.current == 2)
    }

    @Test("a full disk: the failed write is cut back, nothing else touched, and the post fails with storageFull")
    func fullDisk() {
        var machine = Self.machineHolding(records: 3)
        let end = LogFormat.startSize + 300
        let labels = Self.run(
            &machine, count: 1, [.measured(size: end, links: 1), .writeFailed(.noSpace), .done])
        #expect(labels == ["measure", "append 0 at \(end) index 3", "truncate \(end)", "finish 0 storageFull"])
        // The next append starts from the same place.
        #expect(machine.validatedEnd == end)
        #expect(machine.nextIndex == 3)
    }

    @Test("the whole log removed (rm -rf): the append stops with no failure and the writer says so")
    func logRemoved() {
        var machine = Self.machineHolding(records: 1)
        let labels = Self.run(
            &machine, count: 1, [.measured(size: LogFormat.startSize + 100, links: 0), .answer(true)])
        #expect(labels == ["measure", "checkLogRemoved", "finish 0 ok"])
        #expect(machine.isRemoved)
    }

    @Test("its segment removed without a mark: a mark is left in it for its readers, and the log goes on after")
    func segmentRemoved() {
        var machine = Self.machineHolding(records: 1, recordBytes: 0)
        let start = LogFormat.startSize
        let labels = Self.run(
            &machine, count: 1,
            [
                .measured(size: start, links: 0), .answer(false), .read([]), .segments([]), .newestCreated(1),
                .answer(false), .done, .done, .measured(size: start, links: 1), .appended(count: 1, end: start + 100),
            ])
        #expect(
            labels == [
                "measure", "checkLogRemoved", "read \(start)+0", "list", "newestCreated", "exists 2",
                "write \(Self.markSize) at \(start)", "create 2 \(start)", "measure", "append 0 at \(start) index 1",
                "finish 1 ok",
            ])
    }

    @Test("a segment number crowded by planted files: refused with a typed error, nothing opened")
    func crowded() {
        var machine = Self.machineHolding(records: 3)
        let end = LogFormat.startSize + 300
        var events: [LogWriterStateMachine.Event] = [.measured(size: end, links: 1), .segmentFull, .newestCreated(1)]
        events += [LogWriterStateMachine.Event](repeating: .answer(true), count: 63)
        let labels = Self.run(&machine, count: 1, events)
        #expect(labels.last == "finish 0 insecureDirectory")
        #expect(!labels.contains { $0.hasPrefix("open") || $0.hasPrefix("create") })
    }

    @Test(
        "a planted junk file under the newest number is stepped over; the segment before it is closed toward the new one"
    )
    func stepsOverJunk() {
        var segment = SegmentBuilder(firstIndex: 0)
        segment.append(pings: 0..<2)
        let junk = [UInt8](repeating: 0xAB, count: 64)
        let start = LogFormat.startSize
        var machine = Self.newMachine()
        let labels = Self.run(
            &machine, count: 1,
            [
                .segments([1, 2]), .done, .read(Array(junk.prefix(start))), .measured(size: junk.count, links: 1),
                .read(junk), .newestCreated(2), .answer(false), .segments([1, 2]), .read(segment.bytes), .done,
                .segments([1, 2]), .read(Array(junk.prefix(start))), .read(Array(segment.bytes.prefix(start))),
                .done, .measured(size: start, links: 1), .appended(count: 1, end: start + 100),
            ])
        #expect(
            labels == [
                "list", "open 2", "read 0+\(start)", "measure", "read 0+64", "newestCreated", "exists 3", "list",
                "inspect 1", "writeInspected \(Self.markSize) at \(segment.bytes.count)", "list", "readStart 2",
                "readStart 1", "create 3 \(start)", "measure", "append 0 at \(start) index 2", "finish 1 ok",
            ])
        #expect(machine.log == testLogIdentifier)
    }

    @Test("framing stops at the segment's end, but a record larger than a segment goes alone into an empty one")
    func framing() throws {
        let envelope = pingEnvelope(0)
        let encoded = EncodedNotification(storage: envelope, envelopeRange: 0..<envelope.count, payloadRange: 0..<0)
        var batch: [UInt8] = []
        let one = LogWriterStateMachine.frame(
            [encoded], at: LogFormat.startSize, index: 0, segmentSize: 0, into: &batch)
        #expect(one.count == 1)
        #expect(batch.count == one.end - LogFormat.startSize)
        let none = LogWriterStateMachine.frame(
            [encoded, encoded], at: LogFormat.startSize + 1, index: 0, segmentSize: LogFormat.startSize + 2,
            into: &batch)
        #expect(none.count == 0)
        #expect(batch.isEmpty)
    }
}
