@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Writes a durable identity's cursor files. A class of its own, apart
/// from the transport, so that a close that ends after the transport is
/// gone (a transport released while its thread still delivered) still
/// saves what was handled.
final class CursorSaver: Sendable {
    let directory: String
    let identity: String?
    let sharing: DirectorySharing
    /// The transport's commit table.
    let commits: Locked<CommitTable>
    // Serializes cursor file writes (see save(of:else:)).
    private let saves = SystemMutex()

    init(directory: String, identity: String?, sharing: DirectorySharing, commits: Locked<CommitTable>) {
        (self.directory, self.identity, self.sharing, self.commits) = (directory, identity, sharing, commits)
    }

    deinit {
        saves.deallocate()
    }

    /// Writes `name`'s cursor as it is now in the commit table (`fallback`,
    /// given by unsubscribe only, once the name is unsubscribed). Saves are serialized, and each writes
    /// the newest position there is when it starts writing: saves that
    /// overlap (the loop's, one drained after the loop stopped, close's own)
    /// could otherwise rename an older cursor over a newer one, and a
    /// restart would deliver again what was handled (seen once in 200 runs).
    /// The lock orders only these writes; nothing else waits for it.
    func save(of name: NotificationName, else fallback: FileCursor? = nil) {
        guard let identity else { return }
        saves.lock()
        defer { saves.unlock() }
        // Unsubscribed: only unsubscribe's own save (the fallback) writes; a
        // save that was due before must not put its older position back.
        guard let latest = commits.withLock({ $0.slots[name]?.cursor ?? $0.departed[name]?.cursor }) ?? fallback
        else { return }
        guard
            latest.save(root: directory, identity: identity, name: name, sharing: sharing)
                || (remakeCursorFolder(of: identity)
                    && latest.save(root: directory, identity: identity, name: name, sharing: sharing))
        else { return }
        commits.withLock { $0.slots[name]?.saved = latest }
    }

    /// Makes `DIR/cursors/IDENTITY` again after someone removed it (`rm -rf
    /// DIR/cursors`) under a running identity: without it, every save
    /// would fail, and the next run would be taken for the first, starting
    /// where a new identity starts. Returns whether it is there now.
    private func remakeCursorFolder(of identity: String) -> Bool {
        let cursors = FileLog.cursorsDirectory(directory)
        let chain = [cursors, cursors + "/" + identity]
        return (try? SharedDirectory.prepare(chain: chain, sharing: sharing)) != nil
    }

    /// Writes the cursors whose committed position moved since last saved.
    /// With `closing`, later commits are saved by whoever makes them, and
    /// every cursor not yet written as it is now is written before this
    /// returns: a save the loop had taken (and cleared the flag for) may
    /// still be on its way on the pool that drains a stopped loop's jobs,
    /// and close must not return before what was handled is on disk.
    func saveDue(closing: Bool = false) {
        guard identity != nil else { return }
        let due = commits.withLock { table -> [NotificationName] in
            if closing { table.isClosed = true }
            let due = table.slots.keys.filter { name in
                guard let slot = table.slots[name] else { return false }
                return slot.savePending || (closing && slot.saved != slot.cursor)
            }
            for name in due { table.slots[name]?.savePending = false }
            return due
        }
        // Each save writes the newest position there is (see save(of:else:)).
        for name in due { save(of: name) }
    }
}
