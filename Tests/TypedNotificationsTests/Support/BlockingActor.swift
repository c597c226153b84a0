import Dispatch

/// A serial executor on a dispatch queue of its own, outside Swift's
/// cooperative thread pool.
final class QueueExecutor: SerialExecutor {
    private let queue: DispatchQueue

    init(label: String) {
        queue = DispatchQueue(label: label)
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedSerialExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }
}

/// An actor whose code runs on its own thread, so a handler on it may block
/// (waiting for a test to release it) without starving the cooperative pool,
/// which on a 2-core machine has only two threads.
actor BlockingActor {
    private let executor = QueueExecutor(label: "BlockingActor")

    nonisolated var unownedExecutor: UnownedSerialExecutor {
        executor.asUnownedSerialExecutor()
    }
}
