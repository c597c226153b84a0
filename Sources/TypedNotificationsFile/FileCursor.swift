import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// A place in a name's log: a segment and a byte offset in it, and, when
/// known, the index of the record that comes next (see ``LogFormat``), which
/// tells how many a reader missed when it finds that record gone. Positions
/// compare and hash by place alone.
struct LogPosition: Comparable, Hashable, Sendable, CustomStringConvertible {
    var segment: UInt64
    var offset: Int
    var index: UInt64? = nil
    /// The identifier of the log this is a position in (see
    /// ``LogFormat/FragmentType/start``), when known; not compared.
    var log: UInt64? = nil

    static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.segment, lhs.offset) < (rhs.segment, rhs.offset)
    }

    static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.segment == rhs.segment && lhs.offset == rhs.offset
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(segment)
        hasher.combine(offset)
    }

    var description: String { "\(segment) \(offset)" }

    /// The later of two positions; `next`, a position handed over after
    /// `self`, when it is in another log (the log was started again between
    /// them, and its positions start again too).
    func advanced(to next: Self) -> Self {
        if let log, let other = next.log, log != other { return next }
        return Swift.max(self, next)
    }
}

/// A durable reader's saved state in `DIR/cursors/IDENTITY/NAME`, replaced
/// atomically (written to a temporary file, then renamed):
///
///     COMMITTED-SEGMENT COMMITTED-OFFSET DELIVERED-SEGMENT DELIVERED-OFFSET [NEXT-INDEX [LOG]]
///
/// *Committed* is the end of the last record every observer handled, in
/// order: where the next run starts. *Delivered* is the end of the last
/// record handed to the center: what lies between the two may have been
/// handled by a run that crashed, so the next run marks it as a redelivery.
/// *Next index* is the index of the record after the committed position, so
/// a run that finds that record deleted by retention is told exactly how
/// many it missed; files written before the log had record indexes lack it.
/// *Log* is the identifier of the log the positions are in, so a log
/// removed and started again is never read from a position in the old one.
/// A file of the first version holds only the committed position.
struct FileCursor: Equatable, Sendable {
    var committed: LogPosition
    var delivered: LogPosition

    static func path(root: String, identity: String, name: NotificationName) -> String {
        FileLog.cursorsDirectory(root) + "/" + identity + "/" + name.rawValue
    }

    /// What was found where a cursor is kept.
    enum Loaded: Equatable {
        /// No cursor: a new identity.
        case missing
        case valid(FileCursor)
        /// Something that is not a cursor this library wrote: the reason.
        case invalid(String)
    }

    /// Where a durable identity that observes `namespace` says so:
    /// `DIR/cursors/IDENTITY/NAMESPACE.*`, a cursor at the first record of a
    /// log. It stands for the cursor of every name in the namespace that
    /// has none: a name that appeared while the identity was away is read
    /// from its first record, and retention keeps it for the identity as
    /// for a cursor (see ``loadCovering(root:identity:name:sharing:)``).
    /// `*` is in no name, so no name's cursor can have the marker's path.
    static func namespacePath(root: String, identity: String, namespace: NotificationNamespace) -> String {
        FileLog.cursorsDirectory(root) + "/" + identity + "/" + namespace.rawValue + ".*"
    }

    /// The cursor a namespace marker stands for: the first record of a log.
    static let namespaceStart = FileCursor(
        committed: LogPosition(segment: 1, offset: 0, index: 0), delivered: LogPosition(segment: 1, offset: 0))

    /// What a durable identity found where its marker for a namespace is kept.
    enum Marked: Equatable {
        /// None: the identity's first run in the namespace. It is written now.
        case created
        /// A valid marker: the identity observed the namespace before.
        case existed
        /// Something that is not a marker (the reason): the identity may
        /// have observed the namespace before, or not.
        case damaged(String)
    }

