import Dispatch
import Foundation
import NotificationPlatform
import Synchronization

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// How long a file-plus-signal log keeps notifications.
public struct FileRetentionPolicy: Sendable, Hashable {
    /// Bytes a name's log may use before its oldest segments are deleted. Default 64 MiB.
    public var maximumBytes: Int
    /// Age after which a segment is deleted, or `nil` for no limit. Default `nil`.
    public var maximumAge: Duration?

    /// Creates a policy.
    public init(maximumBytes: Int = 64 * 1024 * 1024, maximumAge: Duration? = nil) {
        self.maximumBytes = maximumBytes
        self.maximumAge = maximumAge
    }
}

/// Limits and policies of a ``FileSignalTransport``.
public struct FileSignalConfiguration: Sendable {
    /// Who besides the owner may use the directory. Default: ``DirectorySharing/ownerOnly``.
    public var sharing: DirectorySharing
    /// The size at which a log starts a new segment. Default 4 MiB.
    public var segmentSize: Int
    /// What old segments are deleted; a segment a durable reader still needs is kept.
    public var retention: FileRetentionPolicy
    /// How often to look at the logs even without a change event: the safety
    /// net for lost events, and the only mechanism on file systems without
    /// them. Default 1 second.
    public var pollInterval: Duration
    /// Whether to wake on change events (inotify on Linux). Turn it off for a
    /// file system that does not deliver them (some network file systems);
    /// then only ``pollInterval`` wakes readers. Default `true`.
    public var usesChangeEvents: Bool

    /// Creates a configuration.
    public init(
        sharing: DirectorySharing = .ownerOnly,
        segmentSize: Int = 4 * 1024 * 1024,
        retention: FileRetentionPolicy = FileRetentionPolicy(),
        pollInterval: Duration = .seconds(1),
        usesChangeEvents: Bool = true
    ) {
        self.sharing = sharing
        self.segmentSize = max(4096, segmentSize)
        self.retention = retention
        self.pollInterval = pollInterval
        self.usesChangeEvents = usesChangeEvents
    }
}

/// Counters of a ``FileSignalTransport``.
public struct FileSignalStatistics: Hashable, Sendable {
    /// Envelopes this transport appended.
    public var appended: Int
    /// Appends that failed (a full disk, a file-size limit) and were cut back.
    public var failedAppends: Int
    /// Torn records, left by a writer killed mid-append, that this transport cut off.
    public var repairedTails: Int
    /// Records read from the logs and handed to the center.
    public var delivered: Int
    /// Corrupt stretches skipped while reading; each is reported, never delivered.
    public var corruptRecordsSkipped: Int
    /// Old segments deleted by the retention policy.
    public var deletedSegments: Int
}

final class FileSignalCounters: Sendable {
    let appended = Atomic<Int>(0)
    let failedAppends = Atomic<Int>(0)
    let repairedTails = Atomic<Int>(0)
    let delivered = Atomic<Int>(0)
    let corruptRecordsSkipped = Atomic<Int>(0)
    let deletedSegments = Atomic<Int>(0)

    var snapshot: FileSignalStatistics {
        FileSignalStatistics(
            appended: appended.load(ordering: .relaxed),
            failedAppends: failedAppends.load(ordering: .relaxed),
            repairedTails: repairedTails.load(ordering: .relaxed),
            delivered: delivered.load(ordering: .relaxed),
            corruptRecordsSkipped: corruptRecordsSkipped.load(ordering: .relaxed),
            deletedSegments: deletedSegments.load(ordering: .relaxed)
        )
    }
}

