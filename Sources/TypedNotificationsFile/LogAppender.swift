@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Appends envelopes to one name's log (see ``LogFormat``), serialized with
/// every other process by an exclusive `flock` on the name's lock file: the
/// driver of a ``LogWriterStateMachine``, which decides, performing its
/// actions through ``LogFiles``. So a post either lands where readers find it
/// or throws, whatever other processes did to the log since (see the machine).
final class LogAppender: @unchecked Sendable {
    // Sendable: one thread uses an appender at a time. It lives either in
    // its transport's table of idle appenders, touched only under that
    // table's lock, or in the hands of the one send that took it out of the
    // table (under the same lock) and puts it back when done; a concurrent
    // send of the same name finds no appender there and opens its own.
    private let files: any LogFiles
    private let counters: Counters<FileSignalStatistics>
    private var machine: LogWriterStateMachine
    // The segment the machine appends to, and the one it inspects.
    private var current: (any LogSegmentFile)?
    private var inspected: (any LogSegmentFile)?
    // The bytes of one write: fragments and padding.
    private var batch: [UInt8] = []
    private static let keptBatchCapacity = 256 * 1024

    /// An appender of `name`'s log in a shared directory.
    convenience init(
        root: String,
        name: NotificationName,
        configuration: FileSignalConfiguration,
        counters: Counters<FileSignalStatistics>
    ) throws(TypedNotificationError) {
        self.init(
            files: try SystemLogFiles(root: root, name: name, configuration: configuration, counters: counters),
            name: name, segmentSize: configuration.segmentSize, counters: counters)
    }

    /// An appender of the log in `files`.
    init(files: any LogFiles, name: NotificationName, segmentSize: Int, counters: Counters<FileSignalStatistics>) {
        self.files = files
        self.counters = counters
        self.machine = LogWriterStateMachine(name: name, segmentSize: segmentSize)
    }

    /// Whether the log this appender holds was found removed (`rm -rf`):
    /// its segment and its lock file are no longer linked. Appending through
    /// it would write into deleted files; the transport starts a new appender.
    var isRemoved: Bool { machine.isRemoved }

    /// Appends envelopes in order, each whole or not at all, under one lock
    /// and, while they fit in the segment, with one write: a group commit.
    /// Returns how many were appended, from the first, and why the next was
    /// not. Stops early, with no failure, and sets ``isRemoved`` when the log
    /// was removed.
    func append<Envelopes: RandomAccessCollection<EncodedNotification>>(_ envelopes: Envelopes) -> (
        appended: Int, failure: TypedNotificationError?
    ) where Envelopes.Index == Int {
        do throws(TypedNotificationError) {
            try files.lock()
        } catch {
            return (0, error)
        }
        defer {
            files.unlock()
            inspected = nil
            if batch.capacity > Self.keptBatchCapacity { batch = [] }
        }
        var action = machine.startAppend(count: envelopes.count)
        while true {
            let event: LogWriterStateMachine.Event
            switch action {
            case .finish(let appended, let failure):
                return (appended, failure)
            case .append(let first, let offset, let index):
                event = append(envelopes[(envelopes.startIndex + first)...], at: offset, index: index)
            case .measure:
                event = current?.status().map { .measured(size: $0.size, links: $0.links) } ?? .failed
            case .checkLogRemoved:
                event = .answer(files.isRemoved)
            case .read(let offset, let count):
                event = current?.read(at: offset, count: count).map { .read($0) } ?? .failed
            case .listSegments:
                event = .segments(files.segments())
            case .readNewestCreated:
                event = .newestCreated(files.newestCreated())
            case .checkExists(let number):
                event = .answer(files.exists(number))
            case .checkIsSegment(let number):
                event = .answer(files.isSegment(number))
            case .open(let number):
                event = replaceCurrent { () throws(TypedNotificationError) in try files.open(number) }
            case .create(let number, let bytes):
                event = replaceCurrent { () throws(TypedNotificationError) in try files.create(number, holding: bytes) }
            case .write(let bytes, let offset):
                event = Self.written(current?.write(bytes, at: offset))
            case .repairTail(let offset, let count):
                event = Self.written(current?.write([UInt8](repeating: 0, count: count), at: offset))
                counters.add(to: .repairedTails)
            case .truncate(let length):
                current?.truncate(to: length)
                event = .done
            case .readStart(let number):
                event = files.readStart(of: number, count: LogFormat.startSize).map { .read($0) } ?? .failed
            case .newLogIdentifier:
                event = .identifier(files.newLogIdentifier())
            case .applyRetention(let active):
                files.applyRetention(keeping: active)
                event = .done
            case .inspect(let number):
                event = inspect(number)
            case .writeInspected(let bytes, let offset):
                event = Self.written(inspected?.write(bytes, at: offset))
            }
            action = machine.receive(event)
        }
    }

    /// Frames what fits of `envelopes` and writes it with one call.
    private func append<Envelopes: RandomAccessCollection<EncodedNotification>>(
        _ envelopes: Envelopes, at offset: Int, index: UInt64
    ) -> LogWriterStateMachine.Event {
        let framed = LogWriterStateMachine.frame(
            envelopes, at: offset, index: index, segmentSize: machine.segmentSize, into: &batch)
        guard framed.count > 0 else { return .segmentFull }
        guard let current else { return .failed }
        if case .failure(let error) = current.write(batch, at: offset) {
            counters.add(to: .failedAppends)
            return .writeFailed(error)
        }
        counters.add(framed.count, to: .appended)
        counters.add(to: .appendWrites)
        return .appended(count: framed.count, end: framed.end)
    }

    private func replaceCurrent(
        _ opening: () throws(TypedNotificationError) -> any LogSegmentFile
    ) -> LogWriterStateMachine.Event {
        do throws(TypedNotificationError) {
            current = try opening()
            return .done
        } catch {
            return .error(error)
        }
    }

    private func inspect(_ number: UInt64) -> LogWriterStateMachine.Event {
        inspected = nil
        guard let file = try? files.open(number), let info = file.status(), info.size <= LogFormat.maximumSegmentBytes,
            let bytes = file.read(at: 0, count: info.size)
        else { return .failed }
        inspected = file
        return .read(bytes)
    }

    private static func written(_ result: Result<Void, Errno>?) -> LogWriterStateMachine.Event {
        switch result {
        case .success: .done
        case .failure(let error): .writeFailed(error)
        case nil: .failed
        }
    }
}
