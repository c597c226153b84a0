import Foundation
@_spi(TransportAuthoring) import TypedNotifications

// The run's outputs: ratios to each group's baseline, the targets,
// a table on stdout, the JSON file and the SVG chart.

extension Report {
    /// Fills in every point's ratios to its group's baseline at the same N and size.
    static func withRatios(_ points: [PointResult]) -> [PointResult] {
        points.map { point in
            var point = point
            let baseline = points.first {
                $0.kind == point.kind.baseline && $0.observers == point.observers
                    && $0.payloadBytes == point.payloadBytes
            }
            if let baseline, baseline.latencyToLast.p50 > 0 {
                point.latencyRatioToBaseline = Double(point.latencyToLast.p50) / Double(baseline.latencyToLast.p50)
            }
            if let baseline, baseline.throughputPerSecond > 0 {
                point.throughputRatioToBaseline = point.throughputPerSecond / baseline.throughputPerSecond
            }
            return point
        }
    }

    /// Rounds at least of every point a target judges (see ``judgesTarget``).
    static let targetRounds = 5
    /// Rounds at least of the Redis points a target judges: their floor is
    /// bimodal, a round's ratio moves by four times.
    static let redisTargetRounds = 11

    /// The rounds a point that a target judges runs at least.
    static func targetRounds(for kind: Kind) -> Int {
        kind.meetsAtServer ? redisTargetRounds : targetRounds
    }

    /// Whether a fan-out point is one a target judges: each transport's
    /// and its floors' at N=1, 16 B, and the socket group's at N=16, 16 B.
    static func judgesTarget(_ kind: Kind, observers: Int, size: Int) -> Bool {
        guard kind.isCrossProcess, size == 16 else { return false }
        return observers == 1 || (observers == 16 && kind.group == Kind.socket.group)
    }

