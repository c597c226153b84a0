import CTypedNotifications
import Dispatch

// How an EventLoop runs its jobs: in slices on its thread, and once it
// stopped, one at a time on the system's pool.
extension EventLoop {
    /// Names the system's thread after the last part of ``name``, cut to the
    /// 15 bytes Linux keeps and never inside a character, so `top -H`, `perf`
    /// and `/proc` show whose thread it is (`TypedNotifications.SocketTransport`:
    /// `SocketTransport`). Foundation names a `Thread` for the system only
    /// on Apple platforms.
    func nameSystemThread() {
        var kept = ""
        for character in name.split(separator: ".").last ?? Substring(name) {
            guard kept.utf8.count + character.utf8.count <= 15 else { break }
            kept.append(character)
        }
        ctn_name_current_thread(kept)
    }

    /// Runs queued jobs in order for at most one slice. Jobs of `batch` from
    /// `next` on were taken but have not run: they go first next time.
    func runJobs(_ batch: inout [LoopJob], from next: inout Int) {
        let start = SystemClock.monotonicNanoseconds()
        while true {
            if next == batch.count {
                batch.removeAll(keepingCapacity: true)
                next = 0
                state { swap(&$0.jobs, &batch) }
                if batch.isEmpty { return }
            }
            while next < batch.count {
                let job = batch[next]
                next += 1
                run(job)
                if SystemClock.monotonicNanoseconds() &- start >= Self.jobSliceNanoseconds { return }
            }
        }
    }

    func run(_ job: LoopJob) {
        switch job {
        case .closure(let body):
            body()
        case .task(let job, let loop):
            job.runSynchronously(
                isolatedTo: loop.asUnownedSerialExecutor(), taskExecutor: loop.asUnownedTaskExecutor())
        }
    }

    func drainDetachedIfNeeded() {
        let drains = state { state -> Bool in
            guard !state.jobs.isEmpty, !state.isDraining else { return false }
            state.isDraining = true
            return true
        }
        if drains { DispatchQueue.global().async { self.drainDetached() } }
    }

    /// After the loop stopped: runs jobs until none are left. One drainer at
    /// a time, so they still run one at a time and in order.
    func drainDetached() {
        let current = ThreadIdentity.current
        while true {
            let batch = state { state -> [LoopJob] in
                defer { state.jobs.removeAll(keepingCapacity: true) }
                if state.jobs.isEmpty { state.isDraining = false }
                return state.jobs
            }
            if batch.isEmpty {
                jobThread.store(0, ordering: .relaxed)
                return
            }
            jobThread.store(current.rawValue, ordering: .relaxed)
            for job in batch { run(job) }
        }
    }
}
