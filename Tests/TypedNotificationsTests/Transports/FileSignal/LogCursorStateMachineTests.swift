import Testing

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

/// A log in memory that answers the state machine's actions as the file
/// system would: segments by number, files removed from the directory but
/// still open, files the reader must refuse. No threads, no files.
private struct MemoryLog {
    var segments: [UInt64: [UInt8]] = [:]
    // Removed from the log's directory while the reader had them open.
    var detached: [UInt64: [UInt8]] = [:]
    var refused: Set<UInt64> = []
    private(set) var open: UInt64?
    private(set) var actions: [LogCursorStateMachine.Action] = []

    // Numbers whose open file was removed and a new file made under them:
    // the reader still reads the removed one (`detached`) until it opens
    // the number again.
    var replaced: Set<UInt64> = []

    private var openIsDetached: Bool { open.map { segments[$0] == nil || replaced.contains($0) } ?? true }
    private var openBytes: [UInt8] { open.flatMap { openIsDetached ? detached[$0] : segments[$0] } ?? [] }

    /// Runs one pass to its end, answering every action.
    mutating func pass(
        _ machine: inout LogCursorStateMachine, segmentsChanged: Bool = false
    ) -> LogCursorStateMachine.PassResult {
        var decoder = EnvelopeDecoder()
        actions = []
        var action = machine.startPass(segmentsChanged: segmentsChanged)
        while action != .finish, actions.count < 1_000 {
            actions.append(action)
            let event: LogCursorStateMachine.Event
            switch action {
            case .open(let segment):
                open = nil
                replaced.remove(segment)
                if segments[segment] == nil || refused.contains(segment) {
                    event = .openFailed(
                        refused: refused.contains(segment), nextSegment: segments.keys.filter { $0 > segment }.min())
                } else {
                    open = segment
                    event = .opened
                }
            case .measure:
                event = .measured(
                    size: openBytes.count,
                    links: openIsDetached ? 0 : 1)
            case .checkRestart:
                event = .newestLogFound(
                    segments.keys.max().flatMap { segments[$0] }.flatMap(LogFormat.logIdentifier(inStart:)))
            case .read(let offset, let count):
                let bytes = openBytes
                let end = min(bytes.count, offset + count)
                event = .read(offset < end ? Array(bytes[offset..<end]) : [])
            case .findNext(let segment):
                event = .nextFound(segments.keys.filter { $0 > segment }.min())
            case .identify(let segment):
                event = .identified(
                    segments[segment].flatMap { LogFormat.logIdentifier(inStart: Array($0.prefix(32))) })
            case .finish:
                event = .readFailed
            }
            action = machine.receive(event, decoder: &decoder)
        }
        #expect(action == .finish, "the pass did not end")
        return machine.takeResult()
    }
}

private func sequences(_ result: LogCursorStateMachine.PassResult) -> [UInt64] {
    result.records.map(\.message.sequence)
}

private func start(
    _ segment: UInt64 = 1, _ offset: Int = 0, index: UInt64? = nil, log: UInt64? = nil,
    redeliverThrough: LogPosition? = nil
) -> LogCursorStateMachine {
    LogCursorStateMachine(
        name: Ping.name, start: LogPosition(segment: segment, offset: offset, index: index, log: log),
        redeliveringThrough: redeliverThrough)
}

/// A segment of log `log` holding pings `range`, whose first record is index `range.lowerBound`.
private func segment(_ range: Range<Int>, padding: Int = 0, log: UInt64 = testLogIdentifier) -> SegmentBuilder {
    var builder = SegmentBuilder(firstIndex: UInt64(range.lowerBound), log: log)
    builder.append(pings: range, padding: padding)
    return builder
}

@Suite("File log cursor state machine", .timeLimit(.minutes(10)))
struct LogCursorStateMachineTests {
    @Test("reads whole records and stops after them; the next pass reads only what is new")
    func readsAndAdvances() {
        var log = MemoryLog()
        var one = segment(0..<3)
        log.segments[1] = one.bytes
        var machine = start()
        let first = log.pass(&machine)
        #expect(sequences(first) == [1, 2, 3])
        #expect(machine.position == LogPosition(segment: 1, offset: one.bytes.count))
        #expect(machine.position.index == 3)
        #expect(first.records.last?.end == machine.position)
        // Nothing new: a measure and the 4-byte check of the last checksum; no directory look-up.
        let idle = log.pass(&machine)
        #expect(idle.records.isEmpty)
        #expect(log.actions == [.measure, .read(offset: machine.position.offset - 4, count: 4)])
        one.append(pings: 3..<5)
        log.segments[1] = one.bytes
        #expect(sequences(log.pass(&machine)) == [4, 5])
    }

