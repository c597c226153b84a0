import NotificationPlatform

/// Deletes old segments: those past the size or age policy, and only when
/// every durable cursor has moved beyond them.
enum FileRetention {
    static func apply(
        root: String,
        name: NotificationName,
        configuration: FileSignalConfiguration,
        counters: FileSignalCounters,
        keeping active: UInt64
    ) {
        let numbers = FileLog.segments(root, name)
        let oldestNeeded =
            FileCursor.oldestSegment(root: root, name: name, sharing: configuration.sharing) ?? UInt64.max
        var sizes: [UInt64: Int] = [:]
        var ages: [UInt64: Int] = [:]
        let now = Int(SystemClock.wallClockNanoseconds() / 1_000_000_000)
        for number in numbers {
            if case .success(let info) = SystemCalls.linkStatus(FileLog.segmentPath(root, name, number)) {
                sizes[number] = info.size
                ages[number] = now - Int(info.modifiedSeconds)
            }
        }
        var total = sizes.values.reduce(0, +)
        for number in numbers where number < active && number < oldestNeeded {
            let tooBig = total > configuration.retention.maximumBytes
            let tooOld =
                configuration.retention.maximumAge.map { (ages[number] ?? 0) > Int($0.components.seconds) } ?? false
            guard tooBig || tooOld else { continue }
            if case .success = SystemCalls.removeFile(FileLog.segmentPath(root, name, number)) {
                total -= sizes[number] ?? 0
                counters.deletedSegments.add(1, ordering: .relaxed)
            }
        }
    }
}