/// Durable typed notifications through a shared directory: the app-group
/// model, done right.
///
/// A post appends its envelope to the name's log and the append itself is the
/// wake-up signal (inotify on Linux; a poll every
/// ``FileSignalConfiguration/pollInterval`` as a safety net and where there are
/// no change events). Observers read what is new past their cursor. Because
/// the log is the truth, a lost or coalesced signal loses nothing, and two
/// quick posts are both kept and delivered, in order.
///
/// - A plain observer starts at the end of the log: new notifications only.
/// - A transport created with an `identity` (say `"widget"`) keeps a durable
///   cursor per name and resumes exactly where it stopped after a restart or a
///   suspension. The cursor is saved after each batch handed to the center, so
///   a crash in the middle of a batch can deliver that batch's tail again;
///   nothing is ever skipped.
/// - ``latestMessage(of:)`` reads the newest notification without observing.
/// - Segments roll by size and are deleted by ``FileRetentionPolicy`` once every
///   durable cursor is past them, so disk use stays bounded.
public final class FileSignalTransport: NotificationTransport {
    /// The shared directory.
    public let directory: String
    /// The durable identity whose cursors this transport keeps, if any.
    public let identity: String?
    /// Limits and policies.
    public let configuration: FileSignalConfiguration

    private let counters = FileSignalCounters()
    private let state: Locked<FileSignalState>
    private let appenders = Locked<[NotificationName: LogAppender]>([:])
    private let wakePipe: System.Pipe
    private let readerFinished = DispatchSemaphore(value: 0)