    @Test("a record being written is not delivered; the position stays before it until it is whole")
    func writeInProgress() {
        var log = MemoryLog()
        let one = segment(0..<1)
        let next = one.framed(pingEnvelope(1))
        log.segments[1] = one.bytes + next.prefix(10)
        var machine = start()
        let first = log.pass(&machine)
        #expect(sequences(first) == [1])
        #expect(first.corruptRecordsSkipped == 0)
        #expect(machine.position.offset == one.bytes.count)
        log.segments[1]! += next.dropFirst(10)
        #expect(sequences(log.pass(&machine)) == [2])
    }

    @Test("a torn tail the next writer stepped over is skipped with nothing counted lost")
    func tornTailSteppedOver() {
        var log = MemoryLog()
        var one = segment(0..<2)
        let torn = one.framed(pingEnvelope(2))
        log.segments[1] = one.bytes + torn.prefix(20)
        var machine = start()
        #expect(sequences(log.pass(&machine)) == [1, 2])
        // The writer killed mid-append never returned: the next writer
        // reuses its index at the next block.
        one.set(bytes: one.bytes + torn.prefix(20))
        one.padToBlock()
        one.append(envelope: pingEnvelope(2, sequence: 3))
        log.segments[1] = one.bytes
        let result = log.pass(&machine)
        #expect(sequences(result) == [3])
        #expect(result.corruptRecordsSkipped == 0)
        #expect(result.records.map(\.missedBefore) == [0])
        #expect(result.missedAfterRecords == 0)
    }

    @Test("a whole, checksummed envelope of another name than its log's is corrupt, counted and missed")
    func envelopeOfAnotherName() throws {
        var log = MemoryLog()
        var one = segment(0..<1)
        let poster = try #require(logTestSender)
        let stranger = try NotificationEnvelope.encode(
            name: NotificationName(validating: "not.the.log"), sender: poster, sequence: 2,
            timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
        ) { _ in }
        one.append(envelope: Array(stranger.envelope))
        one.append(envelope: pingEnvelope(2, sequence: 3))
        log.segments[1] = one.bytes
        var machine = start()
        let result = log.pass(&machine)
        #expect(sequences(result) == [1, 3])
        #expect(result.records.allSatisfy { $0.message.name == Ping.name })
        #expect(result.corruptRecordsSkipped == 1)
        #expect(result.records.map(\.missedBefore) == [0, 1])
    }

    @Test("a rollover mark leads to the next segment without a directory look-up")
    func rolloverMark() {
        var log = MemoryLog()
        var one = segment(0..<2)
        one.close(next: 2)
        log.segments[1] = one.bytes
        log.segments[2] = segment(2..<4).bytes
        var machine = start()
        let result = log.pass(&machine)
        #expect(sequences(result) == [1, 2, 3, 4])
        // The one look-up is a new reader's, once at the newest segment's end.
        #expect(!log.actions.contains { if case .findNext(let after) = $0 { after < 2 } else { false } })
        #expect(machine.position.segment == 2)
        _ = log.pass(&machine)
        #expect(!log.actions.contains { if case .findNext = $0 { true } else { false } })
        #expect(result.records.allSatisfy { $0.missedBefore == 0 })
    }

    @Test("a corrupt record is skipped, counted and reported as exactly one missed; the records after it are delivered")
    func corruptRecordSkipped() {
        var log = MemoryLog()
        var one = segment(0..<3)
        // A payload byte of record 1 flipped: its data checksum fails.
        var bytes = one.bytes
        bytes[one.ends[1] - 10] ^= 0xFF
        one.set(bytes: bytes)
        log.segments[1] = one.bytes
        var machine = start()
        let result = log.pass(&machine)
        #expect(sequences(result) == [1, 3])
        #expect(result.corruptRecordsSkipped == 1)
        #expect(result.records.map(\.missedBefore) == [0, 1])
        #expect(machine.position.offset == one.bytes.count)
    }

