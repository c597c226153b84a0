import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("Durable cursors: the commit state machine and the cursor file")
struct CursorCommitStateMachineTests {
    private func position(_ offset: Int, segment: UInt64 = 1) -> LogPosition {
        LogPosition(segment: segment, offset: offset)
    }

    @Test("the committed position moves only past records handled with every record before them")
    func commitsInOrder() {
        var machine = CursorCommitStateMachine(committed: position(0), delivered: position(0))
        let tokens = (1...4).map { machine.handOver(endingAt: position($0 * 100)) }
        #expect(machine.delivered == position(400))
        #expect(machine.inFlight == 4)
        // The second and fourth first: nothing before them is done yet.
        var moves: [Bool] = []
        moves.append(machine.handled(tokens[1]))
        moves.append(machine.handled(tokens[3]))
        #expect(moves == [false, false])
        #expect(machine.committed == position(0))
        moves.append(machine.handled(tokens[0]))
        #expect(machine.committed == position(200))
        moves.append(machine.handled(tokens[2]))
        #expect(machine.committed == position(400))
        #expect(machine.inFlight == 0)
        // A token seen twice, or never issued, changes nothing.
        moves.append(machine.handled(tokens[2]))
        moves.append(machine.handled(99))
        #expect(moves == [false, false, true, true, false, false])
        #expect(machine.committed == position(400))
    }

    @Test("across segments, and after many records (the pending list compacts)")
    func manyAcrossSegments() {
        var machine = CursorCommitStateMachine(committed: position(50), delivered: position(50))
        var tokens: [UInt64] = []
        for index in 0..<5_000 {
            tokens.append(machine.handOver(endingAt: position(100 + index % 1_000, segment: UInt64(1 + index / 1_000))))
        }
        for token in tokens.dropLast() { _ = machine.handled(token) }
        #expect(machine.committed == position(1_098, segment: 5))
        #expect(machine.inFlight == 1)
        let moved = machine.handled(tokens[4_999])
        #expect(moved)
        #expect(machine.committed == position(1_099, segment: 5))
        #expect(machine.delivered == position(1_099, segment: 5))
    }

    @Test("cursor files: all four versions parse; anything else is refused")
    func cursorFiles() {
        func parse(_ text: String) -> FileCursor? { FileCursor.parse(Array(text.utf8)) }
        #expect(
            parse("3 120\n") == FileCursor(committed: position(120, segment: 3), delivered: position(120, segment: 3)))
        #expect(
            parse("3 120 4 80\n")
                == FileCursor(committed: position(120, segment: 3), delivered: position(80, segment: 4)))
        for bad in [
            "garbage\n", "", "3 120", "0 5\n", "3 -1\n", "3 120 2 0\n", "3 120 4\n", "1 2 3 4 5 6 7\n", "1 2 3 4 5 0\n",
            "1 2 1 2 x\n",
            "18446744073709551616 0\n", " 3 120\n", "3  120\n", String(repeating: "9", count: 200) + "\n",
        ] {
            #expect(parse(bad) == nil, "\(bad.debugDescription)")
        }
        let cursor = FileCursor(committed: position(7, segment: 2), delivered: position(9, segment: 2))
        #expect(FileCursor.parse(cursor.bytes) == cursor)
        // The third version adds the index of the record after the committed position.
        var indexed = cursor
        indexed.committed.index = 41
        #expect(String(decoding: indexed.bytes, as: UTF8.self) == "2 7 2 9 41\n")
        // The fourth adds the identifier of the log the positions are in.
        indexed.committed.log = 0xBEEF
        #expect(String(decoding: indexed.bytes, as: UTF8.self) == "2 7 2 9 41 48879\n")
        #expect(FileCursor.parse(indexed.bytes)?.committed.log == 0xBEEF)
        #expect(FileCursor.parse(indexed.bytes)?.delivered.log == 0xBEEF)
        #expect(FileCursor.parse(indexed.bytes)?.committed.index == 41)
        #expect(parse("2 7 2 9\n")?.committed.index == nil)
    }
}