    /// A directory for this user: `$XDG_RUNTIME_DIR/typed-notifications-files`,
    /// else `/tmp/typed-notifications-files-<uid>`.
    public static var defaultDirectory: String {
        if let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") {
            return runtime + "/typed-notifications-files"
        }
        return "/tmp/typed-notifications-files-\(SystemProcess.userID)"
    }

    /// Creates the directory structure if needed and checks it.
    ///
    /// - Parameters:
    ///   - directory: The shared directory; created 0700 if missing.
    ///   - identity: A durable identity such as `"widget"`, following the rules
    ///     of endpoint labels; `nil` for a plain observer.
    ///   - configuration: Limits and policies.
    /// - Throws: ``TypedNotificationError`` for an insecure directory or an invalid identity.
    public init(
        directory: String = FileSignalTransport.defaultDirectory,
        identity: String? = nil,
        configuration: FileSignalConfiguration = FileSignalConfiguration()
    ) throws(TypedNotificationError) {
        let directory = directory.count > 1 && directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        if let identity, let problem = NotificationName.problem(with: identity.utf8, maximumLength: 64) {
            throw TypedNotificationError(
                code: .invalidEndpoint, message: "identity \(TypedNotificationError.quote(identity)) \(problem)")
        }
        self.directory = directory
        self.identity = identity
        self.configuration = configuration
        // A write past RLIMIT_FSIZE must fail with EFBIG, not kill the process.
        System.ignoreFileSizeSignal()
        try SharedDirectory.prepare(directory, sharing: configuration.sharing)
        try SharedDirectory.prepare(FileLog.logsDirectory(directory), sharing: configuration.sharing)
        try SharedDirectory.prepare(FileLog.cursorsDirectory(directory), sharing: configuration.sharing)
        if let identity {
            try SharedDirectory.prepare(
                FileLog.cursorsDirectory(directory) + "/" + identity, sharing: configuration.sharing)
        }
        do throws(Errno) {
            wakePipe = try System.makePipe().get()
            state = Locked(FileSignalState(monitor: try DirectoryMonitor(includingModifications: true)))
        } catch {
            throw SharedDirectory.failure(error, "could not set up change notifications for \(directory)")
        }
    }

    deinit {
        close()
    }

    /// Counters since the transport was created.
    public var statistics: FileSignalStatistics { counters.snapshot }

    /// File-plus-signal transports carry envelopes.
    public var payloadForm: TransportPayloadForm { .encoded }

    /// Starts the thread that reads the logs.
    public func open(as sender: NotificationSender, receiver: TransportReceiver) throws(TypedNotificationError) {
        try state.withLock { (state: inout FileSignalState) throws(TypedNotificationError) in
            guard case .created = state.phase else {
                throw TypedNotificationError(code: .closed, message: "this file transport was already opened")
            }
            state.phase = .open
        }
        let thread = Thread { [self] in self.runReader(receiver: receiver) }
        thread.name = "TypedNotifications.FileSignalTransport"
        thread.start()
    }

    /// Starts reading `name`'s log: at the end, or at this identity's saved cursor.
    public func subscribe(to name: NotificationName) throws(TypedNotificationError) {
        try SharedDirectory.prepare(FileLog.nameDirectory(directory, name), sharing: configuration.sharing)
        let start = startingPoint(for: name)
        try state.withLock { (state: inout FileSignalState) throws(TypedNotificationError) in
            guard case .open = state.phase else {
                throw TypedNotificationError(code: .closed, message: "subscribe on a file transport that is not open")
            }
            if state.watchIndex[name] == nil {
                do throws(Errno) {
                    let index = try state.monitor.watch(FileLog.nameDirectory(directory, name))
                    state.watchIndex[name] = index
                } catch {
                    throw SharedDirectory.failure(error, "could not watch the log of \(name)")
                }
            }
            state.readers[name] = LogReader(name: name, segment: start.segment, offset: start.offset)
            #if canImport(Darwin)
                state.signalDescriptor =
                    DarwinChangeSignal.register(
                        FileLog.signalName(directory, name),
                        descriptor: state.signalDescriptor
                    ) ?? state.signalDescriptor
            #endif
        }
        if let identity {
            FileCursor.save(
                root: directory, identity: identity, name: name, segment: start.segment, offset: start.offset,
                sharing: configuration.sharing)
        }
        wake()
    }

    /// Stops reading `name`'s log. A durable cursor stays where it is.
    public func unsubscribe(from name: NotificationName) {
        state.withLock { _ = $0.readers.removeValue(forKey: name) }
    }

    /// Appends the envelope to its name's log.
    ///
    /// - Throws: ``TypedNotificationError/Code/storageFull`` when the disk or the
    ///   file-size limit is reached; nothing partial is kept.
    public func send(_ message: TransportMessage) throws(TypedNotificationError) {
        guard case .encoded(let encoded) = message.payload else {
            throw TypedNotificationError(code: .transportFailure, message: "the file transport appends envelopes only")
        }
        guard state.withLock({ if case .open = $0.phase { true } else { false } }) else {
            throw TypedNotificationError(code: .closed, message: "post of \(message.name) to a closed file transport")
        }
        // A lock of their own: file I/O for appends never holds up the reader thread.
        try appenders.withLock { (appenders: inout [NotificationName: LogAppender]) throws(TypedNotificationError) in
            let appender: LogAppender
            if let existing = appenders[message.name] {
                appender = existing
            } else {
                appender = try LogAppender(
                    root: directory, name: message.name, configuration: configuration, counters: counters)
                appenders[message.name] = appender
            }
            try appender.append(encoded)
        }
        #if canImport(Darwin)
            DarwinChangeSignal.post(FileLog.signalName(directory, message.name))
        #endif
    }

    /// The newest notification in `name`'s log, without observing it.
    public func latestMessage(of name: NotificationName) throws(TypedNotificationError) -> TransportMessage? {
        var decoder = EnvelopeDecoder()
        for number in FileLog.segments(directory, name).reversed() {
            guard
                case .success(let file) = FileLog.open(
                    FileLog.segmentPath(directory, name, number), create: false, mode: 0),
                case .success(let info) = System.fileStatus(file),
                case .success(let bytes) = FileLog.read(file, at: 0, count: Int(info.st_size))
            else { continue }
            var newest: TransportMessage?
            _ = FileLog.walk(bytes) { offset, _ in
                newest = (try? decoder.decode(bytes, at: offset))?.message ?? newest
            }
            if let newest { return newest }
        }
        return nil
    }

    /// Stops reading and closes the logs. Idempotent.
    public func close() {
        let wasOpen = state.withLock { state -> Bool in
            defer {
                state.phase = .closed
                state.readers = [:]
            }
            if case .open = state.phase { return true }
            return false
        }
        appenders.withLock { $0 = [:] }
        guard wasOpen else { return }
        wake()
        if state.withLock({ $0.readerThread })?.isCurrent != true {
            readerFinished.wait()
        }
    }

    private func startingPoint(for name: NotificationName) -> (segment: UInt64, offset: Int) {
        if let identity, let saved = FileCursor.load(root: directory, identity: identity, name: name) {
            return saved
        }
        let newest = FileLog.segments(directory, name).last ?? 1
        var size = 0
        if case .success(let info) = System.linkStatus(FileLog.segmentPath(directory, name, newest)) {
            size = Int(info.st_size)
        }
        return (newest, size)
    }

    private func wake() {
        _ = System.writeAll(wakePipe.writeEnd, [1])
    }

    // MARK: - The reading thread

    private func runReader(receiver: TransportReceiver) {
        let usesChangeEvents = configuration.usesChangeEvents
        let monitorDescriptor = state.withLock { state -> CInt? in
            state.readerThread = ThreadIdentity.current
            return usesChangeEvents ? state.monitor.pollDescriptor : nil
        }
        defer { readerFinished.signal() }
        var decoder = EnvelopeDecoder()
        var scratch = [UInt8](repeating: 0, count: 64)
        let timeout = configuration.pollInterval.clampedMilliseconds
        while true {
            var descriptors = [pollfd(fd: wakePipe.readEnd.rawValue, events: Int16(POLLIN), revents: 0)]
            if let monitorDescriptor {
                descriptors.append(pollfd(fd: monitorDescriptor, events: Int16(POLLIN), revents: 0))
            }
            #if canImport(Darwin)
                if usesChangeEvents, let signal = state.withLock({ $0.signalDescriptor }) {
                    descriptors.append(pollfd(fd: signal, events: Int16(POLLIN), revents: 0))
                }
            #endif
            _ = System.pollDescriptors(&descriptors, timeout: max(1, timeout))
            if descriptors[0].revents != 0 {
                _ = scratch.withUnsafeMutableBytes { System.readBytes(wakePipe.readEnd, into: $0) }
            }
            #if canImport(Darwin)
                // Drain the notify(3) tokens so the descriptor stops being readable.
                for descriptor in descriptors.dropFirst()
                where descriptor.revents != 0 && descriptor.fd != monitorDescriptor {
                    _ = scratch.withUnsafeMutableBytes { Darwin.read(descriptor.fd, $0.baseAddress, $0.count) }
                }
            #endif
            // Read every subscribed log: a change event only says when to look.
            let batches = state.withLock { state -> [(NotificationName, [TransportMessage], LogReader)]? in
                guard case .open = state.phase else { return nil }
                _ = state.monitor.changes()
                return state.readers.map { name, reader in
                    (name, reader.readNew(root: directory, decoder: &decoder, counters: counters), reader)
                }
            }
            guard let batches else { return }
            for (name, messages, reader) in batches where !messages.isEmpty {
                for message in messages {
                    counters.delivered.add(1, ordering: .relaxed)
                    receiver.receive(message)
                }
                // Saved after the batch was handed over: a crash can repeat, never skip.
                if let identity {
                    let position = state.withLock { _ in (reader.segment, reader.offset) }
                    FileCursor.save(
                        root: directory,
                        identity: identity,
                        name: name,
                        segment: position.0,
                        offset: position.1,
                        sharing: configuration.sharing
                    )
                }
            }
        }
    }
}

