import Dispatch
import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Deletes old segments: those past the size or age policy, and only when
/// every durable cursor that still holds the log has moved beyond them. A
/// cursor further behind the end than ``FileRetentionPolicy/maximumBytesBehind``
/// holds nothing, nor one saved in a log since removed and started again.
/// A durable identity's namespace marker is the cursor of every name of the
/// namespace that has none (see `FileCursor.namespacePath`).
enum FileRetention {
    static func apply(
        root: String,
        name: NotificationName,
        configuration: FileSignalConfiguration,
        counters: Counters<FileSignalStatistics>,
        keeping active: UInt64
    ) {
        let numbers = FileLog.segments(root, name)
        var sizes: [UInt64: Int] = [:]
        var ages: [UInt64: Int] = [:]
        let now = Int(SystemClock.wallClockNanoseconds() / 1_000_000_000)
        for number in numbers {
            if case .success(let info) = SystemCalls.linkStatus(FileLog.segmentPath(root, name, number)) {
                sizes[number] = info.size
                ages[number] = now - Int(info.modifiedSeconds)
            }
        }
        let oldestNeeded =
            holders(root: root, name: name, sizes: sizes, configuration: configuration)
            .filter(\.holds).map(\.segment).min() ?? UInt64.max
        var total = sizes.values.reduce(0, +)
        for number in numbers where number < active && number < oldestNeeded {
            let tooBig = total > configuration.retention.maximumBytes
            let tooOld =
                configuration.retention.maximumAge.map { (ages[number] ?? 0) > Int($0.components.seconds) } ?? false
            guard tooBig || tooOld else { continue }
            if case .success = SystemCalls.removeFile(FileLog.segmentPath(root, name, number)) {
                total -= sizes[number] ?? 0
                counters.add(to: .deletedSegments)
            }
        }
    }

    /// Every durable cursor of `name`: its identity, the segment its next
    /// run starts in, how many bytes of the log it has not handled, and
    /// whether it holds the segments from there on (it is within the
    /// policy's ``FileRetentionPolicy/maximumBytesBehind``).
    ///
    /// A cursor whose next run starts at the oldest record (it cannot be
    /// read, it is in a log since removed and started again, or past the
    /// end) stands there: what it has not read is not known, so none of it
    /// goes before that run, within the same limit. Taken for no cursor at
    /// all, its identity would find on its return that retention deleted
    /// what it never read, with no count of it.
    static func holders(
        root: String, name: NotificationName, sizes: [UInt64: Int], configuration: FileSignalConfiguration
    ) -> [(identity: String, segment: UInt64, bytesBehind: Int, holds: Bool)] {
        guard case .success(let identities) = SystemCalls.directoryEntries(FileLog.cursorsDirectory(root)) else {
            return []
        }
        let current = sizes.keys.max().flatMap {
            FileLog.logIdentifier(root, name, $0, sharing: configuration.sharing)
        }
        let oldest = LogPosition(segment: sizes.keys.min() ?? 1, offset: 0)
        let end = LogPosition(segment: sizes.keys.max() ?? 1, offset: sizes[sizes.keys.max() ?? 1] ?? 0)
        return identities.sorted().compactMap { identity in
            let position: LogPosition
            switch FileCursor.loadCovering(root: root, identity: identity, name: name, sharing: configuration.sharing) {
            case .missing: return nil
            case .invalid: position = oldest
            case .valid(let cursor):
                let sameLog = cursor.committed.log == nil || current == nil || cursor.committed.log == current
                position = sameLog && cursor.committed <= end ? cursor.committed : oldest
            }
            let behind = bytesBehind(position, sizes: sizes)
            let holds = configuration.retention.maximumBytesBehind.map { behind <= $0 } ?? true
            return (identity, position.segment, behind, holds)
        }
    }

    /// Bytes of the log after `position`.
    static func bytesBehind(_ position: LogPosition, sizes: [UInt64: Int]) -> Int {
        sizes.reduce(0) { total, entry in
            if entry.key < position.segment { return total }
            if entry.key == position.segment { return total + max(0, entry.value - position.offset) }
            return total + entry.value
        }
    }
}
