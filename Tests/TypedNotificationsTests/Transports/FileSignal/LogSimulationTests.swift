import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@_spi(TransportAuthoring) @testable import TypedNotifications
@_spi(TransportAuthoring) @testable import TypedNotificationsCore
@_spi(TransportAuthoring) @testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@_spi(TransportAuthoring) @testable import TypedNotificationsSocket

/// Deterministic simulation of the file log, after FoundationDB's: one seed
/// decides every step and every fault. Writers (``LogAppender``) append
/// through an in-memory directory that tears writes at any byte, fills the
/// disk and kills writers mid-append; retention and `rm` delete segments,
/// and `rm -rf` the whole log, at any moment; bytes are flipped; readers (``LogCursorStateMachine``) read,
/// stop and resume from their saved positions. After every read the
/// delivered notifications are checked against a reference model, and at
/// the end the accounting: every notification that became a whole record is
/// delivered or reported missed, exactly, and every post that returned and
/// was neither deleted nor damaged is still in the log and was delivered.
///
/// `TYPED_NOTIFICATIONS_SIMULATION_SEEDS=N` runs N schedules (default
/// 4,000), from the `TYPED_NOTIFICATIONS_SIMULATION_FIRST`th on (default 0);
/// `TYPED_NOTIFICATIONS_SIMULATION_SEED=S` replays one and prints its steps.
@Suite("File log: deterministic simulation with fault injection", .timeLimit(.minutes(10)))
struct LogSimulationTests {
    @Test("seeded schedules of posts, crashes, full disks, retention, rm and bit flips against a reference model")
    func seededSchedules() async throws {
        let environment = ProcessInfo.processInfo.environment
        let seeds: [UInt64]
        if let one = environment["TYPED_NOTIFICATIONS_SIMULATION_SEED"].flatMap(UInt64.init) {
            seeds = [one]
        } else {
            let count = environment["TYPED_NOTIFICATIONS_SIMULATION_SEEDS"].flatMap(Int.init) ?? 4_000
            let first = environment["TYPED_NOTIFICATIONS_SIMULATION_FIRST"].flatMap(UInt64.init) ?? 0
            seeds = (first..<(first + UInt64(count))).map { 0x5EED_0000 &+ $0 }
        }
        // A minute and more of work: on a thread of its own, never one of
        // the two the shared pool has here, which every other test needs.
        // Failures come back to be recorded here, on the test's task.
        let (failures, totals) = try await offThePool { () -> ([String], Simulation.Totals) in
            var failures: [String] = []
            var totals = Simulation.Totals()
            for seed in seeds {
                var simulation = Simulation(seed: seed, tracing: seeds.count == 1)
                simulation.run()
                totals.add(simulation.totals)
                if let failure = simulation.failure {
                    if seeds.count == 1 { print(simulation.trace.joined(separator: "\n")) }
                    failures.append(
                        "seed \(seed) failed: \(failure); replay with TYPED_NOTIFICATIONS_SIMULATION_SEED=\(seed)")
                    if failures.count >= 5 { break }
                }
            }
            return (failures, totals)
        }
        for failure in failures { Issue.record("\(failure)") }
        // The schedules exercised what they are for.
        if seeds.count >= 1_000 {
            #expect(totals.returned > 10 * seeds.count)
            #expect(totals.crashes > 0 && totals.fullDisks > 0 && totals.deletions > 0 && totals.flips > 0)
            #expect(
                totals.missedReported > 0 && totals.rollovers > 0 && totals.readerRestarts > 0 && totals.logRemovals > 0
            )
        }
    }
}

extension LogSimulationTests {
    /// The append in one call that *Design decisions* rules out: writers
    /// that learn where the log ends from a shared page they all keep
    /// exactly, instead of from the segment's status before each append.
    /// The page tells every writer's append and rollover; it cannot tell
    /// that another process removed the segment. The same schedules must
    /// catch posts that returned and are lost; if they did not, the status
    /// the real writer pays for on every append would be proven by nothing.
    @Test("writers that take the log's end from a shared page lose posts after rm, and the schedules catch it")
    func aSharedEndLosesPostsAfterRemoval() async throws {
        let failures = try await offThePool { () -> [String] in
            var failures: [String] = []
            for seed in (0..<UInt64(2_000)).map({ 0x5EED_0000 &+ $0 }) {
                var simulation = Simulation(seed: seed, writersTrustASharedEnd: true)
                simulation.run()
                if let failure = simulation.failure { failures.append("seed \(seed): \(failure)") }
                if failures.count >= 3 { break }
            }
            return failures
        }
        #expect(failures.count >= 3)
        // Lost, not merely miscounted: a post that returned is gone.
        #expect(failures.contains { $0.contains("never got") || $0.contains("is gone from the log") })
    }
}

