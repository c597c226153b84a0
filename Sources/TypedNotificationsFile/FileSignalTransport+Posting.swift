@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// The send path: envelopes appended to their names' logs, a run of one
// name under one lock with one write, and the appenders kept between posts.
extension FileSignalTransport {
    /// Appends the envelope to its name's log.
    ///
    /// - Throws: ``TypedNotificationError/Code/storageFull`` when the disk or the
    ///   file-size limit is reached; nothing partial is kept.
    @_spi(TransportAuthoring) public func send(_ message: TransportMessage) throws(TypedNotificationError) {
        let encoded = try core.envelope(of: message, kind: "file")
        if let failure = append(CollectionOfOne(encoded), named: message.name).failure { throw failure }
    }

    /// Appends the envelopes to their names' logs: each run of one name
    /// under one lock with one write (a group commit), as long as it fits in
    /// the segment. Stops at the first that fails (a full disk, say);
    /// nothing partial is kept.
    @_spi(TransportAuthoring) public func send(batch messages: [TransportMessage]) -> TransportBatchResult {
        var result = TransportBatchResult()
        var envelopes: [EncodedNotification] = []
        envelopes.reserveCapacity(messages.count)
        var index = 0
        while index < messages.count {
            let name = messages[index].name
            envelopes.removeAll(keepingCapacity: true)
            while index + envelopes.count < messages.count, messages[index + envelopes.count].name == name {
                do throws(TypedNotificationError) {
                    envelopes.append(try core.envelope(of: messages[index + envelopes.count], kind: "file"))
                } catch {
                    result.failure = error
                    break
                }
            }
            let (appended, failure) = append(envelopes, named: name)
            result.sent += appended
            index += appended
            if let failure = failure ?? result.failure {
                result.failure = failure
                return result
            }
        }
        return result
    }

    /// Appends to one name's log with its appender, holding no lock while
    /// the appender works: the appender is taken out of the table and put
    /// back after. A concurrent caller of the same name (the center never
    /// makes one, direct callers might) opens an appender of its own, and
    /// the log's `flock` orders the two as it orders two processes.
    private func append<Envelopes: RandomAccessCollection<EncodedNotification>>(
        _ envelopes: Envelopes, named name: NotificationName
    ) -> (appended: Int, failure: TypedNotificationError?) where Envelopes.Index == Int {
        let (isOpen, idle) = appenders.withLock { table in
            table.isOpen ? (true, table.idle.removeValue(forKey: name)) : (false, nil)
        }
        guard isOpen else {
            return (0, TypedNotificationError(code: .closed, message: "post of \(name) to a closed file transport"))
        }
        var appender = idle
        var appended = 0
        while appended < envelopes.count {
            if appender == nil || appender?.isRemoved == true {
                // The first post of this name, or its log was removed or
                // renamed away since (rm -rf, mv): start it (again) at its
                // path, never writing into files no reader there opens.
                do throws(TypedNotificationError) {
                    appender = try LogAppender(
                        root: directory, name: name, configuration: configuration, counters: counters)
                } catch {
                    return (appended, error)
                }
                let identity = FileLog.directoryIdentity(directory)
                signalDirectory.withLock { $0 = identity }
            }
            guard let current = appender else { break }
            let (count, failure) = current.append(envelopes.dropFirst(appended))
            appended += count
            if let failure {
                putBack(current, named: name)
                return (appended, failure)
            }
            // Stopped early without a failure: the log was removed; go on in a new one.
        }
        if let appender { putBack(appender, named: name) }
        // Apple platforms: readers' change events do not see an append.
        if appended > 0, DirectoryMonitor.usesSignals, let identity = signalDirectory.withLock({ $0 }) {
            DirectoryMonitor.postSignal(FileLog.signalName(identity, name))
        }
        return (appended, nil)
    }

    /// The notify(3) name that wakes readers of `name` in this directory on
    /// Apple platforms (see `FileLog.signalName`); `nil` while the directory
    /// cannot be read.
    package func signalName(for name: NotificationName) -> String? {
        signalDirectory.withLock { $0 }.map { FileLog.signalName($0, name) }
    }

    /// Keeps `appender` for the next post of `name`. At most
    /// ``idleAppendersKept`` are kept, two descriptors each: a poster of
    /// more names closes one (any) to keep another, and its next post
    /// opens it again. Closed after the lock, never under it.
    private func putBack(_ appender: LogAppender, named name: NotificationName) {
        let evicted = appenders.withLock { table -> LogAppender? in
            guard table.isOpen, table.idle[name] == nil else { return nil }
            var evicted: LogAppender?
            if table.idle.count >= Self.idleAppendersKept, let victim = table.idle.keys.first {
                evicted = table.idle.removeValue(forKey: victim)
            }
            table.idle[name] = appender
            return evicted
        }
        withExtendedLifetime(evicted) {}
    }

    /// How many names' appenders a poster keeps open between posts.
    static var idleAppendersKept: Int { 256 }
}