    /// Looks at `identity`'s marker for `namespace` and writes it when it
    /// is missing; `nil` when it was missing and could not be written. A
    /// damaged one is left for ``repairNamespaceMark(root:identity:namespace:sharing:)``.
    static func markNamespace(
        root: String, identity: String, namespace: NotificationNamespace, sharing: DirectorySharing
    ) -> Marked? {
        let path = namespacePath(root: root, identity: identity, namespace: namespace)
        switch load(at: path, sharing: sharing) {
        case .valid: return .existed
        case .invalid(let reason): return .damaged(reason)
        case .missing: return namespaceStart.save(at: path, sharing: sharing) ? .created : nil
        }
    }

    /// Replaces a damaged marker with a valid one; returns whether it could
    /// (not when a directory is in its place).
    static func repairNamespaceMark(
        root: String, identity: String, namespace: NotificationNamespace, sharing: DirectorySharing
    ) -> Bool {
        namespaceStart.save(at: namespacePath(root: root, identity: identity, namespace: namespace), sharing: sharing)
    }

    /// `name`'s cursor, or, when it has none, the marker of the nearest
    /// namespace that contains it and that `identity` observes (`except`
    /// one, whose marker is being written by its first run). With no valid
    /// marker but one that cannot be read, `.invalid`: the name may have
    /// appeared while the identity was away, so it is not taken for new.
    static func loadCovering(
        root: String, identity: String, name: NotificationName, sharing: DirectorySharing,
        except: NotificationNamespace? = nil
    ) -> Loaded {
        let own = load(root: root, identity: identity, name: name, sharing: sharing)
        guard case .missing = own else { return own }
        var found = Loaded.missing
        NotificationNamespace.forEach(containing: name) { namespace in
            guard namespace != except else { return }
            let path = namespacePath(root: root, identity: identity, namespace: namespace)
            switch (load(at: path, sharing: sharing), found) {
            case (.valid(let marker), _): found = .valid(marker)
            case (.invalid(let reason), .missing): found = .invalid("its namespace marker cannot be used: \(reason)")
            default: break
            }
        }
        return found
    }

    /// Reads a cursor file, never blocking on what someone planted there.
    static func load(root: String, identity: String, name: NotificationName, sharing: DirectorySharing) -> Loaded {
        load(at: path(root: root, identity: identity, name: name), sharing: sharing)
    }

    /// Reads the cursor file at `path`. Only a path that names nothing is
    /// `.missing`; one that cannot be looked at (`EACCES`, `ENOTDIR`, a
    /// path too long) is `.invalid`, never taken for a new identity.
    static func load(at path: String, sharing: DirectorySharing) -> Loaded {
        switch SystemCalls.linkStatus(path) {
        case .success: break
        case .failure(.noSuchFile): return .missing
        case .failure(let error): return .invalid("could not look at \(path): \(error)")
        }
        let file: FileDescriptor
        switch SharedFile.open(path, .readOnly, sharing: sharing) {
        case .success(let opened): file = opened
        case .failure(let error): return .invalid(error.message)
        }
        guard case .success(let bytes) = FileLog.read(file, at: 0, count: 128) else {
            return .invalid("could not read \(path)")
        }
        return parse(bytes).map(Loaded.valid) ?? .invalid("\(path) does not hold a cursor")
    }

    /// The cursor in a file's bytes, or `nil`.
    static func parse(_ bytes: [UInt8]) -> FileCursor? {
        guard bytes.count < 128, bytes.last == UInt8(ascii: "\n") else { return nil }
        let parts = bytes.dropLast().split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
        let numbers = parts.map { UInt64(String(decoding: $0, as: UTF8.self)) }
        guard [2, 4, 5, 6].contains(numbers.count), numbers.allSatisfy({ $0 != nil }) else { return nil }
        let values = numbers.compactMap { $0 }
        guard values[0] > 0, values[1] <= UInt64(Int.max), values.count < 6 || values[5] != 0 else { return nil }
        let committed = LogPosition(
            segment: values[0], offset: Int(values[1]), index: values.count >= 5 ? values[4] : nil,
            log: values.count == 6 ? values[5] : nil)
        guard values.count >= 4 else { return FileCursor(committed: committed, delivered: committed) }
        guard values[2] > 0, values[3] <= UInt64(Int.max) else { return nil }
        let delivered = LogPosition(segment: values[2], offset: Int(values[3]), log: committed.log)
        guard delivered >= committed else { return nil }
        return FileCursor(committed: committed, delivered: delivered)
    }