    @Test("a forged length, checksummed or not, costs only its record: the records after it are delivered")
    func forgedLength() {
        for checksummed in [false, true] {
            var log = MemoryLog()
            var one = segment(0..<10)
            let fourth = one.ends[2]
            var forged = forgedHeader(type: 1, length: 100_000, index: 3)
            if !checksummed { forged[0] ^= 1 }
            one.overwrite(at: fourth, with: forged)
            log.segments[1] = one.bytes
            var machine = start()
            let result = log.pass(&machine)
            #expect(sequences(result) == [1, 2, 3, 5, 6, 7, 8, 9, 10])
            #expect(result.corruptRecordsSkipped == 1)
            #expect(result.records[3].missedBefore == 1)
            // Within its block and past the file's end: believed only until the file goes on.
            var near = segment(0..<10)
            near.overwrite(at: near.ends[2], with: forgedHeader(type: 1, length: 900, index: 3))
            log.segments[1] = near.bytes
            var second = start()
            #expect(sequences(log.pass(&second)) == [1, 2, 3, 5, 6, 7, 8, 9, 10])
        }
    }

    @Test("a segment truncated and written again: what was read stays read, what is new is delivered")
    func truncatedAndRewritten() {
        var log = MemoryLog()
        log.segments[1] = segment(0..<4).bytes
        var machine = start()
        #expect(sequences(log.pass(&machine)) == [1, 2, 3, 4])
        // Cut back to two records, then written on by the same poster.
        var rewritten = segment(0..<2)
        rewritten.append(pings: 4..<6)
        log.segments[1] = rewritten.bytes
        let result = log.pass(&machine)
        #expect(result.shrunkSegments == 1)
        #expect(sequences(result) == [5, 6])
        // Shorter than the position, then written on.
        var shrunk = segment(0..<1)
        log.segments[1] = shrunk.bytes
        let none = log.pass(&machine)
        #expect(none.shrunkSegments == 1)
        #expect(none.records.isEmpty)
        shrunk.append(pings: 6..<7)
        log.segments[1] = shrunk.bytes
        #expect(sequences(log.pass(&machine)) == [7])
    }

    @Test("a segment emptied under the reader, then written again: nothing read is delivered again")
    func emptiedThenRewritten() {
        var log = MemoryLog()
        log.segments[1] = segment(0..<3).bytes
        var machine = start()
        #expect(sequences(log.pass(&machine)) == [1, 2, 3])
        // `open(path, "wb")`: the file is empty when the reader looks.
        log.segments[1] = []
        let empty = log.pass(&machine)
        #expect(empty.records.isEmpty)
        #expect(empty.missedAfterRecords == 0)
        // Then half a start mark, then the old records and one new one.
        log.segments[1] = Array(segment(0..<3).bytes.prefix(10))
        #expect(log.pass(&machine).records.isEmpty)
        log.segments[1] = segment(0..<4).bytes
        let rewritten = log.pass(&machine)
        #expect(sequences(rewritten) == [4])
        #expect(rewritten.missedAfterRecords == 0)
        #expect(rewritten.records.allSatisfy { $0.missedBefore == 0 })
    }

    @Test("a segment written back in several writes: nothing read is delivered again, whatever the writes")
    func rewrittenInSeveralWrites() {
        var log = MemoryLog()
        var whole = segment(0..<5)
        log.segments[1] = whole.bytes
        var machine = start()
        #expect(sequences(log.pass(&machine)) == [1, 2, 3, 4, 5])
        let old = whole.bytes
        // Truncated, then written back a piece at a time: a start mark,
        // then two records, then four, then all of it and one more.
        for end in [LogFormat.startSize, whole.ends[1], whole.ends[3]] {
            log.segments[1] = Array(old.prefix(end))
            let pass = log.pass(&machine)
            #expect(pass.records.isEmpty, "\(end) bytes back")
            #expect(pass.missedAfterRecords == 0)
        }
        whole.append(pings: 5..<6)
        log.segments[1] = whole.bytes
        let rewritten = log.pass(&machine)
        #expect(sequences(rewritten) == [6])
        #expect(rewritten.records.allSatisfy { $0.missedBefore == 0 })
    }

