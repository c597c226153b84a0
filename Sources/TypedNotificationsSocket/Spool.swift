@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// The spool: where a poster leaves notifications for an endpoint whose socket
/// cannot take more (a suspended or slow process), so that they outlive the
/// poster.
///
/// A Unix datagram socket queues at most `net.unix.max_dgram_qlen` datagrams
/// (10 by default) whatever their size; a poster cannot keep the rest in its
/// own memory, because it may exit first. So each endpoint has a directory,
/// `DIR/spool/ID/`, and a poster that finds the socket full appends to a file
/// of its own there:
///
///     DIR/spool/ID/POSTER-GENERATION.spool   0600, one writer: the poster
///
/// A file is the magic `TNSPOOL1` and then records, each one kind byte and a
/// body: `E` and a complete envelope (which carries its own length and
/// CRC-32C), or `D` and a drop record: a little-endian `UInt64` count and a
/// CRC-32C of the kind byte and the count, then the envelope, without
/// payload, of the last notification dropped: its name, sender and sequence
/// number, so the endpoint counts each loss once even when the same poster's
/// next notification reveals the gap again.
///
/// **Order per poster.** A poster that spooled for an endpoint keeps spooling
/// for it until the endpoint has taken its file, so nothing it sends later can
/// overtake what waits in the file. The endpoint takes a file under the
/// file's `flock`: it locks the file, first receives every datagram already
/// queued on its socket (those were sent before the file was started), then
/// reads the file, unlinks it and unlocks. A poster appends under the same
/// lock and finds an unlinked file (link count 0) taken: it then sends
/// directly again. Both sides use `LOCK_NB` only: a poster whose file is being
/// taken starts the next generation; an endpoint that finds a file locked
/// (a poster mid-append) comes back a moment later. Neither ever waits for
/// the other, so a stopped process on either side stalls nobody.
///
/// **Bounded.** A poster spools at most
/// ``SocketTransportConfiguration/spoolLimitPerEndpoint`` bytes for one
/// endpoint, less what the endpoint's spool already holds when it starts a
/// file. Past that it records how many notifications of each name it dropped
/// (one drop record per run of drops, updated in place), and the post reports
/// the endpoint as one that did not take it. The endpoint adds the count to the
/// next delivery's ``NotificationDelivery/missed``.
enum Spool {
    static let magic: [UInt8] = Array("TNSPOOL1".utf8)
    static let envelopeKind = UInt8(ascii: "E")
    static let dropKind = UInt8(ascii: "D")
    /// How many datagrams the endpoint receives, at most, before it reads a
    /// file: everything queued when it locked the file, which the kernel caps
    /// at `max_dgram_qlen` + 1.
    static let socketDrainLimit = 4_096
    /// How many files an endpoint locks and merges at once: enough for
    /// hundreds of short-lived posters, few enough for any descriptor limit.
    static let filesPerPass = 256
    /// How often an endpoint tries a file's lock, 20 µs apart, before it
    /// leaves the file to a pass 2 ms later.
    static let lockAttempts = 10
    /// How long an endpoint lets a spool file fill before taking it, during
    /// a burst.
    static let settleNanoseconds: UInt64 = 1_000_000
    /// An endpoint that took a spool file less than this long ago is in a
    /// burst.
    static let burstNanoseconds: UInt64 = 10_000_000

    static func directory(_ base: String) -> String { base + "/spool" }
    static func directory(_ base: String, endpoint: String) -> String { base + "/spool/" + endpoint }

    static func fileName(poster: String, generation: UInt32) -> String {
        let digits = String(generation, radix: 16)
        return poster + "-" + String(repeating: "0", count: max(0, 8 - digits.count)) + digits + ".spool"
    }

    /// The poster and generation a spool file name stands for, or `nil`.
    static func parseFileName(_ name: String) -> (poster: String, generation: UInt32)? {
        let utf8 = Array(name.utf8)
        guard utf8.count == 16 + 1 + 8 + 6, name.hasSuffix(".spool"), utf8[16] == UInt8(ascii: "-") else {
            return nil
        }
        let poster = String(decoding: utf8[0..<16], as: UTF8.self)
        guard SocketRegistry.isIdentifier(poster),
            let generation = UInt32(String(decoding: utf8[17..<25], as: UTF8.self), radix: 16)
        else { return nil }
        return (poster, generation)
    }

    /// A drop record's bytes: `count` dropped, the last of which `marker`
    /// (a payload-less envelope) stands for.
    static func dropRecord(count: UInt64, marker: EncodedNotification) -> [UInt8] {
        var bytes: [UInt8] = [dropKind]
        bytes.appendLittleEndian(count)
        bytes.appendLittleEndian(bytes.withUnsafeBytes { CRC32C.checksum($0) })
        marker.withUnsafeEnvelope { bytes.append(contentsOf: $0) }
        return bytes
    }