/// The schedule's numbers: SplitMix64, small, fast and the same everywhere.
struct SimulationRandom {
    private var generator: SplitMix64
    init(seed: UInt64) { generator = SplitMix64(state: seed) }

    mutating func next() -> UInt64 { generator.next() }

    mutating func below(_ bound: Int) -> Int { bound <= 1 ? 0 : Int(next() % UInt64(bound)) }
    mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
}

/// A file in the simulated directory; removing it from the directory
/// leaves it readable through whoever holds it, as on disk.
final class SimulatedFile {
    var bytes: [UInt8]
    var linked = true
    init(_ bytes: [UInt8]) { self.bytes = bytes }
}

/// The simulated directory of one log, shared by every writer and reader.
final class SimulatedDirectory {
    var segments: [UInt64: SimulatedFile] = [:]
    var newestCreated: UInt64?
    var random: SimulatedRandomBox
    var retentionKeeps = 3
    var totals = Simulation.Totals()
    /// Whether writers learn where the log ends from a shared page that
    /// every writer keeps exactly, instead of from the segment's status: the
    /// append in one call that *Design decisions* rules out. Such a page
    /// knows what writers did, never what `rm` did to a segment's links.
    var writersTrustASharedEnd = false
    /// Bytes a crashed or failed write left, so the model knows which
    /// records in them are whole.
    var onTornWrite: ([UInt8], Int) -> Void = { _, _ in }
    var onDelete: (SimulatedFile) -> Void = { _ in }

    init(random: SimulatedRandomBox) { self.random = random }

    // The log's lock file: which one it is (a new one after the whole log
    // was removed).
    var generation = 0

    var numbers: [UInt64] { segments.keys.sorted() }

    func delete(_ number: UInt64) {
        guard let file = segments.removeValue(forKey: number) else { return }
        onDelete(file)
        file.linked = false
        totals.deletions += 1
    }

    /// `rm -rf` of the log: every segment and the lock file. The next
    /// writer starts a new log, with a new identifier and numbers from 1.
    func removeLog() {
        for number in numbers { delete(number) }
        newestCreated = nil
        generation += 1
    }
}

/// The schedule's random numbers, shared by the directory's faults.
final class SimulatedRandomBox {
    var random: SimulationRandom
    /// Percent chance that a write is torn by a kill, or fails for a full disk.
    var killPercent = 0
    var fullPercent = 0
    init(seed: UInt64) { random = SimulationRandom(seed: seed) }
}

/// One writer process's view of the directory. A kill makes every later
/// call of this process do nothing, as a dead process does nothing.
final class SimulatedLogFiles: LogFiles {
    let directory: SimulatedDirectory
    var killed = false
    // The lock file this process opened.
    private let generation: Int

    init(_ directory: SimulatedDirectory) {
        self.directory = directory
        generation = directory.generation
    }

    func lock() throws(TypedNotificationError) {
        if killed { throw TypedNotificationError(code: .transportFailure, message: "killed") }
    }
    func unlock() {}
    var isRemoved: Bool { generation != directory.generation }
    func segments() -> [UInt64] { directory.numbers }
    func exists(_ number: UInt64) -> Bool { directory.segments[number] != nil }
    func isSegment(_ number: UInt64) -> Bool { directory.segments[number] != nil }
    func newestCreated() -> UInt64? { directory.newestCreated }
    func newLogIdentifier() -> UInt64 { directory.random.random.next() | 1 }
    func readStart(of number: UInt64, count: Int) -> [UInt8]? {
        directory.segments[number].map { Array($0.bytes.prefix(count)) }
    }

    func open(_ number: UInt64) throws(TypedNotificationError) -> any LogSegmentFile {
        guard let file = directory.segments[number] else {
            throw TypedNotificationError(code: .transportFailure, message: "no segment \(number)")
        }
        return SimulatedSegmentFile(file, process: self)
    }