    /// The targets, judged on this run's figures. Nothing asserts them.
    static func targets(points: [PointResult], micro: MicroResults, memory: MemoryResults?) -> [TargetResult] {
        func point(_ kind: Kind, _ observers: Int, _ size: Int = 16) -> PointResult? {
            points.first { $0.kind == kind && $0.observers == observers && $0.payloadBytes == size }
        }
        var targets: [TargetResult] = []
        func ratio(_ target: String, _ value: Double?, atMost limit: Double, detail: String) {
            guard let value, value.isFinite else { return }
            targets.append(
                TargetResult(
                    target: target, measured: String(format: "%.2f× (%@)", value, detail), met: value <= limit))
        }
        // Issue 63's targets, which supersede issue 45's: each side's CPU
        // against its floor's, latency against the floor's, the in-process
        // hop and the envelope.
        func cpu(_ target: String, _ ours: Double?, _ floor: Double?, atMost limit: Double) {
            guard let ours, let floor, floor > 0 else { return }
            ratio(
                target, ours / floor, atMost: limit,
                detail: String(format: "%.2f µs against %.2f µs", ours / 1000, floor / 1000))
        }
        // With --rounds, each round's ratio: the floor and the transport of one
        // round ran minutes apart at most.
        func rounds(_ point: PointResult, against floor: PointResult) -> String {
            guard let ours = point.roundLatencyP50s, let floors = floor.roundLatencyP50s else { return "" }
            let ratios = zip(ours, floors).map { String(format: "%.2f×", Double($0) / Double(max($1, 1))) }
            return "; by round: " + ratios.joined(separator: ", ")
        }
        // A transport's p50 latency at N=1, 16 B, against a floor's in the same run.
        func p50(_ target: String, of ours: Kind, against floor: Kind, atMost limit: Double) {
            guard let mine = point(ours, 1), let base = point(floor, 1) else { return }
            ratio(
                target, Double(mine.latencyToLast.p50) / Double(max(base.latencyToLast.p50, 1)), atMost: limit,
                detail: "\(microseconds(mine.latencyToLast.p50)) against \(microseconds(base.latencyToLast.p50))"
                    + rounds(mine, against: base))
        }
        for (transport, floor, posterLimit) in [(Kind.socket, Kind.rawDatagram, 2.0), (.file, .rawAppend, 3.0)] {
            let name = transport.rawValue
            cpu(
                "\(name): observer CPU per notification at N=1 ≤ 2× the floor's observer",
                point(transport, 1)?.observerCPUNanosecondsPerNotification,
                point(floor, 1)?.observerCPUNanosecondsPerNotification, atMost: 2)
            cpu(
                "\(name): poster CPU per post at N=1 ≤ \(Int(posterLimit))× the floor's poster",
                point(transport, 1)?.posterCPUNanosecondsPerPost, point(floor, 1)?.posterCPUNanosecondsPerPost,
                atMost: posterLimit)
        }
        p50(
            "socket: p50 latency at N=1 ≤ 2.5× the blocking datagram floor", of: .socket, against: .rawDatagram,
            atMost: 2.5)
        if let socket = point(.socket, 16), let raw = point(.rawDatagram, 16) {
            ratio(
                "socket: p99 latency at N=16 ≤ 2× raw datagram (no worse than before issue 63)",
                Double(socket.latencyToLast.p99) / Double(max(raw.latencyToLast.p99, 1)), atMost: 2,
                detail: "\(microseconds(socket.latencyToLast.p99)) against \(microseconds(raw.latencyToLast.p99))")
        }
        p50("file: p50 latency at N=1 ≤ 3× append + inotify", of: .file, against: .rawAppend, atMost: 3)
        if let file = point(.file, 1) {
            targets.append(
                TargetResult(
                    target: "file: ≥ 250,000 notifications/s, one poster to one observer",
                    measured: String(format: "%.0f/s", file.throughputPerSecond),
                    met: file.throughputPerSecond >= 250_000))
        }
        p50(
            "redis: p50 latency at N=1 ≤ 1.3× bare XADD + blocking XREAD (median of ≥ \(Report.redisTargetRounds) rounds)",
            of: .redis, against: .rawRedis, atMost: 1.3)
        if let redis = point(.redis, 1), let allocations = redis.allocationsPerPost {
            targets.append(
                TargetResult(
                    target: "redis: ≤ 4 allocations per post", measured: String(format: "%.1f", allocations),
                    met: allocations <= 4))
        }
        if let hub = micro.hubHandlerNanoseconds, let floor = micro.floorNanoseconds {
            ratio(
                "in-process: post-to-handler on its executor ≤ 5× the locked lookup + closure floor", hub / floor,
                atMost: 5, detail: String(format: "%.0f ns against %.0f ns", hub, floor))
        }
        if let hub = micro.hubHandlerNanoseconds, let foundation = micro.foundationBlockNanoseconds {
            targets.append(
                TargetResult(
                    target: "in-process: post-to-handler faster than Foundation's synchronous block observer",
                    measured: String(format: "%.0f ns against %.0f ns", hub, foundation), met: hub < foundation))
        }
        let envelope = NotificationEnvelopeSizes.self
        for size in [16, 4096] {
            guard let encode = micro.encodeNanoseconds["\(size)"], let decode = micro.decodeNanoseconds["\(size)"]
            else { continue }
            if size == 16 {
                targets.append(
                    TargetResult(
                        target: "envelope: encode and decode of 16 B ≤ 80 ns each",
                        measured: String(format: "%.0f ns encode, %.0f ns decode", encode, decode),
                        met: encode <= 80 && decode <= 80))
            } else {
                let bytes = Double(envelope.bytes(payload: size))
                targets.append(
                    TargetResult(
                        target: "envelope: encode and decode of 4 KiB ≥ 8 GB/s each",
                        measured: String(format: "%.1f GB/s encode, %.1f GB/s decode", bytes / encode, bytes / decode),
                        met: bytes / encode >= 8 && bytes / decode >= 8))
            }
        }
        if let memory {
            for series in memory.series {
                targets.append(
                    TargetResult(
                        target: "memory: RSS flat over \(series.notifications) notifications (\(series.kind.label))",
                        measured: "\(series.growthKiB) KiB growth after warm-up (\(series.residentKiB.first ?? 0) KiB)"
                            + heapGrowth(series.heapKiB),
                        met: series.growthKiB <= 1024))
            }
            if let distinct = memory.distinctSenders {
                targets.append(
                    TargetResult(
                        target:
                            "memory: RSS flat over \(distinct.senders) distinct short-lived senders to one observer",
                        measured:
                            "\(distinct.growthKiB) KiB growth after warm-up (\(distinct.residentKiB.first ?? 0) KiB)"
                            + heapGrowth(distinct.heapKiB),
                        met: distinct.growthKiB <= 1024))
            }
            for run in memory.hubs ?? [] {
                targets.append(
                    TargetResult(
                        target: "hubs: \(run.requested) \(run.kind.label) hubs in one process, each observing",
                        measured: "\(run.opened) opened, \(run.delivered) got the post"
                            + (run.failure.map { "; stopped by: \($0)" } ?? ""),
                        met: run.opened == run.requested && run.delivered == run.requested))
                if run.kind == .socket {
                    targets.append(
                        TargetResult(
                            target: "hubs: a socket hub costs ≤ 150 KiB of resident memory",
                            measured: "\(run.perHubKiB) KiB per hub over \(run.opened) hubs",
                            met: run.opened > 0 && run.perHubKiB <= 150))
                }
            }
        }
        return targets
    }
}

