@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// How long a file-plus-signal log keeps notifications.
public struct FileRetentionPolicy: Sendable, Hashable {
    /// Bytes a name's log may use before its oldest segments are deleted. Default 64 MiB.
    public var maximumBytes: Int
    /// Age after which a segment is deleted, or `nil` for no limit. Default `nil`.
    public var maximumAge: Duration?
    /// How far behind the log's end a durable identity's cursor may be and
    /// still keep segments from being deleted. An identity further behind
    /// (abandoned, or away for long) no longer holds them: retention deletes
    /// them as for everyone, and when it returns it goes on at the oldest
    /// record left and is told exactly how many it missed. Default 1 GiB;
    /// `nil`: no limit (one abandoned identity then keeps every segment).
    public var maximumBytesBehind: Int?

    /// Creates a policy.
    public init(
        maximumBytes: Int = 64 * 1024 * 1024, maximumAge: Duration? = nil,
        maximumBytesBehind: Int? = 1024 * 1024 * 1024
    ) {
        self.maximumBytes = maximumBytes
        self.maximumAge = maximumAge
        self.maximumBytesBehind = maximumBytesBehind
    }
}

/// Limits and policies of a ``FileSignalTransport``.
public struct FileSignalConfiguration: Sendable {
    /// Who besides the owner may use the directory. Default: ``DirectorySharing/ownerOnly``.
    public var sharing: DirectorySharing
    /// The size at which a log starts a new segment, from 4 KiB to 64 MiB.
    /// Default 4 MiB.
    public var segmentSize: Int
    /// What old segments are deleted; a segment a durable reader still needs is kept.
    public var retention: FileRetentionPolicy
    /// How often to look at the logs when ``usesChangeEvents`` is off, the
    /// only way readers learn of posts then. With change events there is no
    /// periodic look: every change a look would find comes as an event, so
    /// an idle reader sleeps until one does. Default 1 second.
    public var pollInterval: Duration
    /// Whether to wake on change events (inotify on Linux). Turn it off for a
    /// file system that does not deliver them (some network file systems);
    /// then only ``pollInterval`` wakes readers. Default `true`.
    public var usesChangeEvents: Bool

    /// Whether the reading thread sleeps in the read of its change events
    /// where it can (Linux), rather than in the system's event queue. Tests
    /// turn it off to run, on Linux, the path a process with many file
    /// transports takes (and Apple platforms' loop).
    package var sleepsInRead = true

    /// Whether the reading thread sleeps in the read of its change events
    /// however many such threads the process has already (see
    /// `ChangeSleeper.ownQueuesAllowed`): tests run the contract suite on
    /// that path whatever else runs beside them.
    package var sleepsInReadBeyondLimit = false

    /// The loop group a transport shares a thread of when it does not
    /// sleep in a read of its own: the process's; tests that hold a
    /// handler on purpose give one of their own.
    package var loopGroup = LoopGroup.shared

    /// How many looks a reader makes, 1 s and then twice as long apart,
    /// while `DIR/logs` is missing after a change (see *Design
    /// decisions*). Tests set none, to show that a removal is noticed
    /// without them.
    package var looksWhileLogsMissing = 6

    /// Creates a configuration.
    public init(
        sharing: DirectorySharing = .ownerOnly,
        segmentSize: Int = 4 * 1024 * 1024,
        retention: FileRetentionPolicy = FileRetentionPolicy(),
        pollInterval: Duration = .seconds(1),
        usesChangeEvents: Bool = true
    ) {
        self.sharing = sharing
        self.segmentSize = min(64 * 1024 * 1024, max(4096, segmentSize))
        self.retention = retention
        self.pollInterval = pollInterval
        self.usesChangeEvents = usesChangeEvents
    }
}

/// Counters of a ``FileSignalTransport``.
public struct FileSignalStatistics: Hashable, Sendable {
    /// Envelopes this transport appended.
    public var appended: Int
    /// Writes that appended them. Posts that queue up while an append is in
    /// progress are appended together, under one lock with one write, so
    /// under concurrent posting this is less than ``appended``.
    package var appendWrites: Int
    /// Appends that failed (a full disk, a file-size limit) and were cut back.
    public var failedAppends: Int
    /// Torn records, left by a writer killed mid-append, that this
    /// transport's appends stepped over (to the next 32 KiB block; never cut
    /// off, so nothing another process wrote is ever destroyed).
    public var repairedTails: Int
    /// Records read from the logs and handed to the center.
    package var delivered: Int
    /// Corrupt stretches skipped while reading; each is reported, never delivered.
    public var corruptRecordsSkipped: Int
    /// Records whose payload was over the center's
    /// the hub's `maximumPayloadSize` (``NotificationHub/init(endpoint:transport:maximumPayloadSize:)``): never decoded,
    /// reported to the center as undecodable and missed.
    public var refusedOversized: Int
    /// Old segments deleted by the retention policy.
    public var deletedSegments: Int
    /// Durable cursors that could not be used: not a regular file of this
    /// user (a FIFO, a link), not a cursor, or pointing past the end of the
    /// log. Each such identity resumed at the oldest record the log still
    /// had, every record up to the end marked as a redelivery; see
    /// ``FileSignalTransport/cursorProblem(for:)``.
    public var invalidCursors: Int
    /// Times a segment was found shorter than what this transport had read
    /// (truncated by someone): reading went on at the first record it had not
    /// delivered, nothing delivered twice.
    public var shrunkSegments: Int
    /// Times the segment being read was removed or replaced under the reader
    /// (its log deleted, say): reading went on in the log as it is now, from
    /// its oldest segment's start.
    public var vanishedSegments: Int
    /// Files in a log refused because they were not a regular file of this
    /// user with the sharing's mode (a FIFO, a link, mode 0666): never opened
    /// for reading, never read.
    public var refusedFiles: Int
}

/// The log appenders of a ``FileSignalTransport`` not in use, and whether
/// it takes posts (from `open` until `close`): one lock per post for both.
struct AppenderTable {
    var idle: [NotificationName: LogAppender] = [:]
    var isOpen = false
}

@_spi(TransportAuthoring) extension FileSignalStatistics: CountedStatistics {
    /// Each count, a slot of the live ``Counters``.
    public enum Count: Int, CaseIterable, Sendable {
        case appended, appendWrites, failedAppends, repairedTails, delivered, corruptRecordsSkipped, deletedSegments,
            invalidCursors, shrunkSegments, vanishedSegments, refusedFiles, refusedOversized
    }

    /// A snapshot of `count(c)` for every count `c`.
    public init(_ count: (Count) -> Int) {
        self.init(
            appended: count(.appended),
            appendWrites: count(.appendWrites),
            failedAppends: count(.failedAppends),
            repairedTails: count(.repairedTails),
            delivered: count(.delivered),
            corruptRecordsSkipped: count(.corruptRecordsSkipped),
            refusedOversized: count(.refusedOversized),
            deletedSegments: count(.deletedSegments),
            invalidCursors: count(.invalidCursors),
            shrunkSegments: count(.shrunkSegments),
            vanishedSegments: count(.vanishedSegments),
            refusedFiles: count(.refusedFiles))
    }
}