    func create(_ number: UInt64, holding bytes: [UInt8]) throws(TypedNotificationError) -> any LogSegmentFile {
        if killed { throw TypedNotificationError(code: .transportFailure, message: "killed") }
        let file = SimulatedFile(bytes)
        directory.segments[number] = file
        directory.newestCreated = max(directory.newestCreated ?? 0, number)
        directory.totals.rollovers += 1
        return SimulatedSegmentFile(file, process: self)
    }

    func applyRetention(keeping active: UInt64) {
        guard !killed else { return }
        for number in directory.numbers where number < active && directory.segments.count > directory.retentionKeeps {
            directory.delete(number)
        }
    }
}

final class SimulatedSegmentFile: LogSegmentFile {
    let file: SimulatedFile
    let process: SimulatedLogFiles

    init(_ file: SimulatedFile, process: SimulatedLogFiles) {
        self.file = file
        self.process = process
    }

    func status() -> (size: Int, links: Int)? {
        (file.bytes.count, file.linked || process.directory.writersTrustASharedEnd ? 1 : 0)
    }

    func read(at offset: Int, count: Int) -> [UInt8]? {
        let end = min(file.bytes.count, offset + count)
        return offset < end ? Array(file.bytes[offset..<end]) : []
    }

    func write(_ bytes: [UInt8], at offset: Int) -> Result<Void, Errno> {
        guard !process.killed else { return .failure(.invalidArgument) }
        let box = process.directory.random
        let killed = box.random.chance(box.killPercent)
        let full = !killed && box.random.chance(box.fullPercent)
        let written = killed || full ? box.random.below(bytes.count) : bytes.count
        if file.bytes.count < offset { file.bytes += [UInt8](repeating: 0, count: offset - file.bytes.count) }
        let end = offset + written
        if file.bytes.count < end { file.bytes += [UInt8](repeating: 0, count: end - file.bytes.count) }
        file.bytes.replaceSubrange(offset..<end, with: bytes.prefix(written))
        if killed {
            process.killed = true
            process.directory.totals.crashes += 1
            process.directory.onTornWrite(Array(bytes.prefix(written)), offset)
            return .failure(.invalidArgument)
        }
        if full {
            process.directory.totals.fullDisks += 1
            return .failure(.noSpace)
        }
        return .success(())
    }

    func truncate(to length: Int) {
        guard !process.killed, length < file.bytes.count else { return }
        file.bytes.removeSubrange(length...)
    }
}

/// One schedule.
struct Simulation {
    struct Totals {
        var returned = 0
        var crashes = 0
        var fullDisks = 0
        var deletions = 0
        var flips = 0
        var rollovers = 0
        var missedReported = 0
        var readerRestarts = 0
        var logRemovals = 0

        mutating func add(_ other: Totals) {
            returned += other.returned
            crashes += other.crashes
            fullDisks += other.fullDisks
            deletions += other.deletions
            flips += other.flips
            rollovers += other.rollovers
            missedReported += other.missedReported
            readerRestarts += other.readerRestarts
            logRemovals += other.logRemovals
        }
    }

    /// A notification in the model: who posted it, and its payload.
    struct Post: Hashable {
        var poster: UInt64
        var sequence: UInt64
        var size: Int
    }

    private struct Writer {
        var files: SimulatedLogFiles
        var appender: LogAppender
        var sender: NotificationSender
        var sequence: UInt64 = 0
    }

    private struct Reader {
        var machine: LogCursorStateMachine
        var open: SimulatedFile?
        var openNumber: UInt64?
        var delivered: [Post] = []
        var seen: Set<Post> = []
        var lastSequence: [UInt64: UInt64] = [:]
        var missed = 0
    }

    let seed: UInt64
    private(set) var failure: String?
    /// What happened, step by step, when replaying one seed.
    var trace: [String] { traceLog.lines }
    private let traceLog = TraceLog()
    private let tracing: Bool

    private final class TraceLog {
        var lines: [String] = []
    }

    private func note(_ line: @autoclosure () -> String) {
        if tracing { traceLog.lines.append(line()) }
    }
    private var box: SimulatedRandomBox
    private let directory: SimulatedDirectory
    private var writers: [Writer] = []
    private var readers: [Reader] = []
    private var nextInstance: UInt64 = 1
    private let segmentSize: Int
    // The model: every post that returned, every record known whole in the
    // files (returned, or whole before its writer was killed), and those
    // destroyed on purpose (deleted with their segment, or bit-flipped).
    private var returned: [Post] = []
    // Whether someone removed the newest segment: what it held is lost
    // without an exact count (a writer that never saw it cannot know its
    // last index), so the exact accounting is not checked.
    private var removedNewest = false
    // Whether someone removed the whole log: what readers had not read of
    // it is gone with it, uncounted (the new log's indexes start again).
    private var removedLog = false
    private var whole: Set<Post> = []
    private var destroyed: Set<Post> = []
    private let decoderPosts = PostDecoder()

