import TypedNotifications

extension FileSignalTransport: ReportsCursorProblems {}

extension TransportEntry {
    /// An append-only log per name, with a change signal.
    package static let file = TransportEntry(
        name: "file", typeName: "FileSignalTransport",
        meeting: .directory(defaultPath: FileSignalTransport.defaultDirectory), keepsPosts: true,
        make: { (place, request) throws(TypedNotificationError) in
            var configuration = FileSignalConfiguration()
            if let group = request.loopGroup { configuration.loopGroup = group }
            if request.sharedWithGroup { configuration.sharing = .group }
            return try FileSignalTransport(
                directory: place.text, identity: request.identity, firstRead: request.firstRead,
                configuration: configuration)
        },
        list: { directory in
            let logs = FileSignalTransport.logs(in: directory)
            guard !logs.isEmpty else { return ["no logs"] }
            var lines: [String] = []
            for log in logs {
                lines.append("\(log.name)  \(log.bytes) bytes in \(log.segments) segment(s)")
                for refused in log.refusedSegments { lines.append("  refused: \(refused)") }
                for cursor in log.cursors {
                    if let problem = cursor.problem {
                        lines.append(
                            "  cursor \(cursor.identity): unusable (\(problem)); its next run reads from the oldest kept"
                                + (cursor.holdsRetention
                                    ? ", kept from retention for it" : ", past the limit: retention goes on without it")
                        )
                    } else if cursor.holdsRetention {
                        lines.append(
                            "  cursor \(cursor.identity): \(cursor.bytesBehind) bytes behind, kept from retention for it"
                        )
                    } else {
                        lines.append(
                            "  cursor \(cursor.identity): \(cursor.bytesBehind) bytes behind, past the limit: retention goes on without it"
                        )
                    }
                }
            }
            return lines
        },
        collectGarbage: { (directory) throws(TypedNotificationError) in
            "deleted \(try FileSignalTransport.applyRetention(in: directory)) old segment(s)"
        },
        warnings: { name, directory, sharing in
            FileSignalTransport.refusedSegments(of: name, in: directory, sharing: sharing).map {
                "the log of \(name) has a segment that is never read: \($0)"
            }
        })

    /// The file transport whose reading thread sleeps in the read of its
    /// change events (Linux), however many other file transports the
    /// process has: the contract suite on that path whatever runs beside it.
    package static let fileSleepingInRead = fileVariant(named: "file-sleeping-in-read") {
        $0.sleepsInReadBeyondLimit = true
    }

    /// The file transport whose reading thread sleeps in the system's event
    /// queue, as a process's file transports past its first few do on Linux,
    /// and every one does on Apple platforms.
    package static let fileInEventQueue = fileVariant(named: "file-in-event-queue") { $0.sleepsInRead = false }

    /// What a coalesced or lost notify(3) leaves on Apple platforms: no
    /// change events, only a 20 ms poll wakes a reader.
    package static let fileWithoutChangeEvents = fileVariant(named: "file-without-change-events") {
        $0.pollInterval = .milliseconds(20)
        $0.usesChangeEvents = false
    }

    /// A variant of the file transport: the same directory, another configuration.
    private static func fileVariant(
        named name: String, _ configure: (inout FileSignalConfiguration) -> Void
    ) -> TransportEntry {
        var preset = FileSignalConfiguration()
        configure(&preset)
        let variant = preset
        return TransportEntry(
            name: name, typeName: "FileSignalTransport", meeting: file.meeting, keepsPosts: true, isVariant: true,
            make: { (place, request) throws(TypedNotificationError) in
                var configuration = variant
                if let group = request.loopGroup { configuration.loopGroup = group }
                if request.sharedWithGroup { configuration.sharing = .group }
                return try FileSignalTransport(
                    directory: place.text, identity: request.identity, firstRead: request.firstRead,
                    configuration: configuration)
            })
    }
}
