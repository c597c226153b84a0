import CTypedNotifications
import Synchronization

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// A 64-bit counter in a small file that every process using it maps into
/// memory, so reading it costs no system call: a process that changed
/// something others cache (a registry) bumps it, and the others compare it
/// with the value they saw last.
///
/// Only for files that no other user can write: a mapping whose file is cut
/// short under it faults (`SIGBUS`) on the next read, so a file others may
/// truncate must not be mapped.
///
/// A file removed or replaced under the mapping (`rm -rf` of its directory)
/// no longer reaches the other processes: ``noteIfReplaced()``, called now
/// and then, finds it, and from then on ``value`` is `nil` (read what the
/// counter stood for) and ``increment()`` also bumps the file now at the path.
package final class SharedCounter: @unchecked Sendable {
    // Sendable: the mapping's address and length never change while this
    // object lives, and the counter in it is only read and written with the
    // atomic C functions, which other processes use on the same memory too;
    // every other field is a `let`, and `replaced` is an atomic that only
    // ever goes from false to true.
    private let base: UnsafeMutableRawPointer
    private static let length = 4096
    private let path: String
    private let permissions: FilePermissions
    private let owner: UInt32
    private let identity: FileIdentity
    private let replaced = Atomic<Bool>(false)

    /// Opens or creates the counter's file at `path` and maps it. Refuses
    /// anything but a regular file of `owner` with exactly `permissions`
    /// (never a link): such a file could be cut short under the mapping.
    ///
    /// The corresponding C functions are `open`, `fstat`, `ftruncate` and `mmap`.
    package init(path: String, permissions: FilePermissions, owner: UInt32) throws(Errno) {
        let file = try SystemCalls.openFile(
            path, .readWrite, options: [.create, .noFollow, .nonBlocking], permissions: permissions
        ).get()
        let info = try SystemCalls.fileStatus(file).get()
        guard info.kind == .regular, info.owner == owner, info.permissions == permissions else {
            throw Errno.permissionDenied
        }
        if info.size < Self.length {
            try SystemCalls.truncate(file, to: Self.length).get()
        }
        SystemCalls.count()
        let mapped = mmap(nil, Self.length, PROT_READ | PROT_WRITE, MAP_SHARED, file.rawValue, 0)
        guard let mapped, mapped != MAP_FAILED else { throw Errno.current }
        base = mapped
        self.path = path
        self.permissions = permissions
        self.owner = owner
        identity = info.identity
    }

    deinit {
        SystemCalls.count()
        munmap(base, Self.length)
    }

    /// A counter the process's users of `path` share while it lives.
    private struct Shared: Sendable {
        weak var counter: SharedCounter?
    }
    private static let sharedCounters = Locked<[String: Shared]>([:])

    /// The process's counter for `path`, mapped once however many users it
    /// has (a mapping is a page of resident memory each: 1,000 socket
    /// transports on one directory held 4 MB of the same page): the one
    /// already mapped while the file at `path` is still the one it maps,
    /// else a new one, as ``init(path:permissions:owner:)`` makes it.
    ///
    /// The corresponding C function is `lstat`, and those of the initializer.
    package static func shared(path: String, permissions: FilePermissions, owner: UInt32) throws(Errno)
        -> SharedCounter
    {
        if case .success(let info) = SystemCalls.linkStatus(path),
            let known = sharedCounters.withLock({ $0[path]?.counter }),
            known.identity == info.identity, known.permissions == permissions, known.owner == owner,
            !known.replaced.load(ordering: .relaxed)
        {
            return known
        }
        let made = try SharedCounter(path: path, permissions: permissions, owner: owner)
        sharedCounters.withLock { counters in
            // Entries whose counter went are only names by now.
            counters = counters.filter { $0.value.counter != nil }
            counters[path] = Shared(counter: made)
        }
        return made
    }

    /// The counter now, as the last process to bump it left it; `nil` once
    /// its file was found replaced: it says nothing of the others any more.
    package var value: UInt64? {
        guard !replaced.load(ordering: .relaxed) else { return nil }
        return ctn_shared_load(base.assumingMemoryBound(to: UInt64.self))
    }

    /// Adds one, for every process that maps the file; once it was found
    /// replaced, also for those that map the file now at its path.
    package func increment() {
        _ = ctn_shared_increment(base.assumingMemoryBound(to: UInt64.self))
        if replaced.load(ordering: .relaxed),
            let current = try? SharedCounter(
                path: path, permissions: permissions, owner: owner)
        {
            current.increment()
        }
    }

    /// Looks whether the file at the path is still the one mapped (one
    /// `lstat`); if not, marks this counter replaced for good. Returns whether it is.
    @discardableResult
    package func noteIfReplaced() -> Bool {
        guard !replaced.load(ordering: .relaxed) else { return true }
        if case .success(let info) = SystemCalls.linkStatus(path), info.identity == identity { return false }
        replaced.store(true, ordering: .relaxed)
        return true
    }
}
