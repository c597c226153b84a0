import Foundation
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// The anatomy of a notification: the library stamps each step of the real
// path (`Anatomy` in the platform layer, off unless started), the poster and
// each observer process file their stamps, and here they are joined by the
// notification's key (its monotonic timestamp, which the envelope carries).

/// One step over the sampled notifications.
struct StepFigures: Codable, Sendable {
    /// The step's name, as the report prints it.
    var step: String
    /// From `post` called until this step.
    var sincePost: Percentiles
    /// From the step before it (in the order of their medians) until this one.
    var sincePrevious: Percentiles
}

/// Where a point's time goes, step by step, in a round with stamping on.
struct AnatomyResult: Codable, Sendable {
    /// (notification, observer) pairs joined from every step's stamps.
    var samples: Int
    var steps: [StepFigures]
}

/// What stamping costs, from a point's rounds with stamping on beside its
/// rounds with it off (interleaved): the medians of each.
struct StampingCost: Codable, Sendable {
    var latencyP50Off: UInt64
    var latencyP50On: UInt64
    var posterCPUOff: Double
    var posterCPUOn: Double
    var observerCPUOff: Double?
    var observerCPUOn: Double?
}

extension Anatomy.Step {
    var name: String {
        switch self {
        case .postCalled: "post called"
        case .encoded: "message made"
        case .sent: "send returned"
        case .received: "receive returned"
        case .decoded: "decoded"
        case .queued: "queued"
        case .handlerBegan: "handler began"
        }
    }
}

/// Room for every stamp a process files over a point of `total` notifications.
func anatomyCapacity(total: Int) -> Int { 8 * total + 4_096 }

/// Writes stamps as native words, three to a stamp.
func writeAnatomy(_ stamps: [Anatomy.Stamp], to path: String) {
    var words: [UInt64] = []
    words.reserveCapacity(3 * stamps.count)
    for stamp in stamps { words += [stamp.step.rawValue, stamp.key, stamp.nanoseconds] }
    let data = words.withUnsafeBytes { Data($0) }
    guard FileManager.default.createFile(atPath: path, contents: data) else { fail("cannot write \(path)") }
}

/// Reads what ``writeAnatomy(_:to:)`` wrote.
func readAnatomy(_ path: String) -> [Anatomy.Stamp] {
    guard let data = FileManager.default.contents(atPath: path) else { fail("missing anatomy file \(path)") }
    let words = data.withUnsafeBytes { Array($0.bindMemory(to: UInt64.self)) }
    return stride(from: 0, to: words.count - 2, by: 3).compactMap { index in
        Anatomy.Step(rawValue: words[index]).map {
            Anatomy.Stamp(step: $0, key: words[index + 1], nanoseconds: words[index + 2])
        }
    }
}

/// Joins the poster's stamps with each observer's (the same list for an
/// in-process point) over the notifications posted `sampled` (by post order).
func anatomy(poster: [Anatomy.Stamp], observers: [[Anatomy.Stamp]], sampled: Range<Int>) -> AnatomyResult? {
    // The poster's notifications in the order posted: one "message made" each.
    let keys = poster.filter { $0.step == .encoded }.map(\.key)
    guard sampled.upperBound <= keys.count else { return nil }
    let wanted = Set(keys[sampled])
    func byKey(_ stamps: [Anatomy.Stamp], steps: Set<Anatomy.Step>) -> [UInt64: [Anatomy.Step: UInt64]] {
        var table: [UInt64: [Anatomy.Step: UInt64]] = [:]
        for stamp in stamps where wanted.contains(stamp.key) && steps.contains(stamp.step) {
            // The first of a step per notification (a retried send stamps again).
            if table[stamp.key]?[stamp.step] == nil { table[stamp.key, default: [:]][stamp.step] = stamp.nanoseconds }
        }
        return table
    }
    let posterSteps: Set<Anatomy.Step> = [.postCalled, .encoded, .sent]
    let posted = byKey(poster, steps: posterSteps)
    var joined: [[Anatomy.Step: UInt64]] = []
    for stamps in observers {
        let seen = byKey(stamps, steps: Set(Anatomy.Step.allCases).subtracting(posterSteps))
        for (key, observerSide) in seen {
            guard let posterSide = posted[key], posterSide[.postCalled] != nil else { continue }
            joined.append(posterSide.merging(observerSide) { first, _ in first })
        }
    }
    guard !joined.isEmpty else { return nil }
    // Steps in the order of their median time since the post call.
    var sincePost: [Anatomy.Step: [UInt64]] = [:]
    for stamps in joined {
        guard let start = stamps[.postCalled] else { continue }
        for (step, time) in stamps where step != .postCalled { sincePost[step, default: []].append(time &- start) }
    }
    let ordered = sincePost.keys.sorted {
        (Percentiles(sincePost[$0] ?? []).p50, $0.rawValue) < (Percentiles(sincePost[$1] ?? []).p50, $1.rawValue)
    }
    var steps: [StepFigures] = []
    var previous = Anatomy.Step.postCalled
    for step in ordered {
        let deltas = joined.compactMap { stamps in
            stamps[step].flatMap { time in stamps[previous].map { time >= $0 ? time - $0 : 0 } }
        }
        steps.append(
            StepFigures(
                step: step.name, sincePost: Percentiles(sincePost[step] ?? []), sincePrevious: Percentiles(deltas)))
        previous = step
    }
    return AnatomyResult(samples: joined.count, steps: steps)
}