/// What a ``FileSignalTransport`` changes after creation, under one lock.
struct FileSignalState {
    enum Phase {
        case created
        case open
        case closed
    }

    var phase: Phase = .created
    let monitor: DirectoryMonitor
    var watchIndex: [NotificationName: Int] = [:]
    var readers: [NotificationName: LogReader] = [:]
    var readerThread: ThreadIdentity?
    /// Apple platforms: the notify(3) descriptor that wakes the reader.
    var signalDescriptor: CInt?

    init(monitor: DirectoryMonitor) {
        self.monitor = monitor
    }
}

/// One subscribed name's read position, advanced only past complete, valid
/// records.
final class LogReader {
    let name: NotificationName
    private(set) var segment: UInt64
    private(set) var offset: Int
    // The segment being read, kept open between wake-ups, with the path of
    // the one after it, whose existence says this one is finished.
    private var open: OpenSegment?

    /// An open segment and the path of its successor.
    private final class OpenSegment {
        let number: UInt64
        let file: FileDescriptor
        let nextPath: String
        init(number: UInt64, file: consuming FileDescriptor, nextPath: String) {
            self.number = number
            self.file = file
            self.nextPath = nextPath
        }
    }

    init(name: NotificationName, segment: UInt64, offset: Int) {
        self.name = name
        self.segment = segment
        self.offset = offset
    }