    private static let saves = Atomic<UInt64>(0)

    /// The file's bytes.
    var bytes: [UInt8] {
        var line = "\(committed) \(delivered)"
        if let index = committed.index {
            line += " \(index)"
            if let log = committed.log { line += " \(log)" }
        }
        return Array((line + "\n").utf8)
    }

    /// Writes the cursor: a temporary file, then a rename over the old one (a
    /// FIFO or anything else planted there is replaced, never opened).
    @discardableResult
    func save(root: String, identity: String, name: NotificationName, sharing: DirectorySharing) -> Bool {
        save(at: Self.path(root: root, identity: identity, name: name), sharing: sharing)
    }

    /// Writes the cursor to `final` atomically.
    func save(at final: String, sharing: DirectorySharing) -> Bool {
        // A name of its own per save: the reader thread and a thread that
        // commits after close may save at once, and neither may remove or
        // rename the other's half-written file.
        let temporary =
            final + ".tmp." + String(SystemProcess.id) + "." + String(Self.saves.add(1, ordering: .relaxed).oldValue)
        guard
            case .success(let file) = SharedFile.open(
                temporary, .writeOnly, creating: [.create, .exclusive], sharing: sharing)
        else { return false }
        guard case .success = SystemCalls.writeAll(file, bytes) else {
            _ = SystemCalls.removeFile(temporary)
            return false
        }
        guard case .success = SystemCalls.renameFile(temporary, to: final) else {
            _ = SystemCalls.removeFile(temporary)
            return false
        }
        return true
    }
}

/// Which records a durable reader handed to its center were handled, as a
/// pure state machine: the committed position moves past a record once it
/// and every record before it were handled.
///
/// Records are handed over in log order and get increasing tokens; they may
/// be handled out of order (one observer's buffer drops a newer one while an
/// older one is still being handled).
struct CursorCommitStateMachine: Sendable {
    /// The end of the last record handled with all before it.
    private(set) var committed: LogPosition
    /// The end of the last record handed over.
    private(set) var delivered: LogPosition
    // The records handed over and not yet committed, oldest first;
    // `firstToken` is the token of the oldest.
    private var pending = FIFOBuffer<(end: LogPosition, handled: Bool)>()
    private var firstToken: UInt64 = 0

    init(committed: LogPosition, delivered: LogPosition) {
        self.committed = committed
        self.delivered = max(committed, delivered)
    }

    /// Records handed over and not yet committed.
    var inFlight: Int { pending.count }

    /// A record ending at `end` is handed over. Returns its token.
    mutating func handOver(endingAt end: LogPosition) -> UInt64 {
        let token = firstToken &+ UInt64(pending.count)
        pending.append((end, false))
        delivered = delivered.advanced(to: end)
        return token
    }

    /// The record with `token` was handled. Returns whether the committed
    /// position moved.
    mutating func handled(_ token: UInt64) -> Bool {
        guard token >= firstToken, token - firstToken < UInt64(pending.count) else { return false }
        pending.update(at: Int(token - firstToken)) { $0.handled = true }
        var moved = false
        while let oldest = pending.first, oldest.handled {
            committed = committed.advanced(to: oldest.end)
            pending.removeFirst()
            firstToken &+= 1
            moved = true
        }
        return moved
    }
}