/// The anatomy of the points that have one, with each side's CPU beside the
/// floor's and what stamping cost, as the report prints it.
func anatomyTable(_ points: [PointResult]) -> String {
    var lines: [String] = []
    for point in points {
        guard let result = point.anatomy else { continue }
        let floor = points.first {
            $0.kind == point.kind.baseline && $0.kind != point.kind && $0.observers == point.observers
                && $0.payloadBytes == point.payloadBytes
        }
        lines.append(
            "  \(point.label), N=\(point.observers), \(point.payloadBytes) B (\(result.samples) notifications sampled):"
        )
        lines.append("    \(padded("step", 18)) \(padded("since the step before", 24)) since post called")
        lines.append("    \(padded("", 18)) \(padded("p50       p99", 24)) p50       p99")
        for step in result.steps {
            lines.append(
                "    \(padded(step.step, 18)) \(padded(nanos(step.sincePrevious.p50), 9)) \(padded(nanos(step.sincePrevious.p99), 14)) "
                    + "\(padded(nanos(step.sincePost.p50), 9)) \(nanos(step.sincePost.p99))")
        }
        var cpu = String(format: "    CPU: poster %.2f µs per post", point.posterCPUNanosecondsPerPost / 1000)
        if let floor { cpu += String(format: " (floor %.2f µs)", floor.posterCPUNanosecondsPerPost / 1000) }
        if let observer = point.observerCPUNanosecondsPerNotification {
            cpu += String(format: "; observer %.2f µs per notification", observer / 1000)
            if let floorObserver = floor?.observerCPUNanosecondsPerNotification {
                cpu += String(format: " (floor %.2f µs)", floorObserver / 1000)
            }
        }
        lines.append(cpu)
        if let cost = point.stampingCost {
            var text =
                "    stamping on / off (medians of interleaved rounds): p50 \(microseconds(cost.latencyP50On)) / \(microseconds(cost.latencyP50Off))"
                + String(format: ", poster CPU %.2f / %.2f µs", cost.posterCPUOn / 1000, cost.posterCPUOff / 1000)
            if let on = cost.observerCPUOn, let off = cost.observerCPUOff {
                text += String(format: ", observer CPU %.2f / %.2f µs", on / 1000, off / 1000)
            }
            lines.append(text)
        }
    }
    return lines.joined(separator: "\n")
}

/// Nanoseconds, short: "812 ns", "19.4 µs".
func nanos(_ value: UInt64) -> String {
    value < 10_000 ? "\(value) ns" : String(format: "%.1f µs", Double(value) / 1000)
}

/// The median of figures, the lower middle one of an even count.
func medianValue<T: Comparable>(_ values: [T]) -> T? {
    let sorted = values.sorted()
    return sorted.isEmpty ? nil : sorted[(sorted.count - 1) / 2]
}
