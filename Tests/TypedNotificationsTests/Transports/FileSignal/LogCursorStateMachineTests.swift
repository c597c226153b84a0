import Testing

@_spi(TransportAuthoring) @testable import TypedNotifications

/// A log in memory that answers the state machine's actions as the file
/// system would: segments by number, files removed from the directory but
/// still open, files the reader must refuse. No threads, no files.
private struct MemoryLog {
    var segments: [UInt64: [UInt8]] = [:]
    // Removed from the log's directory while the reader had them open.
    var detached: [UInt64: [UInt8]] = [:]
    var refused: Set<UInt64> = []
    var restarted = false
    private(set) var open: UInt64?
    private(set) var actions: [LogCursorStateMachine.Action] = []

    private var openBytes: [UInt8] { open.flatMap { segments[$0] ?? detached[$0] } ?? [] }

    /// Runs one pass to its end, answering every action.
    mutating func pass(_ machine: inout LogCursorStateMachine, lookForNewSegment: Bool = true)
        -> LogCursorStateMachine.PassResult
    {
        var decoder = EnvelopeDecoder()
        actions = []
        var action = machine.startPass(lookForNewSegment: lookForNewSegment)
        while action != .finish, actions.count < 1_000 {
            actions.append(action)
            let event: LogCursorStateMachine.Event
            switch action {
            case .open(let segment):
                open = nil
                if segments[segment] == nil || refused.contains(segment) {
                    event = .openFailed(
                        refused: refused.contains(segment), nextSegment: segments.keys.filter { $0 > segment }.min())
                } else {
                    open = segment
                    event = .opened
                }
            case .measure:
                event = .measured(size: openBytes.count, links: open.map { segments[$0] == nil ? 0 : 1 } ?? 0)
            case .checkRestart:
                event = .restartChecked(restarted: restarted, oldestSegment: restarted ? segments.keys.min() : nil)
            case .read(let offset, let count):
                let bytes = openBytes
                let end = min(bytes.count, offset + count)
                event = .read(offset < end ? Array(bytes[offset..<end]) : [])
            case .findNext(let segment):
                event = .nextFound(segments.keys.filter { $0 > segment }.min())
            case .finish:
                event = .readFailed
            }
            action = machine.receive(event, decoder: &decoder)
        }
        #expect(action == .finish, "the pass did not end")
        return machine.takeResult()
    }
}

private let sender = try? NotificationSender(processID: 1, userID: 1, endpoint: "poster", instance: 1)

/// The bytes of one complete record: a `Ping` with this index and sequence.
private func record(_ index: Int, sequence: UInt64? = nil) -> [UInt8] {
    guard let poster = sender else { return [] }
    let encoded = try? NotificationEnvelope.encode(
        name: Ping.name, sender: poster, sequence: sequence ?? UInt64(index + 1),
        timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
    ) { buffer in
        try Ping(index: index).encodePayload(into: &buffer)
    }
    return encoded.map { Array($0.envelope) } ?? []
}

private func records(_ range: Range<Int>) -> [UInt8] { range.flatMap { record($0) } }

private func sequences(_ result: LogCursorStateMachine.PassResult) -> [UInt64] {
    result.records.map(\.message.sequence)
}

private func start(_ segment: UInt64 = 1, _ offset: Int = 0, redeliverThrough: LogPosition? = nil)
    -> LogCursorStateMachine
{
    LogCursorStateMachine(
        name: Ping.name, start: LogPosition(segment: segment, offset: offset), redeliveringThrough: redeliverThrough)
}

@Suite("File log cursor state machine", .timeLimit(.minutes(5)))
struct LogCursorStateMachineTests {
    @Test("reads whole records and stops after them; the next pass reads only what is new")
    func readsAndAdvances() {
        var log = MemoryLog()
        log.segments[1] = records(0..<3)
        var machine = start()
        let first = log.pass(&machine)
        #expect(sequences(first) == [1, 2, 3])
        #expect(machine.position == LogPosition(segment: 1, offset: records(0..<3).count))
        #expect(first.records.last?.end == machine.position)
        // Nothing new: a measure, the 4-byte check of the last checksum, and a look for a next segment.
        let idle = log.pass(&machine)
        #expect(idle.records.isEmpty)
        #expect(log.actions == [.measure, .read(offset: machine.position.offset - 4, count: 4), .findNext(after: 1)])
        log.segments[1]! += records(3..<5)
        #expect(sequences(log.pass(&machine)) == [4, 5])
    }

