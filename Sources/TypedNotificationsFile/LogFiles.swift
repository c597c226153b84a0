@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// The files of one name's log, as a ``LogAppender`` uses them: every system
/// call the appender makes goes through here. ``SystemLogFiles`` makes them;
/// the simulation tests answer them from memory and inject faults (a write
/// torn at any byte, a full disk, a file removed between two calls).
protocol LogFiles: AnyObject {
    /// Takes the log's exclusive lock, shared with every other process.
    func lock() throws(TypedNotificationError)
    func unlock()
    /// Whether the log itself was removed (its lock file has no name left)
    /// or renamed away: the lock file at its path is not this one.
    var isRemoved: Bool { get }
    /// The segment numbers present, oldest first.
    func segments() -> [UInt64]
    /// Whether anything (a segment or a planted file) has segment `number`'s name.
    func exists(_ number: UInt64) -> Bool
    /// Whether segment `number` is a regular file (not a link, a FIFO, ...).
    func isSegment(_ number: UInt64) -> Bool
    /// Opens segment `number` for appending.
    func open(_ number: UInt64) throws(TypedNotificationError) -> any LogSegmentFile
    /// Creates segment `number` holding `bytes`, whole or not at all, and
    /// remembers it as the newest segment number the log ever had.
    func create(_ number: UInt64, holding bytes: [UInt8]) throws(TypedNotificationError) -> any LogSegmentFile
    /// The newest segment number this log ever had, kept in its lock file,
    /// which retention and `rm` of segments leave: numbers never go back, so
    /// a reader waiting at a removed segment's number is never passed by.
    func newestCreated() -> UInt64?
    /// Applies the retention policy, keeping segment `active` and newer.
    func applyRetention(keeping active: UInt64)
    /// An identifier for a log being started (see ``LogFormat/FragmentType/start``).
    func newLogIdentifier() -> UInt64
    /// The first `count` bytes of segment `number`, read without creating
    /// or writing anything; `nil` when it cannot be read.
    func readStart(of number: UInt64, count: Int) -> [UInt8]?
}

/// One open segment.
protocol LogSegmentFile: AnyObject {
    /// Its size and how many names it has (0: removed, or no longer the
    /// file at its path).
    func status() -> (size: Int, links: Int)?
    func read(at offset: Int, count: Int) -> [UInt8]?
    func write(_ bytes: [UInt8], at offset: Int) -> Result<Void, Errno>
    func truncate(to length: Int)
}

/// The log files of one name in a shared directory, through the platform layer.
final class SystemLogFiles: LogFiles {
    private let root: String
    private let name: NotificationName
    private let configuration: FileSignalConfiguration
    private let counters: Counters<FileSignalStatistics>
    private let lockFile: FileDescriptor

    init(
        root: String, name: NotificationName, configuration: FileSignalConfiguration,
        counters: Counters<FileSignalStatistics>
    ) throws(TypedNotificationError) {
        self.root = root
        self.name = name
        self.configuration = configuration
        self.counters = counters
        let lockPath = FileLog.lockPath(root, name)
        lockFile = try FileLog.inNameDirectory(root, name, sharing: configuration.sharing) {
            () throws(TypedNotificationError) in
            try FileLog.open(lockPath, create: true, sharing: configuration.sharing).get()
        }
    }

    func lock() throws(TypedNotificationError) {
        if case .failure(let error) = SystemCalls.lockFile(lockFile, exclusive: true) {
            throw SharedDirectory.failure(error, "could not lock the log of \(name)")
        }
    }

    func unlock() { SystemCalls.unlockFile(lockFile) }

    /// Removed, or renamed away with its directory (`mv logs/NAME
    /// elsewhere`, perhaps a log made again at the path since): the lock
    /// file at the path is not this one, or there is none. Appending here
    /// would write where no reader of the path looks.
    var isRemoved: Bool {
        guard case .success(let info) = SystemCalls.fileExtent(lockFile) else { return false }
        if info.links == 0 { return true }
        switch SystemCalls.pathExtent(FileLog.lockPath(root, name)) {
        case .success(let atPath): return atPath.identity != info.identity
        case .failure(.noSuchFile), .failure(.notADirectory): return true
        case .failure: return false
        }
    }

    func segments() -> [UInt64] { FileLog.segments(root, name) }

    func exists(_ number: UInt64) -> Bool {
        if case .success = SystemCalls.linkStatus(FileLog.segmentPath(root, name, number)) { return true }
        return false
    }