/// A new directory whose durable `identity` exists already (it subscribed
/// once), holding `notifications` as its backlog, none handled yet.
func directoryWithBacklog<N: TypedNotification>(identity: String, _ notifications: [N]) throws -> String {
    let directory = try makeTemporaryDirectory()
    do {
        let first = try fileHub(directory, endpoint: "durable", identity: identity)
        _ = try first.deliveries(.of(N.self))
        first.close()
    }
    let poster = try fileHub(directory, endpoint: "poster")
    for notification in notifications { try poster.post(notification) }
    poster.close()
    return directory
}

/// Where each record of segment 1 of a name's log ends.
private func logRecordEnds(_ directory: String, _ name: NotificationName) -> [Int] {
    guard let bytes = FileManager.default.contents(atPath: FileLog.segmentPath(directory, name, 1)).map(Array.init)
    else { return [] }
    var decoder = EnvelopeDecoder()
    return FileLog.records(in: bytes, decoder: &decoder).map(\.end)
}

@Suite("Durable cursors: at least once, never less", .serialized, .timeLimit(.minutes(10)))
struct DurableCursorTests {
    /// Posts `count` notifications to a new directory whose durable identity
    /// `w` exists already (it subscribed once), so all of them are its backlog.
    private func backlog(_ count: Int) throws -> String {
        try directoryWithBacklog(identity: "w", (0..<count).map { HelperPing(poster: 1, index: $0) })
    }