    @Test(
        "a segment cut back by hand, then appended to by a new poster: its records are new, though their indexes are not"
    )
    func truncatedThenNewPoster() throws {
        var log = MemoryLog()
        log.segments[1] = segment(0..<5).bytes
        var machine = start()
        #expect(sequences(log.pass(&machine)) == [1, 2, 3, 4, 5])
        // Records 2 to 4 cut off; a poster the reader never read from
        // appends at index 2, later than anything read.
        var cut = SegmentBuilder(firstIndex: 0)
        cut.append(pings: 0..<2)
        let other = try NotificationSender(processID: 2, userID: 1, endpoint: "late", instance: 1)
        let late = try NotificationEnvelope.encode(
            name: Ping.name, sender: other, sequence: 1,
            timestamp: NotificationTimestamp(wallClockNanoseconds: 1, monotonicNanoseconds: 1)
        ) { try Ping(index: 99).encodePayload(into: &$0) }
        cut.append(envelope: Array(late.envelope))
        log.segments[1] = cut.bytes
        let after = log.pass(&machine)
        #expect(after.records.map(\.message.sender) == [other])
    }

    @Test(
        "a segment writers left for a new log beside it, without a mark: the reader follows once a segment is created")
    func abandonedSegment() {
        var log = MemoryLog()
        log.segments[1] = segment(0..<3).bytes
        var machine = start()
        #expect(sequences(log.pass(&machine)) == [1, 2, 3])
        // A writer found segment 1 empty mid-rewrite and started a new log
        // in segment 2; segment 1 was written back, and gets no mark.
        var other = SegmentBuilder(firstIndex: 0, log: testLogIdentifier + 1)
        other.append(pings: 10..<12)
        log.segments[2] = other.bytes
        // No change event about segments: the reader waits at its end.
        #expect(log.pass(&machine).records.isEmpty)
        let after = log.pass(&machine, segmentsChanged: true)
        #expect(sequences(after) == [11, 12])
        #expect(after.vanishedSegments == 1)
        // A new reader from the beginning looks once on its own.
        var fresh = start()
        #expect(sequences(log.pass(&fresh)) == [1, 2, 3, 11, 12])
    }

    @Test("a file planted under a later number is no reason to leave a segment writers still append to")
    func plantedLaterFile() {
        var log = MemoryLog()
        var first = segment(0..<2)
        log.segments[1] = first.bytes
        // Caught while it is being made: one byte, no start mark.
        log.segments[2] = [1]
        var machine = start()
        #expect(sequences(log.pass(&machine, segmentsChanged: true)) == [1, 2])
        first.append(pings: 2..<3)
        log.segments[1] = first.bytes
        #expect(sequences(log.pass(&machine, segmentsChanged: true)) == [3])
        #expect(machine.position.segment == 1)
    }

    @Test("a segment emptied for good while the log went on in a later one: the reader follows, counting what it lost")
    func emptiedAndLeft() {
        var log = MemoryLog()
        var first = segment(0..<3)
        log.segments[1] = first.bytes
        var machine = start()
        #expect(sequences(log.pass(&machine)) == [1, 2, 3])
        first.append(pings: 3..<5)
        // Emptied with two records the reader never read; a writer stepped
        // over it to segment 2, which starts at index 5.
        log.segments[1] = []
        var second = SegmentBuilder(firstIndex: 5)
        second.append(pings: 5..<6)
        log.segments[2] = second.bytes
        let result = log.pass(&machine)
        #expect(sequences(result) == [6])
        #expect(result.records.first?.missedBefore == 2)
    }

    @Test("a backlog is read 16 KiB a pass at record boundaries; a record larger than a block is read whole")
    func budgetPerPass() {
        var log = MemoryLog()
        let count = 1_000
        var one = segment(0..<count)
        log.segments[1] = one.bytes
        var machine = start()
        var seen: [UInt64] = []
        var passes = 0
        while true {
            let result = log.pass(&machine)
            passes += 1
            seen += sequences(result)
            #expect(result.records.count <= LogCursorStateMachine.bytesPerPass / pingEnvelope(0).count + 1)
            if !result.hasMore { break }
        }
        #expect(seen == (1...UInt64(count)).map { $0 })
        #expect(passes > 1)
        // One record of 100 KiB: first, middle and last pieces in four
        // blocks, more than a pass's budget, delivered whole in one pass.
        one.append(envelope: pingEnvelope(count, padding: 100_000))
        log.segments[1] = one.bytes
        let result = log.pass(&machine)
        #expect(sequences(result) == [UInt64(count + 1)])
        if case .encoded(let encoded) = result.records.first?.message.payload {
            #expect(encoded.payload.count > 100_000)
        } else {
            Issue.record("the big record was not delivered as an envelope")
        }
        #expect(machine.position.offset == one.bytes.count)
    }