    /// The payload-less envelope a drop record carries for `message`.
    static func dropMarker(for message: TransportMessage) -> EncodedNotification? {
        try? NotificationEnvelope.encode(
            name: message.name, sender: message.sender, sequence: message.sequence, timestamp: message.timestamp
        ) { _ in }
    }

    /// What one spool file held.
    enum Record {
        case envelope(TransportMessage)
        /// `count` notifications dropped, the last of which `marker` (a
        /// message without payload) stands for.
        case dropped(count: Int, marker: TransportMessage)
        /// An envelope whose payload is over the receiver's limit: refused unread.
        case oversized(MissedNotifications)

        /// Who the record says wrote it.
        var sender: NotificationSender? {
            switch self {
            case .envelope(let message), .dropped(_, let message): message.sender
            case .oversized(let report): report.sender
            }
        }

        /// When it was posted, if the record says.
        var monotonicNanoseconds: UInt64? {
            switch self {
            case .envelope(let message), .dropped(_, let message): message.timestamp.monotonicNanoseconds
            case .oversized: nil
            }
        }

        /// What a drop record reports.
        var report: MissedNotifications? {
            guard case .dropped(let count, let marker) = self else { return nil }
            return MissedNotifications(
                count: count, name: marker.name, sender: marker.sender, lastSequence: marker.sequence)
        }
    }

    /// The envelope record that starts at `offset` in `bytes`, when its
    /// payload is over `decoder`'s limit and its header, name and endpoint
    /// are there: what it says of itself, and its length with its kind byte.
    static func oversized(_ bytes: [UInt8], at offset: Int, decoder: inout EnvelopeDecoder) -> (
        report: MissedNotifications, length: Int
    )? {
        guard offset < bytes.count, bytes[offset] == envelopeKind else { return nil }
        return bytes.withUnsafeBytes { raw in
            let record = UnsafeRawBufferPointer(rebasing: raw[(offset + 1)...])
            guard let report = decoder.oversized(record),
                let length = try? NotificationEnvelope.recordLength(in: record)
            else { return nil }
            return (report, 1 + length)
        }
    }

    /// Parses a whole file. Stops at the first record that is not valid (a
    /// torn tail, or bytes someone else wrote) and reports it as malformed;
    /// never traps, whatever the bytes.
    static func parse(_ bytes: [UInt8], decoder: inout EnvelopeDecoder) -> (records: [Record], malformed: Bool) {
        let parsed = parse(bytes, startingFile: true, decoder: &decoder, isWhole: true)
        return (parsed.records, parsed.malformed)
    }

    /// Parses the records of `bytes`, which start the file (with its magic)
    /// when `startingFile`. Unless `isWhole`, a record that goes on past the
    /// end is left for more bytes: `next` is where it starts.
    static func parse(_ bytes: [UInt8], startingFile: Bool, decoder: inout EnvelopeDecoder, isWhole: Bool) -> (
        records: [Record], next: Int, malformed: Bool
    ) {
        var offset = 0
        if startingFile {
            guard bytes.count >= magic.count else { return ([], 0, isWhole && !bytes.isEmpty) }
            guard bytes[0..<magic.count].elementsEqual(magic) else { return ([], 0, true) }
            offset = magic.count
        }
        var records: [Record] = []
        while offset < bytes.count {
            let kind = bytes[offset]
            if !isWhole, kind == envelopeKind || kind == dropKind {
                // Whole here, or does it go on into the next chunk? A length
                // is believed only up to the envelope's hard limit; an
                // invalid one is reported by the decode below.
                let header = kind == dropKind ? 13 : 1
                guard offset + header < bytes.count else { return (records, offset, false) }
                do {
                    let length = try bytes.withUnsafeBytes { raw throws(TypedNotificationError) in
                        try NotificationEnvelope.recordLength(
                            in: UnsafeRawBufferPointer(rebasing: raw[(offset + header)...]))
                    }
                    guard let length, offset + header + length <= bytes.count else { return (records, offset, false) }
                } catch {}
            }
            if kind == envelopeKind {
                if let (message, end) = try? decoder.decode(bytes, at: offset + 1) {
                    records.append(.envelope(message))
                    offset = end
                    continue
                }
                // Whole, checksum and all, but over the receiver's limit:
                // refused, and reading goes on after it.
                guard let refused = oversized(bytes, at: offset, decoder: &decoder),
                    refused.report.lastSequence != nil
                else { return (records, offset, true) }
                records.append(.oversized(refused.report))
                offset += refused.length
            } else if kind == dropKind {
                // kind, count (8), CRC (4), payload-less envelope
                guard offset + 13 <= bytes.count else { return (records, offset, true) }
                let (count, stored, computed) = bytes.withUnsafeBytes { all in
                    (
                        all.loadLittleEndian(UInt64.self, at: offset + 1),
                        all.loadLittleEndian(UInt32.self, at: offset + 9),
                        CRC32C.checksum(UnsafeRawBufferPointer(rebasing: all[offset..<(offset + 9)]))
                    )
                }
                guard stored == computed, let (marker, end) = try? decoder.decode(bytes, at: offset + 13) else {
                    return (records, offset, true)
                }
                records.append(.dropped(count: Int(clamping: count), marker: marker))
                offset = end
            } else {
                return (records, offset, true)
            }
        }
        return (records, offset, false)
    }
}

