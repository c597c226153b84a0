import NotificationPlatform

/// Appends envelopes to one name's log, serialized with every other process by
/// an exclusive `flock` on the name's lock file.
///
/// Before each append it checks the tail written since its last look: a
/// record cut short by a writer that was killed mid-append is cut off (the
/// torn tail is repaired). A write that fails (a full disk, RLIMIT_FSIZE) is
/// cut back the same way, so no partial record stays and nothing before it is
/// touched.
final class LogAppender: @unchecked Sendable {
    // Sendable: one thread uses an appender at a time. It lives either in
    // its transport's table of idle appenders, touched only under that
    // table's lock, or in the hands of the one send that took it out of the
    // table (under the same lock) and puts it back when done; a concurrent
    // send of the same name finds no appender there and opens its own.
    private let root: String
    private let name: NotificationName
    private let configuration: FileSignalConfiguration
    private let lock: FileDescriptor
    private var segmentNumber: UInt64
    // The path of segment `segmentNumber + 1`, checked on every append.
    private var nextSegmentPath = ""
    private var segment: FileDescriptor
    // Bytes of the active segment known to hold only complete records; -1: unknown.
    private var validatedEnd = -1
    private let counters: FileSignalCounters

    init(
        root: String,
        name: NotificationName,
        configuration: FileSignalConfiguration,
        counters: FileSignalCounters
    ) throws(TypedNotificationError) {
        self.root = root
        self.name = name
        self.configuration = configuration
        self.counters = counters
        try SharedDirectory.prepare(FileLog.nameDirectory(root, name), sharing: configuration.sharing)
        let sharing = configuration.sharing
        lock = try FileLog.open(FileLog.lockPath(root, name), create: true, sharing: sharing).get()
        // The newest segment; a number something else occupies (a FIFO or
        // a link planted there) is skipped, never opened.
        var number = FileLog.segments(root, name).last ?? 1
        while case .success = SystemCalls.linkStatus(FileLog.segmentPath(root, name, number)),
            !FileLog.isSegment(root, name, number)
        {
            number += 1
            guard number < 64 + (FileLog.segments(root, name).last ?? 1) else {
                throw TypedNotificationError(
                    code: .insecureDirectory,
                    message: "the log of \(name) is crowded with files that are not segments; remove them"
                )
            }
        }
        segment = try FileLog.open(FileLog.segmentPath(root, name, number), create: true, sharing: sharing).get()
        segmentNumber = number
        nextSegmentPath = FileLog.segmentPath(root, name, number + 1)
    }

    /// Whether the log this appender holds was found removed (`rm -rf`):
    /// its newest segment is no longer linked. Appending through it would
    /// write into deleted files; the transport starts a new appender.
    private(set) var isRemoved = false

    /// Appends envelopes in order, each whole or not at all, under one lock
    /// and, while they fit in the segment, with one write: a group commit.
    /// Returns how many were appended, from the first, and why the next was
    /// not. Stops early, with no failure, and sets ``isRemoved`` when the log
    /// was removed.
    func append<Envelopes: RandomAccessCollection<EncodedNotification>>(_ envelopes: Envelopes) -> (
        appended: Int, failure: TypedNotificationError?
    ) where Envelopes.Index == Int {
        if case .failure(let error) = SystemCalls.lockFile(lock, exclusive: true) {
            return (0, SharedDirectory.failure(error, "could not lock the log of \(name)"))
        }
        defer { SystemCalls.unlockFile(lock) }
        var appended = 0
        let first = envelopes.startIndex
        while appended < envelopes.count {
            let length = envelopes[first + appended].envelopeRange.count
            do throws(TypedNotificationError) {
                while true {
                    try followRollover()
                    try validateTail()
                    if isRemoved { return (appended, nil) }
                    if validatedEnd > 0 && validatedEnd + length > configuration.segmentSize {
                        try roll()
                        continue
                    }
                    break
                }
            } catch {
                return (appended, error)
            }
            // As many more as fit in this segment go out in the same write.
            var count = 1
            var total = length
            while appended + count < envelopes.count {
                let next = envelopes[first + appended + count].envelopeRange.count
                guard validatedEnd + total + next <= configuration.segmentSize else { break }
                total += next
                count += 1
            }
            let start = validatedEnd
            let result: Result<Void, Errno>
            if count == 1 {
                let envelope = envelopes[first + appended]
                result = envelope.storage.withUnsafeBytes { raw in
                    SystemCalls.writeAll(
                        segment, UnsafeRawBufferPointer(rebasing: raw[envelope.envelopeRange]), at: start)
                }
            } else {
                batch.removeAll(keepingCapacity: true)
                batch.reserveCapacity(total)
                for envelope in envelopes[(first + appended)..<(first + appended + count)] {
                    batch.append(contentsOf: envelope.storage[envelope.envelopeRange])
                }
                result = batch.withUnsafeBytes { SystemCalls.writeAll(segment, $0, at: start) }
                // A burst's buffer is not kept for good.
                if batch.capacity > Self.keptBatchCapacity { batch = [] }
            }
            if case .failure(let error) = result {
                // Cut back whatever part was written: no partial record stays.
                _ = SystemCalls.truncate(segment, to: start)
                counters.failedAppends.add(1, ordering: .relaxed)
                return (appended, Self.writeFailure(error, name: name))
            }
            validatedEnd = start + total
            appended += count
            counters.appended.add(count, ordering: .relaxed)
            counters.appendWrites.add(1, ordering: .relaxed)
        }
        return (appended, nil)
    }