    @Test("a torn tail is not delivered and the position stays before it until the record is whole")
    func tornTail() {
        var log = MemoryLog()
        let whole = record(0)
        let next = record(1)
        log.segments[1] = whole + next.prefix(10)
        var machine = start()
        let first = log.pass(&machine)
        #expect(sequences(first) == [1])
        #expect(first.corruptRecordsSkipped == 0)
        #expect(machine.position.offset == whole.count)
        log.segments[1]! += next.dropFirst(10)
        #expect(sequences(log.pass(&machine)) == [2])
    }

    @Test("a newer segment finishes this one: its torn tail is counted, and reading goes on there")
    func rolloverWithTornTail() {
        var log = MemoryLog()
        log.segments[1] = records(0..<2) + record(2).prefix(7)
        log.segments[2] = records(3..<5)
        var machine = start()
        let result = log.pass(&machine)
        #expect(sequences(result) == [1, 2, 4, 5])
        #expect(result.corruptRecordsSkipped == 1)
        #expect(machine.position == LogPosition(segment: 2, offset: records(3..<5).count))
    }

    @Test("appends made after the measure but before the next segment appeared are read before moving on")
    func finalSizeBeforeMovingOn() {
        // The log grows between the measure and the look for a next segment:
        // answered by hand, step by step.
        var machine = start()
        var decoder = EnvelopeDecoder()
        let early = records(0..<2)
        let late = record(2)
        #expect(machine.startPass(lookForNewSegment: true) == .open(segment: 1))
        #expect(machine.receive(.opened, decoder: &decoder) == .measure)
        #expect(
            machine.receive(.measured(size: early.count, links: 1), decoder: &decoder)
                == .read(offset: 0, count: early.count))
        #expect(machine.receive(.read(early), decoder: &decoder) == .findNext(after: 1))
        #expect(machine.receive(.nextFound(2), decoder: &decoder) == .measure)
        // Grown meanwhile: read the rest first, from where it stopped.
        let grown = early.count + late.count
        #expect(
            machine.receive(.measured(size: grown, links: 1), decoder: &decoder)
                == .read(offset: early.count - 4, count: late.count + 4))
        #expect(machine.receive(.read(Array(early.suffix(4)) + late), decoder: &decoder) == .findNext(after: 1))
        #expect(machine.receive(.nextFound(2), decoder: &decoder) == .measure)
        #expect(machine.receive(.measured(size: grown, links: 1), decoder: &decoder) == .open(segment: 2))
        #expect(machine.receive(.openFailed(refused: false, nextSegment: nil), decoder: &decoder) == .finish)
        let result = machine.takeResult()
        #expect(sequences(result) == [1, 2, 3])
        #expect(result.corruptRecordsSkipped == 0)
        #expect(machine.position == LogPosition(segment: 2, offset: 0))
    }

    @Test("a corrupt record is skipped and counted; the records after it are delivered")
    func corruptRecordSkipped() {
        var log = MemoryLog()
        var bad = record(1)
        bad[bad.count - 1] ^= 0xFF  // its checksum no longer matches
        log.segments[1] = record(0) + bad + record(2)
        var machine = start()
        let result = log.pass(&machine)
        #expect(sequences(result) == [1, 3])
        #expect(result.corruptRecordsSkipped == 1)
        #expect(machine.position.offset == log.segments[1]!.count)
    }

    @Test("a segment truncated and written again: what was read stays read, what is new is delivered")
    func truncatedAndRewritten() {
        var log = MemoryLog()
        log.segments[1] = records(0..<4)
        var machine = start()
        #expect(sequences(log.pass(&machine)) == [1, 2, 3, 4])
        // Cut back to two records, then written on by the same poster.
        log.segments[1] = records(0..<2) + records(4..<6)
        let result = log.pass(&machine)
        #expect(result.shrunkSegments == 1)
        #expect(sequences(result) == [5, 6])
        // Shorter than the position, then written on.
        log.segments[1] = records(0..<1)
        let shrunk = log.pass(&machine)
        #expect(shrunk.shrunkSegments == 1)
        #expect(shrunk.records.isEmpty)
        log.segments[1]! += record(6)
        #expect(sequences(log.pass(&machine)) == [7])
    }

    @Test("a backlog is read 16 KiB a pass at record boundaries; a record larger than that is read whole")
    func budgetPerPass() throws {
        var log = MemoryLog()
        let count = 1_000
        log.segments[1] = records(0..<count)
        var machine = start()
        var seen: [UInt64] = []
        var passes = 0
        while true {
            let result = log.pass(&machine)
            passes += 1
            seen += sequences(result)
            #expect(result.records.count <= LogCursorStateMachine.bytesPerPass / record(0).count + 1)
            if !result.hasMore { break }
        }
        #expect(seen == (1...UInt64(count)).map { $0 })
        #expect(passes > 1)
        // One record of 40 KiB: more than a pass's budget, delivered whole in one pass.
        let big = try? NotificationEnvelope.encode(
            name: Ping.name, sender: #require(sender), sequence: UInt64(count + 1),
            timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
        ) { buffer in buffer.append(contentsOf: [UInt8](repeating: 0x20, count: 40_000)) }
        log.segments[1]! += big.map { Array($0.envelope) } ?? []
        let result = log.pass(&machine)
        #expect(sequences(result) == [UInt64(count + 1)])
        #expect(machine.position.offset == log.segments[1]!.count)
    }

    @Test("a segment deleted by retention or refused is passed over for the next one there is")
    func missingAndRefusedSegments() {
        var log = MemoryLog()
        log.segments[3] = records(0..<1)
        log.segments[4] = records(1..<2)
        log.segments[5] = records(2..<3)
        log.refused = [4]
        var machine = start(1)
        let result = log.pass(&machine)
        #expect(sequences(result) == [1, 3])
        #expect(result.refusedFiles == 1)
        #expect(machine.position.segment == 5)
    }

    @Test("a log removed and started again under the open segment: reading goes on from its oldest segment")
    func logStartedAgain() {
        var log = MemoryLog()
        log.segments[7] = records(0..<2)
        var machine = start(7)
        #expect(sequences(log.pass(&machine)) == [1, 2])
        // Removed while open; a new log starts at segment 1.
        log.detached[7] = log.segments.removeValue(forKey: 7)
        log.segments[1] = records(10..<12)
        log.restarted = true
        let result = log.pass(&machine)
        #expect(result.vanishedSegments == 1)
        #expect(sequences(result) == [11, 12])
        #expect(machine.position.segment == 1)
    }

    @Test("a segment deleted by retention while open is read to its end, then the next one")
    func deletedWhileOpen() {
        var log = MemoryLog()
        log.segments[1] = records(0..<1)
        var machine = start()
        #expect(sequences(log.pass(&machine)) == [1])
        log.segments[1]! += records(1..<2)
        log.detached[1] = log.segments.removeValue(forKey: 1)
        log.segments[2] = records(2..<3)
        let result = log.pass(&machine)
        #expect(result.vanishedSegments == 0)
        #expect(sequences(result) == [2, 3])
    }

    @Test("records up to the saved delivered position are marked as redeliveries, later ones are not")
    func redeliveryMarks() {
        var log = MemoryLog()
        log.segments[1] = records(0..<4)
        let through = LogPosition(segment: 1, offset: records(0..<2).count)
        var machine = start(redeliverThrough: through)
        let result = log.pass(&machine)
        #expect(result.records.map(\.message.isRedelivery) == [true, true, false, false])
    }

    @Test("without a creation event, a pass that read records does not look for a newer segment")
    func noLookWithoutCreation() {
        var log = MemoryLog()
        log.segments[1] = records(0..<2)
        log.segments[2] = records(2..<3)
        var machine = start()
        let result = log.pass(&machine, lookForNewSegment: false)
        #expect(sequences(result) == [1, 2])
        #expect(!log.actions.contains(.findNext(after: 1)))
        // Nothing new in this one: then it looks, and moves on.
        #expect(sequences(log.pass(&machine, lookForNewSegment: false)) == [3])
    }
}
