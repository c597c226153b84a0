import NotificationPlatform

/// The layout of a file-plus-signal directory:
///
///     DIR/                                   0700
///     DIR/logs/NAME/lock                     serializes appends (flock)
///     DIR/logs/NAME/00000000000000000001.log segments, envelopes back to back, 0600
///     DIR/cursors/IDENTITY/NAME              a durable reader's position: "segment offset"
///
/// The log is the truth. Every record is a `NotificationEnvelope`, whose
/// length fields and CRC-32C let a reader tell a complete record from a torn
/// or corrupt one; the wake-up signal carries nothing.
enum FileLog {
    static func logsDirectory(_ root: String) -> String { root + "/logs" }
    static func cursorsDirectory(_ root: String) -> String { root + "/cursors" }
    static func nameDirectory(_ root: String, _ name: NotificationName) -> String { root + "/logs/" + name.rawValue }
    static func lockPath(_ root: String, _ name: NotificationName) -> String { nameDirectory(root, name) + "/lock" }

    /// The notify(3) name that signals appends to `name`'s log on Apple
    /// platforms; it includes a hash of the directory, so two directories
    /// never wake each other.
    static func signalName(_ root: String, _ name: NotificationName) -> String {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in root.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
        return "org.typednotifications." + String(hash, radix: 16) + "." + name.rawValue
    }

    static func segmentPath(_ root: String, _ name: NotificationName, _ number: UInt64) -> String {
        let digits = String(number)
        return nameDirectory(root, name) + "/" + String(repeating: "0", count: max(0, 20 - digits.count)) + digits
            + ".log"
    }

    /// The segment numbers present, oldest first. Anything else in the
    /// directory (a foreign file, a symbolic link, a directory) is ignored.
    static func segments(_ root: String, _ name: NotificationName) -> [UInt64] {
        let directory = nameDirectory(root, name)
        guard case .success(let files) = SystemCalls.directoryEntries(directory) else { return [] }
        return files.compactMap { file -> UInt64? in
            guard file.utf8.count == 24, file.hasSuffix(".log"),
                let number = UInt64(file.prefix(20)), number > 0,
                case .success(let info) = SystemCalls.linkStatus(directory + "/" + file),
                info.kind == .regular
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

    /// Reads `count` bytes at `offset` (fewer at the end of the file).
    static func read(_ file: borrowing FileDescriptor, at offset: Int, count: Int) -> Result<[UInt8], Errno> {
        var bytes = [UInt8](repeating: 0, count: count)
        var total = 0
        while total < count {
            let result = bytes.withUnsafeMutableBytes { raw in
                SystemCalls.readBytes(
                    file, into: UnsafeMutableRawBufferPointer(rebasing: raw[total...]), at: offset + total)
            }
            switch result {
            case .success(0): return .success(Array(bytes[..<total]))
            case .success(let read): total += read
            case .failure(let error): return .failure(error)
            }
        }
        return .success(bytes)
    }

    /// What lies at one position of a segment.
    enum Scan {
        /// A complete, valid record of this length.
        case record(Int)
        /// Not enough bytes yet for the record that starts here.
        case incomplete
        /// Not a valid record; the next valid one starts this many bytes on,
        /// or none was found in what is there.
        case corrupt(skip: Int?)
    }

    /// Looks at the record starting at `offset` within `bytes`, checking its
    /// header, its length and its checksum.
    static func scan(_ bytes: [UInt8], at offset: Int, maximumPayloadSize: Int) -> Scan {
        switch checkRecord(bytes, at: offset, maximumPayloadSize: maximumPayloadSize) {
        case .some(true):
            let length = recordLength(bytes, at: offset, maximumPayloadSize: maximumPayloadSize) ?? 0
            return .record(length)
        case .none:
            return .incomplete
        case .some(false):
            // Resynchronize: the next position that holds a whole valid record.
            var next = offset + 1
            while next + NotificationEnvelope.headerSize <= bytes.count {
                if bytes[next] == NotificationEnvelope.magic[0],
                    checkRecord(bytes, at: next, maximumPayloadSize: maximumPayloadSize) == true
                {
                    return .corrupt(skip: next - offset)
                }
                next += 1
            }
            return .corrupt(skip: nil)
        }
    }

    /// Walks the records in `bytes` from the start: calls `record` with the
    /// offset and length of each complete valid one and `corrupt` for each
    /// corrupt stretch skipped, and stops at an incomplete record or at
    /// corruption with nothing valid after it. Returns how many bytes it
    /// consumed and whether it stopped before the end.
    static func walk(
        _ bytes: [UInt8],
        record: (_ offset: Int, _ length: Int) -> Void,
        corrupt: () -> Void = {}
    ) -> (consumed: Int, stoppedShort: Bool) {
        var offset = 0
        while offset < bytes.count {
            switch scan(bytes, at: offset, maximumPayloadSize: NotificationEnvelope.payloadSizeHardLimit) {
            case .record(let length):
                record(offset, length)
                offset += length
            case .corrupt(let skip?):
                corrupt()
                offset += skip
            case .incomplete, .corrupt(nil):
                return (offset, true)
            }
        }
        return (offset, false)
    }

    /// `true` for a complete valid record, `false` for an invalid one, `nil`
    /// when more bytes are needed to tell.
    private static func checkRecord(_ bytes: [UInt8], at offset: Int, maximumPayloadSize: Int) -> Bool? {
        let available = bytes.count - offset
        let length: Int?
        do {
            length = try bytes.withUnsafeBytes { raw throws(TypedNotificationError) in
                try NotificationEnvelope.recordLength(
                    in: UnsafeRawBufferPointer(rebasing: raw[offset...]),
                    maximumPayloadSize: maximumPayloadSize
                )
            }
        } catch {
            return false
        }
        guard let length else { return nil }
        guard length <= available else { return nil }
        let stored = bytes.withUnsafeBytes { raw in
            UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: offset + length - 4, as: UInt32.self))
        }
        let computed = bytes.withUnsafeBytes { raw in
            CRC32C.checksum(UnsafeRawBufferPointer(rebasing: raw[offset..<(offset + length - 4)]))
        }
        return stored == computed
    }

    private static func recordLength(_ bytes: [UInt8], at offset: Int, maximumPayloadSize: Int) -> Int? {
        try? bytes.withUnsafeBytes { raw throws(TypedNotificationError) in
            try NotificationEnvelope.recordLength(
                in: UnsafeRawBufferPointer(rebasing: raw[offset...]),
                maximumPayloadSize: maximumPayloadSize
            )
        }
    }
}