/// One open spool file of a poster, and what it knows about it.
final class SpoolFile: @unchecked Sendable {
    // Sendable: only the send in progress (one at a time, see
    // SocketRoutingSlot) reads or writes `size` and `lastDrop`; other
    // threads (a flush) read only the `let` descriptor.
    let descriptor: FileDescriptor
    let generation: UInt32
    /// Bytes in the file.
    var size: Int
    /// Bytes the file may grow to before posts are dropped.
    let allowance: Int
    /// The drop record written last, while nothing was written after it.
    var lastDrop: (name: NotificationName, offset: Int, size: Int, count: UInt64)?

    init(descriptor: consuming FileDescriptor, generation: UInt32, size: Int, allowance: Int) {
        self.descriptor = descriptor
        self.generation = generation
        self.size = size
        self.allowance = allowance
    }
}

/// A poster's spool for one endpoint: the file it appends to while the
/// endpoint has not taken it. Used by the send in progress, one at a time;
/// other threads only look at ``file``, which is behind a lock. Makes only
/// non-blocking calls (`flock` with `LOCK_NB`).
final class SpoolWriter: @unchecked Sendable {
    // Sendable: `nextGeneration`, `nextLivenessCheck` and `startedFile` are read and
    // written only by the send in progress (one at a time, see
    // SocketRoutingSlot); the current file is behind `current`'s lock,
    // which no system call is made under.
    /// The transport's directory, and the endpoint whose spool this writes.
    let base: String
    let endpoint: String
    /// The endpoint's spool folder, `base/spool/endpoint`.
    let directory: String
    let poster: String
    let sharing: DirectorySharing
    let limit: Int
    private let current = Locked<SpoolFile?>(nil)
    /// The file this poster appends to, while the endpoint has not taken it.
    private(set) var file: SpoolFile? {
        get { current.withLock { $0 } }
        set { current.withLock { $0 = newValue } }
    }
    private var nextGeneration: UInt32 = 0
    private var nextLivenessCheck: UInt64 = 0
    // A file was started since `takeStartedFile` was last asked.
    private var startedFile = false

    /// Whether a file was started since the last call (see
    /// `SocketPeer.nudgeIfSpoolStarted`).
    func takeStartedFile() -> Bool {
        defer { startedFile = false }
        return startedFile
    }

    /// How often a poster that spools for an endpoint checks that the
    /// endpoint still lives: 20 ms.
    static let livenessCheckNanoseconds: UInt64 = 20_000_000

    /// Whether to check now that the endpoint lives: the first time, then at
    /// most once every ``livenessCheckNanoseconds``.
    func livenessCheckIsDue(now: UInt64) -> Bool {
        guard now >= nextLivenessCheck else { return false }
        nextLivenessCheck = now &+ Self.livenessCheckNanoseconds
        return true
    }

    init(base: String, endpoint: String, poster: String, sharing: DirectorySharing, limit: Int) {
        self.base = base
        self.endpoint = endpoint
        directory = Spool.directory(base, endpoint: endpoint)
        self.poster = poster
        self.sharing = sharing
        self.limit = max(0, limit)
    }

    /// Whether this poster has a file the endpoint has not taken yet; while it
    /// does, every post for the endpoint goes to the spool.
    var isActive: Bool { file != nil }

    enum Outcome {
        /// In the file: the endpoint will read it.
        case spooled
        /// The endpoint took the file: send directly again.
        case taken
        /// Over the limit: not spooled, but counted in a drop record.
        case dropped
        /// The file system refused (full, gone, no permission).
        case failed(Errno)
    }

    /// Appends to the current file, or says it was taken.
    func append(_ encoded: EncodedNotification, of message: TransportMessage) -> Outcome {
        guard let current = file else { return .taken }
        switch SystemCalls.tryLockFile(current.descriptor) {
        case .success(true):
            break
        case .success(false):
            // The endpoint is taking this file right now: everything in it is
            // on its way. Start the next one, which it reads after this one.
            file = nil
            return start(with: encoded, of: message)
        case .failure(let error):
            return .failed(error)
        }
        defer { SystemCalls.unlockFile(current.descriptor) }
        guard case .success(let info) = SystemCalls.fileStatus(current.descriptor), info.links > 0 else {
            file = nil
            return .taken
        }
        return write(encoded, of: message, to: current)
    }

