@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// The layout of a file-plus-signal directory:
///
///     DIR/                                   0700 (0770 shared with a group)
///     DIR/logs/NAME/lock                     serializes appends (flock); the newest segment number
///     DIR/logs/NAME/00000000000000000001.log segments of framed envelopes (``LogFormat``), 0600
///     DIR/cursors/IDENTITY/NAME              a durable reader's position (``FileCursor``):
///                                            "C_SEG C_OFF D_SEG D_OFF INDEX LOG"
///     DIR/cursors/IDENTITY/NAMESPACE.*       the cursor of every name in the namespace without one
///
/// The log is the truth. Every record is a `NotificationEnvelope` framed in
/// checksummed fragments (``LogFormat``), which let a reader tell a complete
/// record from a torn or corrupt one; the wake-up signal carries nothing.
enum FileLog {
    /// Bytes the longest path below the directory adds: the temporary file
    /// a namespace marker is saved through, `/cursors/` + an identity (64
    /// bytes) + `/` + a namespace (200) + `.*` + `.tmp.` + a process ID (up
    /// to 10 digits) + `.` + a save count (up to 20). A segment's temporary
    /// file adds at most 246.
    static let longestSuffix = 9 + 64 + 1 + NotificationName.maximumLength + 2 + 5 + 10 + 1 + 20

    /// The longest directory the file transport takes, in bytes, where files
    /// reach `pathLimit`-byte paths: 3,783 on Linux, 711 on Apple platforms.
    static func maximumDirectoryLength(pathLimit: Int = SystemCalls.maximumPathLength) -> Int {
        pathLimit - longestSuffix
    }

    /// Throws ``TypedNotificationError/Code/pathTooLong``, naming the
    /// directory and the limit, for a directory longer than
    /// ``maximumDirectoryLength(pathLimit:)``: every path the transport makes
    /// later fits, so none fails, or a cursor goes unsaved, for its length.
    static func checkDirectory(
        _ directory: String, pathLimit: Int = SystemCalls.maximumPathLength
    ) throws(TypedNotificationError) {
        let limit = maximumDirectoryLength(pathLimit: pathLimit)
        guard directory.utf8.count > limit else { return }
        throw TypedNotificationError(
            code: .pathTooLong,
            message:
                "the directory \(directory) is \(directory.utf8.count) bytes; the file transport takes at most \(limit) here (files reach \(pathLimit)-byte paths, and a cursor's temporary file adds up to \(longestSuffix) bytes). Choose a shorter directory"
        )
    }

    static func logsDirectory(_ root: String) -> String { root + "/logs" }
    static func cursorsDirectory(_ root: String) -> String { root + "/cursors" }
    static func nameDirectory(_ root: String, _ name: NotificationName) -> String { root + "/logs/" + name.rawValue }

    /// Makes `name`'s folder, and `DIR/logs` first when someone removed it
    /// (`rm -rf DIR/logs`): never `DIR` itself, whose removal ends the
    /// transport.
    static func prepareNameDirectory(
        _ root: String, _ name: NotificationName, sharing: DirectorySharing
    ) throws(TypedNotificationError) {
        try inNameDirectory(root, name, sharing: sharing) {}
    }

    /// Runs `body`, which makes a file in `name`'s folder, after
    /// ``prepareNameDirectory(_:_:sharing:)``; both again when the folder
    /// was removed meanwhile (see ``SharedDirectory/inside(chain:sharing:_:)``).
    static func inNameDirectory<Result: ~Copyable>(
        _ root: String, _ name: NotificationName, sharing: DirectorySharing,
        _ body: () throws(TypedNotificationError) -> Result
    ) throws(TypedNotificationError) -> Result {
        try SharedDirectory.inside(chain: [logsDirectory(root), nameDirectory(root, name)], sharing: sharing, body)
    }
    static func lockPath(_ root: String, _ name: NotificationName) -> String { nameDirectory(root, name) + "/lock" }

    /// The notify(3) name that signals appends to `name`'s log in the
    /// directory `directory` on Apple platforms. The directory is named by
    /// its identity (device and inode, through any link), never by its
    /// spelling: `/var/…` and `/private/var/…`, one directory on Darwin, share
    /// their names, and two directories never wake each other. The name keeps
    /// notify(3)'s rules: reverse DNS in ASCII letters, digits, `.`, `-` and
    /// `_`, outside Apple's `com.apple.` and the process-local `self.`
    /// namespaces, and at most ``maximumSignalNameLength`` bytes.
    static func signalName(_ directory: FileIdentity, _ name: NotificationName) -> String {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for value in [directory.device, directory.inode] {
            for shift in stride(from: 0, to: 64, by: 8) {
                hash = (hash ^ ((value >> UInt64(shift)) & 0xFF)) &* 0x100_0000_01B3
            }
        }
        let digits = String(hash, radix: 16)
        return signalNamespace + String(repeating: "0", count: 16 - digits.count) + digits + "." + name.rawValue
    }

    /// Every signal name starts so.
    static let signalNamespace = "org.typednotifications."

    /// The longest signal name: the namespace, 16 hex digits, a dot and the
    /// longest notification name (200 bytes).
    static var maximumSignalNameLength: Int { signalNamespace.utf8.count + 17 + NotificationName.maximumLength }

    /// The identity of the directory at `root`, following links as every
    /// open of a path in it does; `nil` when it cannot be read.
    static func directoryIdentity(_ root: String) -> FileIdentity? {
        guard case .success(let info) = SystemCalls.status(root), info.kind == .directory else { return nil }
        return info.identity
    }

    static func segmentPath(_ root: String, _ name: NotificationName, _ number: UInt64) -> String {
        let digits = String(number)
        return nameDirectory(root, name) + "/" + String(repeating: "0", count: max(0, 20 - digits.count)) + digits
            + ".log"
    }

