import Synchronization

/// How many threads of one kind the process keeps beside the
/// ``LoopGroup``'s: a transport that sleeps in a receive call of its own
/// needs a thread of its own, so only the process's first few do (as
/// `ChangeSleeper` keeps its own queues for the first two); the rest share
/// ``LoopGroup/shared``.
package final class ThreadAllowance: Sendable {
    /// Threads of this kind at most.
    package let limit: Int
    private let taken = Atomic<Int>(0)

    /// An allowance for at most `limit` threads.
    package init(limit: Int) {
        self.limit = limit
    }

    /// A permit for one more thread, or `nil` when `limit` are taken.
    package func take() -> ThreadPermit? {
        guard taken.add(1, ordering: .relaxed).newValue <= limit else {
            taken.subtract(1, ordering: .relaxed)
            return nil
        }
        return ThreadPermit(self)
    }

    fileprivate func giveBack() {
        taken.subtract(1, ordering: .relaxed)
    }
}

/// One thread's place in a ``ThreadAllowance``, given back by ``release()``
/// (its thread ended) or when the permit goes.
package final class ThreadPermit: Sendable {
    private let allowance: ThreadAllowance
    private let held = Atomic<Bool>(true)

    fileprivate init(_ allowance: ThreadAllowance) {
        self.allowance = allowance
    }

    /// Gives the place back; later calls do nothing.
    package func release() {
        if held.exchange(false, ordering: .relaxed) { allowance.giveBack() }
    }

    deinit {
        release()
    }
}
