@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// One name's log in a file-plus-signal directory.
package struct FileLogSummary: Sendable, Hashable {
    /// The name.
    package var name: NotificationName
    /// Segments on disk.
    package var segments: Int
    /// Bytes on disk.
    package var bytes: Int
    /// Every durable cursor of this name and how far behind the end it is.
    package var cursors: [FileCursorSummary]
    /// Files under a segment's name that readers refuse, and why: not a
    /// regular file of this user with the sharing's mode, or of format 1.
    package var refusedSegments: [String] = []
}

/// A durable reader's position in one log.
package struct FileCursorSummary: Sendable, Hashable {
    /// The durable identity.
    package var identity: String
    /// Bytes of the log it has not yet handled.
    package var bytesBehind: Int
    /// Whether it keeps the segments it has not handled from retention: it
    /// is no further behind than ``FileRetentionPolicy/maximumBytesBehind``
    /// (of the default policy, for tools). When it is, retention goes on
    /// without it, and it is told on its next run how many it missed.
    package var holdsRetention: Bool
    /// Why its cursor file cannot be used, or `nil`: not a regular file of
    /// this user (a FIFO, a link), too open a mode, or not a cursor at all.
    /// Its next run starts at the oldest record the log still has, every one
    /// marked as a redelivery.
    package var problem: String?
}

extension FileSignalTransport {
    /// Every log in the directory; for tools such as `tnotify ls`. Never
    /// blocks on a file someone planted there.
    package static func logs(
        in directory: String = defaultDirectory, configuration: FileSignalConfiguration = FileSignalConfiguration()
    ) -> [FileLogSummary] {
        guard case .success(let names) = SystemCalls.directoryEntries(FileLog.logsDirectory(directory)) else {
            return []
        }
        let identities = (try? SystemCalls.directoryEntries(FileLog.cursorsDirectory(directory)).get()) ?? []
        return names.sorted().compactMap { rawName -> FileLogSummary? in
            guard let name = try? NotificationName(validating: rawName) else { return nil }
            let segments = FileLog.segments(directory, name)
            var sizes: [UInt64: Int] = [:]
            for number in segments {
                if case .success(let info) = SystemCalls.linkStatus(FileLog.segmentPath(directory, name, number)) {
                    sizes[number] = info.size
                }
            }
            let all = sizes.values.reduce(0, +)
            let end = LogPosition(segment: segments.last ?? 1, offset: sizes[segments.last ?? 1] ?? 0)
            let limit = configuration.retention.maximumBytesBehind
            let current = segments.last.flatMap {
                FileLog.logIdentifier(directory, name, $0, sharing: configuration.sharing)
            }
            let cursors = identities.sorted().compactMap { identity -> FileCursorSummary? in
                let position: LogPosition
                // Its next run starts at the oldest record: it holds the
                // whole log, within the limit (see `FileRetention.holders`).
                let holdsAll = limit.map { all <= $0 } ?? true
                switch FileCursor.loadCovering(
                    root: directory, identity: identity, name: name, sharing: configuration.sharing)
                {
                case .missing:
                    return nil
                case .invalid(let problem):
                    return FileCursorSummary(
                        identity: identity, bytesBehind: all, holdsRetention: holdsAll, problem: problem)
                case .valid(let cursor):
                    position = cursor.committed
                }
                if let saved = position.log, let current, saved != current {
                    return FileCursorSummary(
                        identity: identity, bytesBehind: all, holdsRetention: holdsAll,
                        problem:
                            "it was saved in a log since removed and started again"
                    )
                }
                guard position <= end else {
                    return FileCursorSummary(
                        identity: identity, bytesBehind: all, holdsRetention: holdsAll,
                        problem: "it points past the end of the log (\(position), the end is \(end))")
                }
                let behind = FileRetention.bytesBehind(position, sizes: sizes)
                return FileCursorSummary(
                    identity: identity, bytesBehind: behind, holdsRetention: limit.map { behind <= $0 } ?? true,
                    problem: nil)
            }
            return FileLogSummary(
                name: name, segments: segments.count, bytes: all, cursors: cursors,
                refusedSegments: refusedSegments(of: name, in: directory, sharing: configuration.sharing))
        }
    }

    /// What readers refuse among the files named like segments of `name`'s log.
    package static func refusedSegments(
        of name: NotificationName, in directory: String, sharing: DirectorySharing
    ) -> [String] {
        let folder = FileLog.nameDirectory(directory, name)
        guard case .success(let files) = SystemCalls.directoryEntries(folder) else { return [] }
        return files.sorted().compactMap { file -> String? in
            guard file.utf8.count == 24, file.hasSuffix(".log"), UInt64(file.prefix(20)) != nil else { return nil }
            let path = folder + "/" + file
            guard case .success(let info) = SystemCalls.linkStatus(path) else { return nil }
            if let problem = SharedFile.problem(with: info, sharing: sharing) { return "\(file) \(problem)" }
            if info.size > LogFormat.maximumSegmentBytes {
                return "\(file) is \(info.size) bytes, larger than any segment can be, and is never read; delete it"
            }
            guard case .success(let opened) = FileLog.open(path, create: false, sharing: sharing),
                case .success(let head) = FileLog.read(opened, at: 0, count: min(info.size, LogFormat.blockSize))
            else { return nil }
            if head.starts(with: LogFormat.formatOneMagic) {
                return "\(file) is of format 1, written by an older version, and is never read; delete it"
            }
            if head.isEmpty {
                return "\(file) is empty, which no segment ever is, and is never read; delete it"
            }
            if LogCursorStateMachine.isPlanted(head, fileSize: info.size) {
                return "\(file) holds no log segment (no start mark, no record) and is never read; delete it"
            }
            return nil
        }
    }

    /// Applies `configuration`'s retention policy to every log now; returns how
    /// many segments were deleted (0 when there is no directory).
    ///
    /// - Throws: ``TypedNotificationError/Code/insecureDirectory`` when the
    ///   directory, `logs/` or `cursors/` is a symbolic link, a file,
    ///   another user's or open to others, as a transport refuses it;
    ///   nothing is deleted then. A log whose own folder is not a real
    ///   directory is passed over.
    package static func applyRetention(
        in directory: String = defaultDirectory,
        configuration: FileSignalConfiguration = FileSignalConfiguration()
    ) throws(TypedNotificationError) -> Int {
        let folders = [directory, FileLog.logsDirectory(directory), FileLog.cursorsDirectory(directory)]
        guard try SharedDirectory.check(folders, sharing: .group) else { return 0 }
        let counters = Counters<FileSignalStatistics>()
        for summary in logs(in: directory, configuration: configuration) {
            guard case .success(let folder) = SystemCalls.linkStatus(FileLog.nameDirectory(directory, summary.name)),
                folder.kind == .directory
            else { continue }
            guard let newest = FileLog.segments(directory, summary.name).last else { continue }
            FileRetention.apply(
                root: directory,
                name: summary.name,
                configuration: configuration,
                counters: counters,
                keeping: newest
            )
        }
        return counters[.deletedSegments]
    }
}