    /// The segment numbers present, oldest first. Anything else in the
    /// directory (a foreign file, a symbolic link, a directory, a file larger
    /// than any segment can be) is ignored.
    static func segments(_ root: String, _ name: NotificationName) -> [UInt64] {
        let directory = nameDirectory(root, name)
        guard case .success(let files) = SystemCalls.directoryEntries(directory) else { return [] }
        return files.compactMap { file -> UInt64? in
            guard file.utf8.count == 24, file.hasSuffix(".log"),
                let number = UInt64(file.prefix(20)), number > 0,
                case .success(let info) = SystemCalls.linkStatus(directory + "/" + file),
                info.kind == .regular, info.size <= LogFormat.maximumSegmentBytes
            else { return nil }
            return number
        }.sorted()
    }

    /// Whether segment `number` exists as a regular file; a symbolic link or
    /// anything else planted under a segment's name does not count.
    static func isSegment(_ root: String, _ name: NotificationName, _ number: UInt64) -> Bool {
        isSegment(at: segmentPath(root, name, number))
    }

    /// Whether `path` is a regular file (not followed if a symbolic link).
    static func isSegment(at path: String) -> Bool {
        guard case .success(let info) = SystemCalls.linkStatus(path) else { return false }
        return info.kind == .regular
    }

    /// Opens a segment (or the lock file) for reading or appending: never
    /// through a symbolic link, never blocking, and only a regular file of
    /// this user with the sharing's mode (see ``SharedFile``).
    static func open(_ path: String, create: Bool, sharing: DirectorySharing) -> Result<
        FileDescriptor, TypedNotificationError
    > {
        create
            ? SharedFile.open(path, .readWrite, creating: .create, sharing: sharing)
            : SharedFile.open(path, .readOnly, sharing: sharing)
    }

    /// Opens a segment at `path` to read it, asking that the reads leave its
    /// access time alone where this user owns it (`O_NOATIME`): a reader
    /// reads a segment's status on every pass, and with the multigrain
    /// timestamps of recent Linux kernels each read after an append would
    /// otherwise write the inode (see *Design decisions*).
    static func openForReading(_ path: String, sharing: DirectorySharing) -> Result<
        FileDescriptor, TypedNotificationError
    > {
        switch SharedFile.open(path, .readOnly, sharing: sharing) {
        case .success(let file):
            SystemCalls.skipAccessTime(file)
            return .success(file)
        case .failure(let error):
            return .failure(error)
        }
    }

    /// Reads `count` bytes at `offset` (fewer at the end of the file).
    static func read(_ file: borrowing FileDescriptor, at offset: Int, count: Int) -> Result<[UInt8], Errno> {
        SystemCalls.readBytes(file, at: offset, count: count)
    }

    /// The log identifier in the start mark of segment `number` (see
    /// ``LogFormat/FragmentType/start``), or `nil` when it cannot be read or
    /// has no whole start mark.
    static func logIdentifier(
        _ root: String, _ name: NotificationName, _ number: UInt64, sharing: DirectorySharing
    ) -> UInt64? {
        guard case .success(let file) = open(segmentPath(root, name, number), create: false, sharing: sharing),
            case .success(let bytes) = read(file, at: 0, count: LogFormat.startSize)
        else { return nil }
        return LogFormat.logIdentifier(inStart: bytes)
    }

    /// Where a segment's readable part ends, and the index of the record
    /// that comes next there: a record boundary, before any torn tail. A
    /// segment closed by a rollover mark ends at the start of the next
    /// segment. Reads the segment's last block, or the whole segment when
    /// that block does not tell the index. `nil` when it cannot be read or
    /// is of format 1.
    static func end(of file: borrowing FileDescriptor, number: UInt64) -> LogPosition? {
        guard case .success(let info) = SystemCalls.fileExtent(file), info.size <= LogFormat.maximumSegmentBytes,
            case .success(let head) = read(file, at: 0, count: LogFormat.startSize)
        else { return nil }
        // Not a segment of this log unless it opens with a start mark (an
        // empty one is a segment being created by hand: its end is its start).
        if head.isEmpty { return LogPosition(segment: number, offset: 0) }
        guard let log = LogFormat.logIdentifier(inStart: head) else { return nil }
        var from = LogFormat.blockStart(of: max(0, info.size - 1))
        while true {
            guard case .success(let bytes) = read(file, at: from, count: info.size - from) else { return nil }
            var index: UInt64?
            var next: UInt64?
            let walked = LogScanner.walk(bytes, base: from, fileSize: info.size) { item in
                if case .rollover(let segment, _, _) = item { next = segment }
                index = LogScanner.index(after: item, following: index)
            }
            if walked.stop == .formatOne { return nil }
            if let next { return LogPosition(segment: next, offset: 0, index: index, log: log) }
            if index == nil && from > 0 {
                from = 0
                continue
            }
            return LogPosition(segment: number, offset: walked.end, index: index, log: log)
        }
    }

    /// Every record of a whole segment, in order: where each starts and
    /// ends, its index and its message (`nil` when it does not decode).
    static func records(in bytes: [UInt8], decoder: inout EnvelopeDecoder) -> [(
        start: Int, end: Int, index: UInt64, message: TransportMessage?
    )] {
        var found: [(start: Int, end: Int, index: UInt64, message: TransportMessage?)] = []
        _ = LogScanner.walk(bytes, base: 0, fileSize: bytes.count) { item in
            guard case .record(let start, let end, let index, let envelope) = item else { return }
            found.append((start, end, index, LogCursorStateMachine.decode(envelope, in: bytes, with: &decoder)))
        }
        return found
    }
}