    /// Reads the records written past the cursor, moving on to newer segments.
    func readNew(root: String, decoder: inout EnvelopeDecoder, counters: FileSignalCounters) -> [TransportMessage] {
        var messages: [TransportMessage] = []
        while true {
            if open?.number != segment {
                open = nil
                let path = FileLog.segmentPath(root, name, segment)
                guard case .success(let opened) = FileLog.open(path, create: false, mode: 0) else {
                    // Deleted by retention (or not created yet): go to the next segment there is.
                    if let next = FileLog.segments(root, name).first(where: { $0 > segment }) {
                        segment = next
                        offset = 0
                        continue
                    }
                    return messages
                }
                open = OpenSegment(
                    number: segment, file: opened, nextPath: FileLog.segmentPath(root, name, segment + 1))
            }
            guard let current = open else { return messages }
            guard case .success(let info) = System.fileStatus(current.file) else { return messages }
            let size = Int(info.st_size)
            var stoppedShort = false
            if offset < size, case .success(let bytes) = FileLog.read(current.file, at: offset, count: size - offset) {
                let walked = FileLog.walk(
                    bytes,
                    record: { position, _ in
                        if let (message, _) = try? decoder.decode(bytes, at: position) {
                            messages.append(message)
                        } else {
                            counters.corruptRecordsSkipped.add(1, ordering: .relaxed)
                        }
                    },
                    corrupt: { counters.corruptRecordsSkipped.add(1, ordering: .relaxed) }
                )
                stoppedShort = walked.stoppedShort
                offset += walked.consumed
            }
            // A newer segment means this one is finished: whatever is left is torn.
            // One lstat in the common case; a directory listing only when
            // something that is not a segment occupies the next number.
            let next: UInt64
            if FileLog.isSegment(at: current.nextPath) {
                next = segment + 1
            } else if case .success = System.linkStatus(current.nextPath),
                let found = FileLog.segments(root, name).first(where: { $0 > segment })
            {
                next = found
            } else {
                return messages
            }
            // A writer finishes a segment before it starts the next, so now this
            // one's size is final; appends made since it was measured are read
            // before moving on.
            if case .success(let final) = System.fileStatus(current.file), Int(final.st_size) > size {
                continue
            }
            if stoppedShort { counters.corruptRecordsSkipped.add(1, ordering: .relaxed) }
            segment = next
            offset = 0
        }
    }
}

extension NotificationHub where Transport == FileSignalTransport {
    /// The newest notification of type `N` in the log, with its metadata,
    /// without observing; `nil` if there is none or it does not decode as `N`.
    public func latest<N: TypedNotification>(of type: N.Type) throws(TypedNotificationError) -> DeliveredNotification<
        N
    >? {
        guard let message = try transport.latestMessage(of: N.name),
            case .encoded(let encoded) = message.payload,
            let value = try? encoded.withUnsafePayload({ try N(payload: $0) })
        else { return nil }
        return DeliveredNotification(
            notification: value,
            delivery: NotificationDelivery(
                sender: message.sender,
                sequence: message.sequence,
                timestamp: message.timestamp,
                missed: 0
            )
        )
    }
}