    @Test("segments deleted while a reader was away: it goes on at the oldest one left and is told exactly how many")
    func deletedSegmentsCounted() {
        var log = MemoryLog()
        var one = segment(0..<2)
        log.segments[1] = one.bytes
        var machine = start()
        #expect(sequences(log.pass(&machine)) == [1, 2])
        // Paused; meanwhile the log rolled on to segment 4 and retention
        // deleted 1 (still open here), 2 and 3.
        one.append(pings: 2..<3)
        one.close(next: 2)
        log.detached[1] = one.bytes
        log.segments[1] = nil
        var four = segment(10..<12)
        four.close(next: 5)
        log.segments[4] = four.bytes
        log.segments[5] = segment(12..<13).bytes
        let result = log.pass(&machine)
        #expect(sequences(result) == [3, 11, 12, 13])
        // Records 3 to 9 (indexes) were in segments 2 and 3.
        #expect(result.records.map(\.missedBefore) == [0, 7, 0, 0])
        #expect(machine.position.segment == 5)
    }

    @Test("a reader whose segment was removed with no mark finds the next one in the directory")
    func removedWithoutMark() {
        var log = MemoryLog()
        log.segments[1] = segment(0..<1).bytes
        var machine = start()
        #expect(sequences(log.pass(&machine)) == [1])
        log.detached[1] = log.segments.removeValue(forKey: 1)
        log.segments[3] = segment(1..<2).bytes
        let result = log.pass(&machine)
        #expect(sequences(result) == [2])
        #expect(log.actions.contains(.findNext(after: 1)))
    }

    @Test("a segment refused is passed over for the next one there is")
    func refusedSegments() {
        var log = MemoryLog()
        var three = segment(0..<1)
        three.close(next: 4)
        var four = segment(1..<2)
        four.close(next: 5)
        log.segments[3] = three.bytes
        log.segments[4] = four.bytes
        log.segments[5] = segment(2..<3).bytes
        log.refused = [4]
        var machine = start(1)
        let result = log.pass(&machine)
        #expect(sequences(result) == [1, 3])
        #expect(result.refusedFiles == 1)
        #expect(machine.position.segment == 5)
    }

    @Test("a segment of format 1 is refused, never read, and reading goes on in the segment after it")
    func formatOneRefused() {
        var log = MemoryLog()
        log.segments[1] = pingEnvelope(0) + pingEnvelope(1)
        var machine = start()
        let first = log.pass(&machine)
        #expect(first.records.isEmpty)
        #expect(first.refusedFiles == 1)
        log.segments[2] = segment(0..<1).bytes
        #expect(sequences(log.pass(&machine)) == [1])
    }

    @Test("a log removed and started again under the open segment: reading goes on from its oldest segment")
    func logStartedAgain() {
        var log = MemoryLog()
        log.segments[7] = segment(0..<2).bytes
        var machine = start(7)
        #expect(sequences(log.pass(&machine)) == [1, 2])
        // Removed while open; a new log starts at segment 1.
        log.detached[7] = log.segments.removeValue(forKey: 7)
        log.segments[1] = segment(10..<12, log: 2).bytes
        let result = log.pass(&machine)
        #expect(result.vanishedSegments == 1)
        #expect(sequences(result) == [11, 12])
        #expect(result.records.allSatisfy { $0.missedBefore == 0 })
        #expect(machine.position.segment == 1)
        #expect(machine.position.log == 2)
    }