/// The live heap's growth over a memory series, for the target's text.
func heapGrowth(_ heapKiB: [Int]) -> String {
    guard let first = heapKiB.first, let last = heapKiB.last else { return "" }
    return "; live heap \(first) → \(last) KiB"
}

/// An envelope's size with the benchmark's name and endpoint.
enum NotificationEnvelopeSizes {
    static func bytes(payload: Int) -> Int {
        NotificationEnvelope.size(nameLength: Tick.name.rawValue.utf8.count, endpointLength: 5, payloadLength: payload)
    }
}

func microseconds(_ nanoseconds: UInt64) -> String {
    String(format: "%.1f µs", Double(nanoseconds) / 1000)
}

func rate(_ perSecond: Double) -> String {
    perSecond >= 1e6 ? String(format: "%.2fM/s", perSecond / 1e6) : String(format: "%.0fk/s", perSecond / 1e3)
}

func padded(_ text: String, _ width: Int, right: Bool = false) -> String {
    let count = text.count
    guard count < width else { return text }
    let padding = String(repeating: " ", count: width - count)
    return right ? padding + text : text + padding
}

/// The fan-out table for stdout (and the README).
func table(_ points: [PointResult]) -> String {
    let header = [
        ("scenario", 26, false), ("N", 3, true), ("bytes", 5, true), ("p50 last", 10, true), ("p99 last", 10, true),
        ("p99.9", 10, true), ("max", 10, true), ("p50 each", 10, true), ("× base", 7, true),
        ("throughput", 10, true), ("× base", 7, true), ("CPU/post", 9, true), ("calls", 5, true), ("allocs", 6, true),
        ("obs CPU", 9, true),
        ("RSS KiB", 13, true), ("lost", 5, true),
    ]
    var lines = [header.map { padded($0.0, $0.1, right: $0.2) }.joined(separator: " ")]
    for point in points {
        let rss = point.observerPeakRSSKiB.map { "\(point.posterPeakRSSKiB)/\($0)" } ?? "\(point.posterPeakRSSKiB)"
        let latencies: [String] = [
            microseconds(point.latencyToLast.p50), microseconds(point.latencyToLast.p99),
            microseconds(point.latencyToLast.p999), microseconds(point.latencyToLast.max),
            microseconds(point.latencyToEach.p50),
            point.latencyRatioToBaseline.map { String(format: "%.2f", $0) } ?? "-",
        ]
        let costs: [String] = [
            rate(point.throughputPerSecond),
            point.throughputRatioToBaseline.map { String(format: "%.2f", $0) } ?? "-",
            String(format: "%.2f µs", point.posterCPUNanosecondsPerPost / 1000),
            point.systemCallsPerPost.map { String(format: "%.1f", $0) } ?? "-",
            point.allocationsPerPost.map { String(format: "%.1f", $0) } ?? "-",
            point.observerCPUNanosecondsPerNotification.map { String(format: "%.2f µs", $0 / 1000) } ?? "-",
        ]
        let cells =
            [point.label, "\(point.observers)", "\(point.payloadBytes)"] + latencies + costs + [rss, "\(point.lost)"]
        lines.append(zip(cells, header).map { padded($0, $1.1, right: $1.2) }.joined(separator: " "))
    }
    return lines.joined(separator: "\n")
}