    /// Starts a file after a send would block, and writes the first record.
    func start(with encoded: EncodedNotification, of message: TransportMessage) -> Outcome {
        let used = Self.bytesSpooled(in: directory)
        let allowance = max(0, limit - used)
        let generation = nextGeneration
        nextGeneration &+= 1
        let finalName = Spool.fileName(poster: poster, generation: generation)
        let temporary = "." + finalName
        // Reached through folders that are no link, each step: a spool/
        // swapped for one leads the file nowhere its reader would not look
        // (it fails, and the post says so), never to another folder.
        let folder: FileDescriptor
        do throws(Errno) {
            folder = try SystemCalls.openFolder(["spool", endpoint], under: base).get()
        } catch {
            return .failed(error)
        }
        let descriptor: FileDescriptor
        do throws(Errno) {
            descriptor = try SystemCalls.openFile(
                temporary, in: folder, .writeOnly, options: [.create, .exclusive, .noFollow],
                permissions: sharing.fileMode
            ).get()
        } catch {
            return .failed(error)
        }
        SocketRegistry.grantSharedMode(descriptor, sharing: sharing)
        let created = SpoolFile(descriptor: descriptor, generation: generation, size: 0, allowance: allowance)
        if case .failure(let error) = SystemCalls.writeAll(created.descriptor, Spool.magic) {
            _ = SystemCalls.removeFile(temporary, in: folder)
            return .failed(error)
        }
        created.size = Spool.magic.count
        let outcome = write(encoded, of: message, to: created)
        if case .failed = outcome {
            _ = SystemCalls.removeFile(temporary, in: folder)
            return outcome
        }
        // Only a complete file appears under its real name.
        if case .failure(let error) = SystemCalls.renameFile(temporary, toEntry: finalName, in: folder) {
            _ = SystemCalls.removeFile(temporary, in: folder)
            return .failed(error)
        }
        file = created
        startedFile = true
        return outcome
    }

    private func write(_ encoded: EncodedNotification, of message: TransportMessage, to file: SpoolFile) -> Outcome {
        let recordSize = 1 + encoded.envelopeRange.count
        if file.size + recordSize <= file.allowance {
            // One write per record: a reader never sees half of one.
            var record = [UInt8]()
            record.reserveCapacity(recordSize)
            record.append(Spool.envelopeKind)
            encoded.withUnsafeEnvelope { record.append(contentsOf: $0) }
            // At the tracked end, never O_APPEND: a drop record is rewritten
            // in place, which `pwrite` on an O_APPEND file cannot do on Linux.
            let result = record.withUnsafeBytes { SystemCalls.writeAll(file.descriptor, $0, at: file.size) }
            if case .failure(let error) = result {
                _ = SystemCalls.truncate(file.descriptor, to: file.size)
                return .failed(error)
            }
            file.size += recordSize
            file.lastDrop = nil
            return .spooled
        }
        guard let marker = Spool.dropMarker(for: message) else { return .failed(.invalidArgument) }
        // One record per run of drops of a name, rewritten in place (same
        // name and sender, so the same size) as the run grows.
        if let last = file.lastDrop, last.name == message.name {
            let count = last.count &+ 1
            let record = Spool.dropRecord(count: count, marker: marker)
            if record.count == last.size {
                let result = record.withUnsafeBytes { SystemCalls.writeAll(file.descriptor, $0, at: last.offset) }
                if case .failure(let error) = result { return .failed(error) }
                file.lastDrop = (message.name, last.offset, last.size, count)
                return .dropped
            }
        }
        let record = Spool.dropRecord(count: 1, marker: marker)
        if case .failure(let error) = record.withUnsafeBytes({
            SystemCalls.writeAll(file.descriptor, $0, at: file.size)
        }) {
            _ = SystemCalls.truncate(file.descriptor, to: file.size)
            return .failed(error)
        }
        file.lastDrop = (message.name, file.size, record.count, 1)
        file.size += record.count
        return .dropped
    }

    /// Whether the endpoint has taken every file this poster wrote for it.
    var isTaken: Bool {
        guard let current = file else { return true }
        guard case .success(let info) = SystemCalls.fileStatus(current.descriptor) else { return true }
        if info.links == 0 {
            file = nil
            return true
        }
        return false
    }

    /// Bytes in the spool files of an endpoint's directory.
    static func bytesSpooled(in directory: String) -> Int {
        guard case .success(let names) = SystemCalls.directoryEntries(directory) else { return 0 }
        var total = 0
        // Dot files are not spool files (the endpoint's registration file).
        for name in names where !name.hasPrefix(".") {
            if case .success(let info) = SystemCalls.linkStatus(directory + "/" + name),
                info.kind == .regular
            {
                total = total.addingSaturating(info.size)
            }
        }
        return total
    }
}