    var totals: Totals { directory.totals }

    init(seed: UInt64, tracing: Bool = false, writersTrustASharedEnd: Bool = false) {
        self.seed = seed
        self.tracing = tracing
        box = SimulatedRandomBox(seed: seed)
        directory = SimulatedDirectory(random: box)
        directory.writersTrustASharedEnd = writersTrustASharedEnd
        let sizes = [1_024, 8 * 1_024, 64 * 1_024, 200 * 1_024]
        segmentSize = sizes[box.random.below(sizes.count)]
        box.killPercent = [0, 2, 8][box.random.below(3)]
        box.fullPercent = [0, 2, 8][box.random.below(3)]
        directory.retentionKeeps = 2 + box.random.below(4)
    }

    mutating func run() {
        let decoder = decoderPosts
        directory.onTornWrite = { [directory] prefix, offset in
            // Records a killed writer left whole are records readers may get.
            _ = directory
            _ = LogScanner.walk(prefix, base: offset, fileSize: offset + prefix.count) { item in
                if case .record(_, _, _, let envelope) = item, let post = decoder.post(envelope, in: prefix) {
                    decoder.tornWhole.insert(post)
                }
            }
        }
        directory.onDelete = { file in
            decoder.forEachPost(in: file.bytes) { decoder.deleted.insert($0) }
        }
        for _ in 0..<(1 + box.random.below(3)) { writers.append(newWriter()) }
        for _ in 0..<(1 + box.random.below(2)) {
            readers.append(
                Reader(
                    machine: LogCursorStateMachine(
                        name: Ping.name, start: .init(segment: 1, offset: 0, index: 0), redeliveringThrough: nil)))
        }
        let steps = 20 + box.random.below(60)
        for _ in 0..<steps where failure == nil {
            let roll = box.random.below(100)
            note("segments \(directory.numbers.map { "\($0):\(directory.segments[$0]?.bytes.count ?? 0)" })")
            switch roll {
            case 0..<55: post()
            case 55..<75: readerPass(box.random.below(readers.count))
            case 75..<80: retention()
            case 80..<83: removeNewest()
            case 83..<87: flip()
            case 87..<92: restartReader(box.random.below(readers.count))
            case 92..<94: removeLog()
            default:
                let index = box.random.below(writers.count)
                note("writer \(index) restarts")
                writers[index] = newWriter()
            }
        }
        // Quiet: no more faults; the writers post once more each (which steps
        // over any torn tail), then every reader reads to the end.
        box.killPercent = 0
        box.fullPercent = 0
        for index in writers.indices where writers[index].files.killed { writers[index] = newWriter() }
        for index in writers.indices { post(by: index) }
        for index in readers.indices {
            var passes = 0
            while failure == nil, passes < 10_000 {
                passes += 1
                if !readerPass(index) { break }
            }
        }
        if failure == nil { checkAccounting() }
    }

    // MARK: - Steps

    private mutating func newWriter() -> Writer {
        let files = SimulatedLogFiles(directory)
        nextInstance += 1
        guard let sender = try? NotificationSender(processID: 1, userID: 1, endpoint: "w", instance: nextInstance)
        else { preconditionFailure("a valid sender") }
        return Writer(
            files: files,
            appender: LogAppender(
                files: files, name: Ping.name, segmentSize: segmentSize, counters: Counters<FileSignalStatistics>()),
            sender: sender)
    }

    private mutating func post() {
        let index = box.random.below(writers.count)
        if writers[index].files.killed { writers[index] = newWriter() }
        post(by: index)
    }