    func isSegment(_ number: UInt64) -> Bool { FileLog.isSegment(root, name, number) }

    /// Never creates it: a segment removed between a listing and this open
    /// is an error, not an empty file under its name.
    func open(_ number: UInt64) throws(TypedNotificationError) -> any LogSegmentFile {
        let path = FileLog.segmentPath(root, name, number)
        return SystemSegmentFile(
            try SharedFile.open(path, .readWrite, sharing: configuration.sharing).get(), path: path)
    }

    /// Written under a temporary name, then renamed into place, so no
    /// segment is ever seen without its start mark.
    func create(_ number: UInt64, holding bytes: [UInt8]) throws(TypedNotificationError) -> any LogSegmentFile {
        let path = FileLog.segmentPath(root, name, number)
        let temporary = path + ".new." + String(SystemProcess.id)
        // The folder removed between its making and the rename (`rm -rf
        // DIR/logs` in a loop): made again, and the segment with it.
        let file = try FileLog.inNameDirectory(root, name, sharing: configuration.sharing) {
            () throws(TypedNotificationError) -> FileDescriptor in
            _ = SystemCalls.removeFile(temporary)
            let file = try SharedFile.open(
                temporary, .readWrite, creating: [.create, .exclusive], sharing: configuration.sharing
            ).get()
            if case .failure(let error) = bytes.withUnsafeBytes({ SystemCalls.writeAll(file, $0, at: 0) }) {
                _ = SystemCalls.removeFile(temporary)
                throw LogWriterStateMachine.writeFailure(error, name: name)
            }
            if case .failure(let error) = SystemCalls.renameFile(temporary, to: path) {
                _ = SystemCalls.removeFile(temporary)
                throw SharedDirectory.failure(error, "could not start a segment of the log of \(name)")
            }
            return file
        }
        if number > newestCreated() ?? 0 {
            // Best effort: without it, a log whose every segment was removed
            // starts again at the newest number left.
            _ = withUnsafeBytes(of: number.littleEndian) { SystemCalls.writeAll(lockFile, $0, at: 0) }
        }
        return SystemSegmentFile(file, path: path)
    }

    func newestCreated() -> UInt64? {
        guard case .success(let bytes) = FileLog.read(lockFile, at: 0, count: 8), bytes.count == 8 else { return nil }
        return bytes.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
    }

    func applyRetention(keeping active: UInt64) {
        FileRetention.apply(root: root, name: name, configuration: configuration, counters: counters, keeping: active)
    }

    func newLogIdentifier() -> UInt64 {
        var generator = SystemRandomNumberGenerator()
        return LogFormat.newLogIdentifier(using: &generator)
    }

    func readStart(of number: UInt64, count: Int) -> [UInt8]? {
        guard
            case .success(let file) = FileLog.open(
                FileLog.segmentPath(root, name, number), create: false, sharing: configuration.sharing),
            case .success(let bytes) = FileLog.read(file, at: 0, count: count)
        else { return nil }
        return bytes
    }
}

/// A segment open for appending.
final class SystemSegmentFile: LogSegmentFile {
    private let file: FileDescriptor
    private let path: SystemPath
    // Which file it is, learned when it was opened.
    private let identity: FileIdentity?

    init(_ file: consuming FileDescriptor, path: String) {
        identity = try? SystemCalls.fileExtent(file).get().identity
        self.file = file
        self.path = SystemPath(path)
    }

    /// Looked up at its path, in one call: its size and links while it is
    /// the file there. A segment no longer at its path (removed, renamed
    /// away with its directory, replaced) has no link for the log: the
    /// writer looks where the log goes on, as after `rm`.
    func status() -> (size: Int, links: Int)? {
        if let identity, case .success(let atPath) = SystemCalls.pathExtent(path), atPath.identity == identity {
            return (atPath.size, atPath.links)
        }
        guard case .success(let info) = SystemCalls.fileExtent(file) else { return nil }
        return (info.size, identity == nil ? info.links : 0)
    }

    func read(at offset: Int, count: Int) -> [UInt8]? {
        try? FileLog.read(file, at: offset, count: count).get()
    }

    func write(_ bytes: [UInt8], at offset: Int) -> Result<Void, Errno> {
        bytes.withUnsafeBytes { SystemCalls.writeAll(file, $0, at: offset) }
    }

    func truncate(to length: Int) {
        _ = SystemCalls.truncate(file, to: length)
    }
}