    @Test("the cursor moves past a notification only once every observer of the name has handled it")
    func commitWaitsForEveryObserver() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let hub = try fileHub(directory, endpoint: "durable", identity: "w")
        let handled = Collector<Int>()
        let token = try hub.addObserver(.of(Ping.self), bufferingPolicy: .unbounded) { ping, _ in
            handled.append(ping.index)
        }
        let sequence = try hub.deliveries(.of(Ping.self), bufferingPolicy: .unbounded)
        let start = try #require(hub.transport.committedPosition(of: Ping.name))
        let poster = try fileHub(directory, endpoint: "poster")
        for index in 0..<3 { try poster.post(Ping(index: index)) }
        poster.close()
        let ends = logRecordEnds(directory, Ping.name)
        try #require(ends.count == 3)
        // The handler has handled all three; the loop has not started.
        await handled.wait(forCount: 3)
        #expect(hub.transport.committedPosition(of: Ping.name) == start)
        var iterator = sequence.makeAsyncIterator()
        _ = await iterator.next()
        _ = await iterator.next()
        // Asking for the second acknowledged the first; the second is in hand.
        #expect(hub.transport.committedPosition(of: Ping.name)?.offset == ends[0])
        _ = await iterator.next()
        #expect(hub.transport.committedPosition(of: Ping.name)?.offset == ends[1])
        withExtendedLifetime(token) {}
        hub.close()
        await hub.closed()
        // Closing saved what was handled, and only that.
        let cursor = try String(contentsOfFile: directory + "/cursors/w/" + Ping.name.rawValue, encoding: .utf8)
        #expect(cursor.hasPrefix("1 \(ends[1]) "))
        withExtendedLifetime(iterator) {}
    }

    @Test(
        "a loop whose task is cancelled while its body runs has handled that delivery: the next run starts after it, unmarked"
    )
    func cancelledWhileBodyRuns() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        let (handled, next) = try await playCancelWhileLoopBodyRuns(
            durable: { try fileHub(directory, endpoint: "durable", identity: "w") }, poster: poster)
        #expect(handled == [0, 1, 2])
        #expect(next?.notification.index == 3)
        #expect(next?.delivery.isRedelivery == false)
    }

    @Test(
        "a name subscribed while the loop reads another's flood starts at its cursor, 500 times: no backlog passed by"
    )
    func subscribeBesideBusyPasses() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let durable = try fileHub(directory, endpoint: "durable", identity: "w")
        defer { durable.close() }
        // The flood keeps the durable transport's loop in read passes, so
        // one may start the moment a new reader is in its table.
        let flooded = Counter()
        let token = try durable.addObserver(.of(Note.self)) { _, _ in flooded.increment() }
        let flooder = try fileHub(directory, endpoint: "flooder")
        defer { flooder.close() }
        let flooding = Flag()
        // Threads of their own: busy, they would hold the cooperative
        // pool's two threads that the test's task needs.
        let flood = startThread {
            while !flooding.isSet { try? flooder.post(Note(text: "x")) }
        }
        // And the commit table's lock is kept busy, so a subscribe may wait
        // for it with its reader already in the table.
        let transport = durable.transport
        let contending = startThread {
            while !flooding.isSet { _ = transport.committedPosition(of: Ping.name) }
        }
        defer {
            flooding.set()
            withExtendedLifetime(token) {}
        }
        let poster = try fileHub(directory, endpoint: "poster")
        defer { poster.close() }
        // The identity's first run, so later ones resume at its cursor.
        _ = try durable.deliveries(.of(Ping.self))
        var next = 0
        for round in 0..<500 {
            // A backlog of three, then a subscription, then one more.
            for _ in 0..<3 {
                try poster.post(Ping(index: next))
                next += 1
            }
            let sequence = try durable.deliveries(.of(Ping.self), bufferingPolicy: .unbounded)
            try poster.post(Ping(index: next))
            next += 1
            var got: [Int] = []
            var unmarkedRepeats = 0
            for await delivered in sequence {
                let index = delivered.notification.index
                // The last round's last may come again (its commit can land
                // after this subscription read the cursor): marked.
                if index < next - 4 {
                    if !delivered.delivery.isRedelivery { unmarkedRepeats += 1 }
                    continue
                }
                got.append(index)
                if index == next - 1 { break }
            }
            #expect(got == Array((next - 4)..<next), "round \(round)")
            #expect(unmarkedRepeats == 0, "round \(round)")
            if got != Array((next - 4)..<next) || unmarkedRepeats > 0 { break }
        }
        flooding.set()
        flood.wait()
        contending.wait()
    }

    @Test(
        "a loop stopped by a cancel at random moments, 200 runs: each post handled once, in order, none lost"
    )
    func cancelsAtRandomMoments() async throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let seen = try await playCancelsAtRandomMoments(rounds: 200) { identity in
            try FileSignalTransport(directory: directory, identity: identity, firstRead: .beginning)
        }
        #expect(seen.skipped.isEmpty)
        #expect(seen.last == seen.posted - 1)
        #expect(seen.repeated == 0)
        print("file: \(seen.posted) posts over 200 cancelled runs, \(seen.repeated) repeated")
    }

    @Test(
        "a durable watcher killed with SIGKILL at random points while it handles a backlog of 1,500, 25 times each way: all 1,500 handled, each duplicate marked as a redelivery",
        arguments: ["sequence", "handler"])
    func killedWhileHandling(mode: String) async throws {
        var kills = 0
        var duplicates = 0
        for _ in 0..<25 {
            let directory = try backlog(1_500)
            defer { removeDirectory(directory) }
            var handled: [Int: Int] = [:]
            var finished = false
            for run in 1...8 where !finished {
                let remaining = 1_500 - handled.count
                // Killed at a random point in its first three runs, while
                // notifications are being handled; the last run finishes.
                // The kill is sent by the thread reading the helper's output
                // as it reads that line, so it lands a few hundred lines
                // later at most, however loaded the machine.
                let killed = run <= 3 && remaining > 1
                let helper = try HelperProcess(
                    ["fdurable", directory, "w", "1499", mode],
                    killedAtLine: killed ? 1 + Int.random(in: 1...min(500, remaining - 1)) : nil)
                // Returns once every line it wrote was read, too.
                _ = await helper.waitForExit()
                // A kill counts when it landed mid-backlog, before "done".
                if killed && !helper.lines.values.contains("done") { kills += 1 }
                duplicates += tallyDurableRun(helper.lines.values, run: run, into: &handled)
                // Done, or killed just after handling the last one (then the
                // next run would find nothing left to handle).
                finished = helper.lines.values.contains("done") || handled.count == 1_500
            }
            #expect(finished)
            #expect(Set(handled.keys) == Set(0..<1_500))
        }
        print("\(mode): \(kills) kills, \(duplicates) duplicates, each marked")
        // The first run of every round was killed mid-backlog: it was killed
        // at most 500 lines in, with at most two pages of lines unread (one
        // in the pipe, one in the reader's buffer), far short of 1,500. Later
        // runs, with less left, may finish first.
        #expect(kills >= 25)
    }
}
