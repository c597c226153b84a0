import CTypedNotifications
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

#if os(Linux)
    /// An inotify instance that one thread sleeps in, reading it with a
    /// blocking `read`, so the change that wakes the thread is taken by the
    /// same call: the way a file transport's loop waits on Linux (see
    /// ``DirectoryMonitor/sleeping(includingModifications:beyondLimit:)``).
    ///
    /// What else the thread waits for comes in through the same queue.
    /// **A wake-up** (work for the loop, or its end) is a one-byte write to
    /// a file of the sleeper's own, unnamed (`O_TMPFILE`) in `/dev/shm` or
    /// the temporary directory, that the instance watches: an `IN_MODIFY`.
    /// At most one is written per sleep (the next ``wake()`` writes again
    /// only after a read). **A timeout** is a deadline kept by one thread of
    /// the process (``SleepDeadlines``), which wakes the sleeper when it
    /// passes; a sleep armed for about the same deadline as the last one
    /// (within a millisecond) arms nothing, so a loop whose next timer is a
    /// second away arms once a second, however many changes wake it. A timer
    /// nearer than ``nearTimer`` is waited for in `poll` on the queue instead.
    ///
    /// Few are made (``ownQueuesAllowed`` at a time per process): each is
    /// an inotify instance, and the kernel allows a user 128 of them. A
    /// monitor that cannot have one shares the process's queue and its
    /// owner waits in the event queue, as before.
    package final class ChangeSleeper: Sendable {
        let queue: ChangeQueue
        private let wakeFile: FileDescriptor
        private let inFlight = Atomic<Bool>(false)
        private let armed = Atomic<UInt64>(0)

        /// How many sleepers a process keeps at once.
        package static let ownQueuesAllowed = 2
        private static let made = Atomic<Int>(0)

        /// A sleeper with an instance and a wake-up file of its own; `nil`
        /// when the process already has ``ownQueuesAllowed`` of them, or
        /// either cannot be made (the user's instances are used up, no
        /// writable temporary directory): the caller shares the process's queue.
        /// With `beyondLimit` (for tests), made whatever the process holds.
        ///
        /// The corresponding C functions are `inotify_init1`, `open` with
        /// `O_TMPFILE` and `inotify_add_watch`.
        package static func make(beyondLimit: Bool = false) -> ChangeSleeper? {
            let counted = !beyondLimit
            if counted {
                guard made.add(1, ordering: .relaxed).newValue <= ownQueuesAllowed else {
                    made.subtract(1, ordering: .relaxed)
                    return nil
                }
            }
            guard let queue = try? ChangeQueue.make(blocking: true), let file = wakeFile() else {
                if counted { made.subtract(1, ordering: .relaxed) }
                return nil
            }
            SystemCalls.count()
            let watch = inotify_add_watch(
                queue.descriptor.rawValue, "/proc/self/fd/\(file.rawValue)", UInt32(IN_MODIFY))
            guard watch != -1 else {
                if counted { made.subtract(1, ordering: .relaxed) }
                return nil
            }
            return ChangeSleeper(queue: queue, wakeFile: file, wakeWatch: watch, counted: counted)
        }

        /// The watch of the wake-up file, whose events are no changes.
        let wakeWatch: CInt
        private let counted: Bool

        private init(queue: ChangeQueue, wakeFile: consuming FileDescriptor, wakeWatch: CInt, counted: Bool) {
            self.queue = queue
            self.wakeFile = wakeFile
            self.wakeWatch = wakeWatch
            self.counted = counted
        }

        deinit {
            SleepDeadlines.shared.disarm(ObjectIdentifier(self))
            if counted { Self.made.subtract(1, ordering: .relaxed) }
        }

        private static func wakeFile() -> FileDescriptor? {
            var directories = ["/dev/shm"]
            if let temporary = getenv("TMPDIR").map({ String(cString: $0) }), !temporary.isEmpty {
                directories.append(temporary)
            }
            directories.append("/tmp")
            for directory in directories {
                SystemCalls.count()
                let descriptor = ctn_open_unnamed_file(directory)
                if descriptor != -1 { return FileDescriptor(adopting: descriptor) }
            }
            return nil
        }

        /// Makes the sleep in progress, or the next one, return soon.
        ///
        /// The corresponding C function is `pwrite`.
        package func wake() {
            guard !inFlight.exchange(true, ordering: .acquiringAndReleasing) else { return }
            var byte: UInt8 = 1
            let written = withUnsafeBytes(of: &byte) { bytes in
                SystemCalls.count()
                return pwrite(wakeFile.rawValue, bytes.baseAddress, 1, 0)
            }
            // Not written (cannot happen on tmpfs short of a full disk of
            // one page): the next wake-up tries again.
            if written != 1 { inFlight.store(false, ordering: .releasing) }
        }

        /// A timer nearer than this many milliseconds is waited for in
        /// `poll` on the queue, not with the deadline thread: a loop whose
        /// observers are full looks again every millisecond, and a futex
        /// wake of that thread, its wake-up write and a second read for
        /// each would cost more than the `poll` saves.
        static let nearTimer: CInt = 100

        /// Prepares a sleep of at most `timeoutMilliseconds` (-1: without
        /// limit, 0: not at all): whether to read now. A sleep of no time
        /// reads only what is queued already; a sleep until a near timer
        /// waits in `poll`, and reads only if the queue became readable.
        ///
        /// The corresponding C functions are `ioctl(FIONREAD)` for a sleep
        /// of no time, and `poll` for one until a near timer.
        func prepareSleep(timeoutMilliseconds: CInt) -> Bool {
            if timeoutMilliseconds == 0 { return queuedBytes() > 0 }
            if timeoutMilliseconds > 0, timeoutMilliseconds < Self.nearTimer {
                let readable = SystemCalls.waitUntilReadable(
                    queue.descriptor.rawValue, milliseconds: timeoutMilliseconds)
                return (try? readable.get()) == true
            }
            arm(timeoutMilliseconds)
            return true
        }

        /// The queue was read: whatever woke the reader, its owner looks at
        /// its work next, so the next ``wake()`` writes again.
        func didRead() {
            inFlight.store(false, ordering: .releasing)
        }

        /// How many bytes of events are queued.
        ///
        /// The corresponding C function is `ioctl(FIONREAD)`.
        func queuedBytes() -> CInt {
            var queued: CInt = 0
            SystemCalls.count()
            guard ioctl(queue.descriptor.rawValue, UInt(FIONREAD), &queued) == 0 else { return 0 }
            return queued
        }

        /// Asks for a wake-up `milliseconds` from now (-1: none), unless one
        /// is asked for within a millisecond of that already.
        private func arm(_ milliseconds: CInt) {
            guard milliseconds > 0 else {
                if armed.exchange(0, ordering: .relaxed) != 0 { SleepDeadlines.shared.disarm(ObjectIdentifier(self)) }
                return
            }
            let deadline = SystemClock.monotonicNanoseconds() + UInt64(milliseconds) * 1_000_000
            let current = armed.load(ordering: .relaxed)
            if current != 0, current <= deadline, deadline - current <= 1_000_000 { return }
            armed.store(deadline, ordering: .relaxed)
            SleepDeadlines.shared.arm(ObjectIdentifier(self), at: deadline) { [weak self] in
                guard let self else { return }
                _ = armed.compareExchange(expected: deadline, desired: 0, ordering: .relaxed)
                wake()
            }
        }
    }

    /// One thread of the process that wakes sleepers (``ChangeSleeper``)
    /// whose sleep has no timeout of its own, when their deadline passes.
    /// It starts with the first deadline and sleeps in a condition variable
    /// on the monotonic clock; arming a deadline later than the one it
    /// sleeps towards does not wake it.
    final class SleepDeadlines: @unchecked Sendable {
        // Sendable: `deadlines`, `target` and `started` are touched only
        // between lock and unlock of `mutex`; the mutex and the condition
        // exist to be shared between threads and their addresses never
        // change. The wakes run after the unlock.
        static let shared = SleepDeadlines()

        private let mutex = SystemMutex()
        private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
        private var deadlines: [ObjectIdentifier: (at: UInt64, wake: @Sendable () -> Void)] = [:]
        private var target = UInt64.max
        private var started = false

        private init() {
            condition.initialize(to: pthread_cond_t())
            var attributes = pthread_condattr_t()
            pthread_condattr_init(&attributes)
            pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
            pthread_cond_init(condition, &attributes)
            pthread_condattr_destroy(&attributes)
        }

        /// Calls `wake` once `deadline` (monotonic nanoseconds) has passed,
        /// instead of what `owner` asked before.
        func arm(_ owner: ObjectIdentifier, at deadline: UInt64, wake: @escaping @Sendable () -> Void) {
            mutex.lock()
            deadlines[owner] = (deadline, wake)
            let starts = !started
            started = true
            let signals = deadline < target
            mutex.unlock()
            if starts {
                let thread = Thread { [self] in
                    ctn_name_current_thread("SleepDeadlines")
                    run()
                }
                // Short enough for Linux's 15-byte thread names.
                thread.name = "SleepDeadlines"
                thread.start()
            } else if signals {
                pthread_cond_signal(condition)
            }
        }

        /// Forgets what `owner` asked for.
        func disarm(_ owner: ObjectIdentifier) {
            mutex.lock()
            deadlines[owner] = nil
            mutex.unlock()
        }

        private func run() {
            mutex.lock()
            while true {
                let now = SystemClock.monotonicNanoseconds()
                var due: [@Sendable () -> Void] = []
                var next = UInt64.max
                for (owner, entry) in deadlines {
                    if entry.at <= now {
                        due.append(entry.wake)
                        deadlines[owner] = nil
                    } else {
                        next = min(next, entry.at)
                    }
                }
                if !due.isEmpty {
                    target = 0
                    mutex.unlock()
                    for wake in due { wake() }
                    mutex.lock()
                    continue
                }
                target = next
                if next == .max {
                    pthread_cond_wait(condition, mutex.pointer)
                } else {
                    var until = timespec(
                        tv_sec: Int(next / 1_000_000_000), tv_nsec: Int(next % 1_000_000_000))
                    _ = pthread_cond_timedwait(condition, mutex.pointer, &until)
                }
            }
        }
    }
#endif
