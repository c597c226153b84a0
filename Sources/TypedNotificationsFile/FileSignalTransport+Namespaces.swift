@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// A namespace observer: a reader for every log of a name in the
// namespace, those listed when it subscribes and those the event loop
// finds made later (one watch on `DIR/logs`, whose creation events name
// the new log), so following a namespace costs nothing per name that is
// not in it, whatever the number of logs.
extension FileSignalTransport {
    /// Subscribes to every name of `namespace`: the logs there now are read
    /// as a name's are (see `firstRead`, or this identity's cursors); the
    /// logs made from now on, from their first record.
    func subscribe(namespace: NotificationNamespace) throws(TypedNotificationError) {
        let subscribedAt = SystemClock.wallClockNanoseconds()
        // Covered from now on, so a name's unsubscribe keeps its reader; the
        // loop finds new logs for it once the listing below is done (a log
        // it found first would be read from its first record).
        try state.withLock { (state: inout FileCore.State) throws(TypedNotificationError) in
            _ = try state.lifecycle.opened(for: "subscribe")
            state.shared.namespaces.insert(namespace)
            state.shared.namespacesSince = state.shared.namespacesSince ?? subscribedAt
        }
        do throws(TypedNotificationError) {
            // A durable identity's first run in the namespace reads its
            // names as `firstRead` says; later runs read a name that appeared
            // while it was away from its first record (its marker). A marker
            // that cannot be read may stand for such names: each name without
            // a cursor of its own is then read from its oldest record, marked
            // (see `loadCovering`), and the marker is written anew after.
            var marked = FileCursor.Marked.existed
            if let identity {
                guard
                    let found = FileCursor.markNamespace(
                        root: directory, identity: identity, namespace: namespace, sharing: configuration.sharing)
                else {
                    throw TypedNotificationError(
                        code: .transportFailure,
                        message:
                            "could not save \(FileCursor.namespacePath(root: directory, identity: identity, namespace: namespace))"
                    )
                }
                marked = found
            }
            for name in FileLog.names(directory) where namespace.contains(name) {
                let start = startingPoint(for: name, except: marked == .created ? namespace : nil)
                try startReading(name, from: start, subscribedAt: subscribedAt, byName: false)
            }
            if let identity, case .damaged(var problem) = marked {
                counters.add(to: .invalidCursors)
                if !FileCursor.repairNamespaceMark(
                    root: directory, identity: identity, namespace: namespace, sharing: configuration.sharing)
                {
                    problem += "; it could not be replaced, so every run reads these names so"
                }
                commits.withLock { $0.namespaceProblems[namespace] = problem }
            }
        } catch {
            unsubscribe(from: .namespace(namespace))
            throw error
        }
        state.withLock { state in
            guard state.shared.namespaces.contains(namespace) else { return }
            state.shared.discovering.insert(namespace)
            state.shared.discoveringChanged = true
        }
        requestPass()
    }

    /// What `selector`'s unsubscribe stops reading: the name, unless a
    /// subscribed namespace covers it; the namespace's names that no other
    /// selector covers. Under the state lock.
    static func stopped(by selector: NotificationSelector, in shared: inout FileSignalState) -> [NotificationName] {
        switch selector {
        case .name(let name):
            guard shared.named.remove(name) != nil, !shared.namespaces.contains(where: { $0.contains(name) })
            else { return [] }
            return shared.readers.removeValue(forKey: name) == nil ? [] : [name]
        case .namespace(let namespace):
            guard shared.namespaces.remove(namespace) != nil else { return [] }
            shared.discovering.remove(namespace)
            if shared.namespaces.isEmpty { shared.namespacesSince = nil }
            let left = shared.namespaces
            let named = shared.named
            let stopped = shared.readers.keys.filter { name in
                namespace.contains(name) && !named.contains(name) && !left.contains(where: { $0.contains(name) })
            }
            for name in stopped { shared.readers[name] = nil }
            return stopped
        }
    }

    /// On the loop: starts reading the logs among `found` (entries of
    /// `DIR/logs`; `nil`: list it) whose name a namespace covers and that
    /// nobody reads yet: made after the namespace was subscribed, so read
    /// from their first record (a durable identity: from its cursor, if it
    /// has one). Returns whether any reader was added.
    func discover(_ found: [String]?) -> Bool {
        guard
            let (namespaces, since) = state.withLock({
                state -> (Set<NotificationNamespace>, Int64)? in
                guard !state.shared.discovering.isEmpty else { return nil }
                return (state.shared.discovering, state.shared.namespacesSince ?? 0)
            })
        else { return false }
        let entries = found ?? FileLog.names(directory).map(\.rawValue)
        var names: [NotificationName] = []
        for entry in entries {
            guard let name = try? NotificationName(validating: entry) else { continue }
            if namespaces.contains(where: { $0.contains(name) }) { names.append(name) }
        }
        guard !names.isEmpty else { return false }
        let unread = state.withLock { state in names.filter { state.shared.readers[$0] == nil } }
        var added = false
        for name in unread {
            let start =
                identity == nil
                ? (position: FileCursor.namespaceStart.committed, redeliverThrough: nil)
                : startingPoint(for: name)
            // Closed meanwhile: nothing more to read.
            guard (try? startReading(name, from: start, subscribedAt: since, byName: false)) != nil else {
                return added
            }
            added = true
        }
        return added
    }
}

extension FileLog {
    /// The names that have a log directory, in no order; entries that are
    /// not valid names are skipped.
    static func names(_ root: String) -> [NotificationName] {
        guard case .success(let entries) = SystemCalls.directoryEntries(logsDirectory(root)) else { return [] }
        return entries.compactMap { try? NotificationName(validating: $0) }
    }
}