    @Test(
        "a log removed and made again with the same numbers, while the reader held its segment: the start mark tells, not the file's identity"
    )
    func logStartedAgainUnderTheSameNumbers() {
        var log = MemoryLog()
        log.segments[1] = segment(0..<3).bytes
        var machine = start()
        #expect(sequences(log.pass(&machine)) == [1, 2, 3])
        // The same layout in a new log: more records, in the same segment number.
        log.detached[1] = log.segments.removeValue(forKey: 1)
        log.segments[1] = segment(0..<5, log: 2).bytes
        log.replaced.insert(1)
        let result = log.pass(&machine)
        #expect(sequences(result) == [1, 2, 3, 4, 5])
        #expect(result.vanishedSegments == 1)
    }

    @Test(
        "a saved position into a log since removed and made again with an identical layout: the new log is read from its oldest record, none marked as delivered before"
    )
    func savedPositionIntoReplacedLog() {
        var log = MemoryLog()
        let old = segment(0..<4)
        // The new log holds records of the same sizes at the same offsets.
        log.segments[1] = segment(0..<6, log: 2).bytes
        let saved = LogPosition(segment: 1, offset: old.ends[1], index: 2, log: testLogIdentifier)
        var machine = start(1, old.ends[1], index: 2, log: testLogIdentifier, redeliverThrough: saved)
        let result = log.pass(&machine)
        #expect(sequences(result) == [1, 2, 3, 4, 5, 6])
        #expect(result.records.allSatisfy { !$0.message.isRedelivery })
        #expect(result.records.allSatisfy { $0.missedBefore == 0 })
        #expect(result.vanishedSegments == 1)
        #expect(machine.position.log == 2)
    }

    @Test(
        "a saved position past the end of a log made again with fewer segments: the reader goes to its oldest segment instead of waiting for the old number"
    )
    func savedPositionPastReplacedLog() {
        var log = MemoryLog()
        log.segments[1] = segment(0..<2, log: 2).bytes
        var machine = start(9, 100, index: 500, log: testLogIdentifier)
        let result = log.pass(&machine)
        #expect(sequences(result) == [1, 2])
        #expect(machine.position.segment == 1)
    }

    @Test(
        "a log started again twice before the reader opened the second: it goes on in the third, not waiting for the second"
    )
    func logStartedAgainTwice() {
        var log = MemoryLog()
        log.segments[7] = segment(0..<2).bytes
        var machine = start(7)
        #expect(sequences(log.pass(&machine)) == [1, 2])
        // Removed while open; a second log starts at segment 0. The reader
        // goes over to it, and waits for its records.
        log.detached[7] = log.segments.removeValue(forKey: 7)
        log.segments[0] = segment(0..<0, log: 2).bytes
        #expect(log.pass(&machine).vanishedSegments == 1)
        #expect(machine.position.log == 2)
        // Removed in turn before the reader opened it: a third log starts at
        // segment 1. Before, the reader passed over its segment, looking for
        // the second log's, at every pass, for good.
        log.segments[0] = nil
        log.segments[1] = segment(0..<3, log: 3).bytes
        let result = log.pass(&machine)
        #expect(sequences(result) == [1, 2, 3])
        #expect(machine.position.log == 3)
        #expect(sequences(log.pass(&machine)) == [])
    }

    @Test("a rollover mark that leads into a segment of another log: the reader goes to that log's oldest segment")
    func rolloverIntoAnotherLog() {
        var log = MemoryLog()
        var first = segment(0..<2)
        first.close(next: 3)
        log.segments[1] = first.bytes
        // Left behind at a lower number by the old log (or planted): passed
        // over while the reader looks for the new log's oldest segment.
        log.segments[0] = segment(7..<9).bytes
        var second = segment(0..<1, log: 2)
        second.close(next: 3)
        log.segments[2] = second.bytes
        log.segments[3] = segment(1..<3, log: 2).bytes
        var machine = start()
        let result = log.pass(&machine)
        #expect(sequences(result) == [1, 2, 1, 2, 3])
        #expect(result.vanishedSegments == 1)
    }

    @Test("records up to the saved delivered position are marked as redeliveries, later ones are not")
    func redeliveryMarks() {
        var log = MemoryLog()
        let one = segment(0..<4)
        log.segments[1] = one.bytes
        let through = LogPosition(segment: 1, offset: one.ends[1])
        var machine = start(redeliverThrough: through)
        let result = log.pass(&machine)
        #expect(result.records.map(\.message.isRedelivery) == [true, true, false, false])
    }
}