    private mutating func post(by index: Int) {
        let count = 1 + box.random.below(3)
        var posts: [Post] = []
        var envelopes: [EncodedNotification] = []
        for _ in 0..<count {
            writers[index].sequence += 1
            let size = box.random.chance(10) ? 5_000 + box.random.below(70_000) : box.random.below(200)
            let post = Post(poster: writers[index].sender.instance, sequence: writers[index].sequence, size: size)
            guard
                let encoded = try? NotificationEnvelope.encode(
                    name: Ping.name, sender: writers[index].sender, sequence: post.sequence,
                    timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0),
                    writePayload: { buffer in buffer.append(contentsOf: PostDecoder.payload(of: post)) })
            else { return fail("could not encode") }
            posts.append(post)
            envelopes.append(encoded)
        }
        var (appended, error) = writers[index].appender.append(envelopes)
        if appended < count, error == nil, writers[index].appender.isRemoved {
            // The log was removed under this writer: the transport starts
            // it again with a new appender and goes on.
            let files = SimulatedLogFiles(directory)
            writers[index].files = files
            writers[index].appender = LogAppender(
                files: files, name: Ping.name, segmentSize: segmentSize, counters: Counters<FileSignalStatistics>())
            let (more, failure) = writers[index].appender.append(envelopes.dropFirst(appended))
            appended += more
            error = failure
        }
        note(
            "writer \(index) posts \(posts.map { "\($0.poster).\($0.sequence)/\($0.size)" }): \(appended) appended\(error.map { ", \($0.message)" } ?? "")\(writers[index].files.killed ? ", killed" : "")"
        )
        note(
            "  now \(directory.numbers.map { number in "\(number):" + describe(directory.segments[number]?.bytes ?? []) })"
        )
        for post in posts.prefix(appended) {
            returned.append(post)
            whole.insert(post)
        }
        directory.totals.returned += appended
        if appended < count && !writers[index].files.killed {
            // A full disk: the rest were not appended; the next post of
            // this writer carries on with new numbers, as a center does.
        }
    }

    /// One pass of a reader; returns whether it got anywhere.
    @discardableResult
    private mutating func readerPass(_ index: Int) -> Bool {
        var reader = readers[index]
        defer { readers[index] = reader }
        let before = reader.machine.position
        var decoder = EnvelopeDecoder()
        var action = reader.machine.startPass()
        var actions = 0
        while action != .finish {
            actions += 1
            if actions > 100_000 {
                fail("a pass did not end")
                return false
            }
            let event: LogCursorStateMachine.Event
            switch action {
            case .open(let number):
                if let file = directory.segments[number] {
                    reader.open = file
                    reader.openNumber = number
                    event = .opened
                } else {
                    reader.open = nil
                    event = .openFailed(refused: false, nextSegment: directory.numbers.first { $0 > number })
                }
            case .measure:
                guard let file = reader.open else {
                    event = .measureFailed
                    break
                }
                event = .measured(size: file.bytes.count, links: file.linked ? 1 : 0)
            case .identify(let number):
                event = .identified(
                    directory.segments[number].flatMap {
                        LogFormat.logIdentifier(inStart: Array($0.bytes.prefix(LogFormat.startSize)))
                    })
            case .checkRestart:
                // The simulated log is never removed whole: its segments all
                // carry one identifier, unless a flipped byte hid it.
                let newest = directory.numbers.last
                event = .newestLogFound(
                    newest.flatMap { directory.segments[$0] }.flatMap {
                        LogFormat.logIdentifier(inStart: Array($0.bytes.prefix(LogFormat.startSize)))
                    })
            case .read(let offset, let count):
                guard let file = reader.open else {
                    event = .readFailed
                    break
                }
                let end = min(file.bytes.count, offset + count)
                event = .read(offset < end ? Array(file.bytes[offset..<end]) : [])
            case .findNext(let number):
                event = .nextFound(directory.numbers.first { $0 > number })
            case .finish:
                event = .readFailed
            }
            if reader.open == nil { reader.machine.segmentClosed() }
            action = reader.machine.receive(event, decoder: &decoder)
        }
        let result = reader.machine.takeResult()
        note(
            "reader \(index) from \(before) (\(before.index.map(String.init) ?? "?")): \(result.records.map { "\($0.message.sender.instance).\($0.message.sequence)#\(($0.end.index ?? 0) &- 1)\($0.missedBefore > 0 ? "(missed \($0.missedBefore))" : "")" }) missed after \(result.missedAfterRecords), now \(reader.machine.position) (\(reader.machine.position.index.map(String.init) ?? "?"))"
        )
        for record in result.records {
            reader.missed += record.missedBefore
            guard case .encoded(let encoded) = record.message.payload,
                let post = PostDecoder.post(of: record.message, payload: Array(encoded.payload))
            else {
                fail("a record that is not a post was delivered")
                return false
            }
            guard whole.contains(post) || decoderPosts.tornWhole.contains(post) else {
                fail("delivered \(post), which no writer wrote whole")
                return false
            }
            guard !reader.seen.contains(post) else {
                fail("delivered \(post) twice")
                return false
            }
            if let last = reader.lastSequence[post.poster], post.sequence <= last {
                fail("delivered \(post) after sequence \(last) of its poster")
                return false
            }
            reader.seen.insert(post)
            reader.lastSequence[post.poster] = post.sequence
            reader.delivered.append(post)
        }
        reader.missed += result.missedAfterRecords
        directory.totals.missedReported += result.missedAfterRecords + result.records.reduce(0) { $0 + $1.missedBefore }
        return !result.records.isEmpty || result.hasMore || reader.machine.position != before
            || result.missedAfterRecords > 0
    }

    /// A reader stops (its process ends) and a new one resumes from its
    /// saved position, as a durable identity does from its cursor.
    private mutating func restartReader(_ index: Int) {
        var position = readers[index].machine.position
        if directory.segments[position.segment] == nil, let oldest = directory.numbers.first,
            oldest > position.segment
        {
            // Where the log is now, in it: a reader that never read it
            // learns which log it is from the segment it starts at.
            let log = directory.segments[oldest].flatMap {
                LogFormat.logIdentifier(inStart: Array($0.bytes.prefix(LogFormat.startSize)))
            }
            position = LogPosition(segment: oldest, offset: 0, index: position.index, log: position.log ?? log)
        }
        note("reader \(index) restarts at \(position) (\(position.index.map(String.init) ?? "?"))")
        readers[index].machine = LogCursorStateMachine(name: Ping.name, start: position, redeliveringThrough: nil)
        readers[index].open = nil
        readers[index].openNumber = nil
        directory.totals.readerRestarts += 1
    }

    private mutating func retention() {
        let numbers = directory.numbers
        guard numbers.count > 1 else { return }
        note("retention deletes \(numbers[0])")
        directory.delete(numbers[0])
    }

    private mutating func removeLog() {
        note("rm -rf the log")
        directory.removeLog()
        removedLog = true
        directory.totals.logRemovals += 1
    }

    private mutating func removeNewest() {
        guard let newest = directory.numbers.last else { return }
        note("rm \(newest)")
        directory.delete(newest)
        removedNewest = true
    }

    /// Flips one byte of a record, header or data. In the last record of the
    /// log, a byte of its first fragment: a header damaged there, with
    /// nothing after it, is told from a torn write (a killed writer leaves a
    /// prefix, whose whole header checks) and from a repair cut short, and
    /// counted missed.
    private mutating func flip() {
        let numbers = directory.numbers
        guard !numbers.isEmpty else { return }
        if box.random.chance(20) {
            // A byte of a closed segment's rollover mark: no record is lost.
            for number in numbers.dropLast() {
                guard let file = directory.segments[number] else { continue }
                var mark: Int?
                _ = LogScanner.walk(file.bytes, base: 0, fileSize: file.bytes.count) { item in
                    if case .rollover(_, _, let end) = item { mark = end }
                }
                guard let end = mark else { continue }
                let offset = end - LogFormat.headerSize - LogFormat.rolloverDataSize + box.random.below(32)
                file.bytes[offset] ^= UInt8(1 + box.random.below(255))
                note("flip byte \(offset) of segment \(number)'s rollover mark")
                directory.totals.flips += 1
                return
            }
        }
        let number = numbers[box.random.below(numbers.count)]
        let file = directory.segments[number]
        guard let file else { return }
        var spans: [(start: Int, end: Int, post: Post?)] = []
        _ = LogScanner.walk(file.bytes, base: 0, fileSize: file.bytes.count) { item in
            if case .record(let start, let end, _, let envelope) = item {
                spans.append((start, end, decoderPosts.post(envelope, in: file.bytes)))
            }
        }
        guard !spans.isEmpty else { return }
        let chosen = box.random.below(spans.count)
        let span = spans[chosen]
        let isLastOfLog = chosen == spans.count - 1 && number == numbers.last
        let first = span.start
        let last = isLastOfLog ? min(span.end, LogFormat.blockEnd(of: span.start)) : span.end
        guard first < last else { return }
        let offset = first + box.random.below(last - first)
        var flip = UInt8(1 + box.random.below(255))
        if isLastOfLog && offset == span.start && file.bytes[offset] ^ flip == 0 {
            // The first byte of the log's last header turned to zero reads
            // as a repair of a torn tail that was itself cut short, and is
            // taken for a tear (see the format's documentation): not played.
            flip ^= 1
        }
        file.bytes[offset] ^= flip
        note("flip byte \(offset) of a segment, in \(span.post.map { "\($0.poster).\($0.sequence)" } ?? "?")")
        if let post = span.post { destroyed.insert(post) }
        directory.totals.flips += 1
    }

    // MARK: - Checks

    private mutating func checkAccounting() {
        let written = whole.union(decoderPosts.tornWhole)
        for (index, reader) in readers.enumerated() {
            // Every whole record is delivered or counted missed, exactly;
            // a reader restarted behind deleted segments counts those too.
            let lost = written.subtracting(reader.seen)
            if reader.missed != lost.count && !removedNewest && !removedLog {
                return fail(
                    "reader \(index): \(reader.delivered.count) delivered, \(reader.missed) reported missed, \(lost.count) written and not delivered"
                )
            }
            // A post that returned and was neither deleted nor damaged is delivered.
            for post in returned where !reader.seen.contains(post) {
                if !decoderPosts.deleted.contains(post) && !destroyed.contains(post) {
                    return fail("reader \(index) never got \(post), which returned and is still in the log")
                }
            }
        }
        // Nothing valid destroyed: every returned post not deleted or flipped is still in a segment.
        var present: Set<Post> = []
        for number in directory.numbers {
            guard let file = directory.segments[number] else { continue }
            decoderPosts.forEachPost(in: file.bytes) { present.insert($0) }
        }
        for post in returned where !present.contains(post) {
            if !decoderPosts.deleted.contains(post) && !destroyed.contains(post) {
                return fail("\(post) returned and is gone from the log")
            }
        }
    }

    private mutating func fail(_ message: String) {
        if failure == nil { failure = message }
    }
}

