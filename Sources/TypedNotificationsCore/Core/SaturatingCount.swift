import Synchronization

extension Int {
    /// `self + other`, stopping at `Int.max` instead of trapping.
    ///
    /// Every count of missed notifications is summed this way: the amounts come
    /// from sequence numbers that another process chose, so a forged gap of
    /// 2⁶⁴ − 2 must add up to "very many", never to a crash.
    package func addingSaturating(_ other: Int) -> Int {
        let (sum, overflow) = addingReportingOverflow(other)
        guard overflow else { return sum }
        return other > 0 ? .max : .min
    }
}

extension Atomic where Value == Int {
    /// Adds a non-negative amount with relaxed ordering, stopping at `Int.max`
    /// instead of trapping. For counters read only as snapshots.
    func addSaturating(_ amount: Int) {
        var current = load(ordering: .relaxed)
        while true {
            let (exchanged, original) = weakCompareExchange(
                expected: current, desired: current.addingSaturating(amount), ordering: .relaxed)
            if exchanged { return }
            current = original
        }
    }
}