    // Several envelopes are copied here to go out in one write.
    private var batch: [UInt8] = []
    private static let keptBatchCapacity = 256 * 1024

    static func writeFailure(_ error: Errno, name: NotificationName) -> TypedNotificationError {
        switch error {
        case .noSpace, .fileTooLarge, .quotaExceeded:
            return TypedNotificationError(
                code: .storageFull,
                message:
                    "could not append to the log of \(name): \(error); nothing partial was kept and earlier notifications are intact",
                cause: error
            )
        default:
            return SharedDirectory.failure(error, "could not append to the log of \(name)")
        }
    }

    /// Moves to the newest segment if another writer started one.
    private func followRollover() throws(TypedNotificationError) {
        while FileLog.isSegment(at: nextSegmentPath) {
            try open(segmentNumber + 1, create: false)
        }
    }

    /// Checks what was written since this appender last looked, and cuts off a
    /// torn tail.
    private func validateTail() throws(TypedNotificationError) {
        guard case .success(let info) = SystemCalls.fileStatus(segment) else {
            throw TypedNotificationError(code: .transportFailure, message: "could not inspect the log of \(name)")
        }
        // After following any rollover this is the newest segment, which
        // retention never deletes: unlinked, the whole log was removed.
        if info.links == 0 {
            isRemoved = true
            return
        }
        let size = info.size
        guard size != validatedEnd else { return }
        let start = validatedEnd >= 0 && validatedEnd < size ? validatedEnd : 0
        guard case .success(let bytes) = FileLog.read(segment, at: start, count: size - start) else {
            throw TypedNotificationError(code: .transportFailure, message: "could not read the log of \(name)")
        }
        let (offset, _) = FileLog.walk(bytes, record: { _, _ in })
        let goodEnd = start + offset
        if goodEnd < size {
            _ = SystemCalls.truncate(segment, to: goodEnd)
            counters.repairedTails.add(1, ordering: .relaxed)
        }
        validatedEnd = goodEnd
    }

    /// Starts the next segment and applies the retention policy. A number that
    /// something else occupies (a planted link) is skipped, not followed.
    private func roll() throws(TypedNotificationError) {
        var next = segmentNumber + 1
        while case .success = SystemCalls.linkStatus(FileLog.segmentPath(root, name, next)),
            !FileLog.isSegment(root, name, next)
        {
            next += 1
            guard next < segmentNumber + 64 else {
                throw TypedNotificationError(
                    code: .insecureDirectory,
                    message: "the log of \(name) is crowded with files that are not segments; remove them"
                )
            }
        }
        try open(next, create: true)
        FileRetention.apply(
            root: root, name: name, configuration: configuration, counters: counters, keeping: segmentNumber)
    }

    private func open(_ number: UInt64, create: Bool) throws(TypedNotificationError) {
        segment = try FileLog.open(
            FileLog.segmentPath(root, name, number), create: create, sharing: configuration.sharing
        ).get()
        segmentNumber = number
        nextSegmentPath = FileLog.segmentPath(root, name, number + 1)
        validatedEnd = -1
    }
}
