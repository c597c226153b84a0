/// When to try connecting again after failures: 50 ms, doubling to 2 s.
struct ConnectBackoff {
    private(set) var failures = 0
    private(set) var retryAt: UInt64?
    private(set) var lastError = ""

    mutating func failed(at now: UInt64, _ error: String) {
        failures += 1
        lastError = error
        retryAt = now &+ nextDelay(after: failures)
    }

    mutating func succeeded() {
        failures = 0
        retryAt = nil
    }

    func nextDelay(after failures: Int) -> UInt64 {
        let milliseconds = min(2_000, 50 << min(failures - 1, 6))
        return UInt64(milliseconds) * 1_000_000
    }

    /// For a reader: the delay before its next attempt, counting this one.
    mutating func nextDelay() -> UInt64 {
        failures += 1
        return nextDelay(after: failures)
    }

    mutating func reset() {
        failures = 0
    }
}