/// Turns records back into the model's posts.
final class PostDecoder {
    var tornWhole: Set<Simulation.Post> = []
    var deleted: Set<Simulation.Post> = []

    private static let pattern: [UInt8] = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }

    /// A post's payload: its size in 4 bytes, then bytes derived from its sequence number.
    static func payload(of post: Simulation.Post) -> [UInt8] {
        let size = UInt32(post.size).littleEndian
        var bytes = [UInt8](repeating: 0, count: 4)
        withUnsafeBytes(of: size) { bytes.replaceSubrange(0..<4, with: $0) }
        let start = Int(post.sequence % 251)
        bytes += pattern[start..<(start + post.size)]
        return bytes
    }

    static func post(of message: TransportMessage, payload: [UInt8]) -> Simulation.Post? {
        guard payload.count >= 4 else { return nil }
        let size = Int(payload[0..<4].withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) })
        let post = Simulation.Post(poster: message.sender.instance, sequence: message.sequence, size: size)
        return payload == Self.payload(of: post) ? post : nil
    }

    func post(_ envelope: LogScanner.Envelope, in bytes: [UInt8]) -> Simulation.Post? {
        var decoder = EnvelopeDecoder()
        guard let message = LogCursorStateMachine.decode(envelope, in: bytes, with: &decoder),
            case .encoded(let encoded) = message.payload
        else { return nil }
        return Self.post(of: message, payload: Array(encoded.payload))
    }

    func forEachPost(in bytes: [UInt8], _ body: (Simulation.Post) -> Void) {
        _ = LogScanner.walk(bytes, base: 0, fileSize: bytes.count) { item in
            if case .record(_, _, _, let envelope) = item, let post = post(envelope, in: bytes) { body(post) }
        }
    }
}

/// The records of a segment as `index@offset`, for a replay's trace.
func describe(_ bytes: [UInt8]) -> String {
    var parts: [String] = []
    _ = LogScanner.walk(bytes, base: 0, fileSize: bytes.count) { item in
        switch item {
        case .record(let start, _, let index, _): parts.append("\(index)@\(start)")
        case .start(let index, _): parts.append("start\(index)")
        case .rollover(let next, let index, _): parts.append("→\(next)(\(index))")
        case .damaged(let index): parts.append("damaged\(index)")
        case .skipped(let start, let end): parts.append("skip\(start)-\(end)")
        case .piece(let index, let isLast): parts.append("piece\(index)\(isLast ? "L" : "M")")
        }
    }
    return parts.joined(separator: ",")
}