/// A self-drawn SVG: p50 latency to the last observer as a bar, a whisker to
/// p99 and a tick at p99.9, by scenario and N, on a log scale; one panel
/// per payload size.
func chart(_ points: [PointResult], machine: MachineInfo) -> String {
    let sizes = Array(Set(points.map(\.payloadBytes))).sorted()
    let kinds = Kind.allCases.filter { kind in points.contains { $0.kind == kind } }
    let counts = Array(Set(points.map(\.observers))).sorted()
    let colors = ["#4C78A8", "#F58518", "#54A24B", "#B279A2"]
    let panelHeight = 300.0
    let left = 70.0
    let groupWidth = 96.0
    let width = left + groupWidth * Double(kinds.count) + 20
    let top = 50.0
    let height = top + (panelHeight + 110) * Double(sizes.count) + 10
    // Log scale from 100 ns to 100 ms.
    let lowest = 2.0
    let highest = 8.0
    var svg = """
        <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" \
        font-family="Helvetica, Arial, sans-serif" font-size="11">
        <rect width="100%" height="100%" fill="white"/>
        <text x="\(left)" y="20" font-size="14" font-weight="bold">Post until the last of N observers has it \
        (p50 bar, p99 whisker, p99.9 tick; log scale)</text>
        <text x="\(left)" y="36" fill="#555">\(escape(machine.processor)), \(machine.cores) cores, \
        \(escape(machine.kernel)), \(machine.mode) run, \(machine.date)</text>

        """
    for (panel, size) in sizes.enumerated() {
        let panelTop = top + Double(panel) * (panelHeight + 110) + 10
        func y(_ nanoseconds: UInt64) -> Double {
            let value = min(max(log10(Double(max(nanoseconds, 1))), lowest), highest)
            return panelTop + panelHeight * (1 - (value - lowest) / (highest - lowest))
        }
        svg += "<text x=\"\(left)\" y=\"\(panelTop - 2)\" font-weight=\"bold\">\(size) B payload</text>\n"
        for exponent in Int(lowest)...Int(highest) {
            let lineY = y(UInt64(pow(10.0, Double(exponent))))
            let label = ["", "", "100 ns", "1 µs", "10 µs", "100 µs", "1 ms", "10 ms", "100 ms"][exponent]
            svg += "<line x1=\"\(left)\" x2=\"\(width - 20)\" y1=\"\(lineY)\" y2=\"\(lineY)\" stroke=\"#ddd\"/>\n"
            svg += "<text x=\"\(left - 6)\" y=\"\(lineY + 4)\" text-anchor=\"end\" fill=\"#555\">\(label)</text>\n"
        }
        for (column, kind) in kinds.enumerated() {
            let groupLeft = left + Double(column) * groupWidth + 8
            let barWidth = (groupWidth - 16) / Double(max(counts.count, 1))
            for (slot, observers) in counts.enumerated() {
                guard
                    let point = points.first(where: {
                        $0.kind == kind && $0.payloadBytes == size && $0.observers == observers
                    })
                else { continue }
                let x = groupLeft + Double(slot) * barWidth
                let color = colors[slot % colors.count]
                let base = y(UInt64(pow(10.0, lowest)))
                let p50 = y(point.latencyToLast.p50)
                let p99 = y(point.latencyToLast.p99)
                let p999 = y(point.latencyToLast.p999)
                let middle = x + barWidth / 2
                svg += """
                    <rect x="\(x + 1)" y="\(p50)" width="\(barWidth - 2)" height="\(max(base - p50, 0))" \
                    fill="\(color)"><title>\(escape(kind.label)), N=\(observers): p50 \
                    \(microseconds(point.latencyToLast.p50)), p99 \(microseconds(point.latencyToLast.p99)), \
                    p99.9 \(microseconds(point.latencyToLast.p999))</title></rect>
                    <line x1="\(middle)" x2="\(middle)" y1="\(p50)" y2="\(p99)" stroke="#222"/>
                    <line x1="\(middle - 4)" x2="\(middle + 4)" y1="\(p99)" y2="\(p99)" stroke="#222"/>
                    <line x1="\(middle - 2)" x2="\(middle + 2)" y1="\(p999)" y2="\(p999)" stroke="#c00"/>

                    """
            }
            let labelY = panelTop + panelHeight + 14
            let words = kind.label.split(separator: " ").map(String.init)
            let half = (words.count + 1) / 2
            for (line, text) in [words[..<half].joined(separator: " "), words[half...].joined(separator: " ")]
                .enumerated() where !text.isEmpty
            {
                svg += """
                    <text x="\(groupLeft + (groupWidth - 16) / 2)" y="\(labelY + Double(line) * 13)" \
                    text-anchor="middle">\(escape(text))</text>

                    """
            }
        }
        let legendY = panelTop + panelHeight + 50
        for (slot, observers) in counts.enumerated() {
            let x = left + Double(slot) * 90
            svg +=
                "<rect x=\"\(x)\" y=\"\(legendY)\" width=\"12\" height=\"12\" fill=\"\(colors[slot % colors.count])\"/>"
            svg += "<text x=\"\(x + 16)\" y=\"\(legendY + 10)\">N = \(observers)</text>\n"
        }
    }
    return svg + "</svg>\n"
}

func escape(_ text: String) -> String {
    text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
        .replacingOccurrences(of: ">", with: "&gt;")
}
