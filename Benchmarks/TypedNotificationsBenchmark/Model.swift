import Foundation
import TypedNotificationsCatalog

/// What posts and what observes in one scenario: one of our transports
/// (every transport of the catalog that crosses processes, as it is), or a
/// floor or a peer it is compared with.
struct Kind: RawRepresentable, Codable, Hashable, Sendable {
    let rawValue: String
    /// The transport family whose baseline its ratio uses: a catalog
    /// entry's name, or in-process.
    let group: Group
    let label: String
    /// Whether this kind is ours (the others are floors and peers).
    let isTypedNotifications: Bool

    /// A transport family: `in-process`, or the name of a catalog entry.
    struct Group: RawRepresentable, Codable, Hashable, Sendable {
        let rawValue: String
        static let inProcess = Group(rawValue: "in-process")
    }

    private init(_ name: String, _ group: Group, _ label: String, ours: Bool = false) {
        rawValue = name
        self.group = group
        self.label = label
        isTypedNotifications = ours
    }

    /// The kind called `rawValue`, if there is one.
    init?(rawValue: String) {
        guard let kind = Kind.allCases.first(where: { $0.rawValue == rawValue }) else { return nil }
        self = kind
    }

    static let floor = Kind("floor", .inProcess, "floor: mutex + closures")
    static let foundation = Kind("foundation", .inProcess, "Foundation blocks")
    static let asyncMessage = Kind("async-message", .inProcess, "Foundation AsyncMessage")
    static let hubHandlers = Kind("hub-handlers", .inProcess, "hub, handlers", ours: true)
    static let hubSequences = Kind("hub-sequences", .inProcess, "hub, for await", ours: true)
    static let rawDatagram = Kind("raw-datagram", Group(rawValue: "socket"), "floor: raw datagram")
    static let rawDatagramEpoll = Kind("raw-datagram-epoll", Group(rawValue: "socket"), "floor: epoll + datagram")
    static let rawAppend = Kind("raw-append", Group(rawValue: "file"), "floor: append + inotify")
    static let rawRedis = Kind("raw-redis", Group(rawValue: "redis"), "floor: bare XADD + XREAD")
    static let redisPubSub = Kind("redis-pubsub", Group(rawValue: "redis"), "Redis PUBLISH/SUBSCRIBE")
    static let socket = transport("socket")
    static let file = transport("file")
    static let redis = transport("redis")

    /// The floors and peers, each the first of its group (its baseline).
    private static let comparisons: [Kind] = [
        floor, foundation, asyncMessage, hubHandlers, hubSequences, rawDatagram, rawDatagramEpoll, rawAppend, rawRedis,
        redisPubSub,
    ]

    /// The catalog's transport called `name`.
    private static func transport(_ name: String) -> Kind {
        let entry = TransportCatalog.entry(named: name)
        return Kind(name, Group(rawValue: name), entry?.typeName ?? name, ours: true)
    }

    /// Our transports between processes, from the catalog.
    static var transports: [Kind] { TransportCatalog.tools.map { transport($0.name) } }

    /// Every kind: the in-process ones, then each transport after its floors and peers.
    static var allCases: [Kind] {
        var kinds = comparisons.filter { $0.group == .inProcess }
        for transport in transports {
            kinds += comparisons.filter { $0.group == transport.group }
            kinds.append(transport)
        }
        return kinds
    }

    /// The catalog's entry for this kind's transport, when it is one of ours between processes.
    var entry: TransportEntry? {
        isTypedNotifications ? TransportCatalog.tools.first { $0.name == rawValue } : nil
    }

    /// The row every row of this group is compared with: its first floor,
    /// or the row itself for a transport without one.
    var baseline: Kind {
        if group == .inProcess { return .asyncMessage }
        return Kind.comparisons.first { $0.group == group } ?? self
    }

    /// Whether observers are separate processes.
    var isCrossProcess: Bool { group != .inProcess }

    /// Whether its endpoints meet at a server (a Redis of the run's own).
    var meetsAtServer: Bool {
        guard let entry = TransportCatalog.tools.first(where: { $0.name == group.rawValue }) else { return false }
        if case .server = entry.meeting { return true }
        return false
    }

    /// Encoded as its name.
    init(from decoder: any Decoder) throws {
        let name = try decoder.singleValueContainer().decode(String.self)
        guard let kind = Kind(rawValue: name) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "kind \(name)"))
        }
        self = kind
    }

    /// Encoded as its name.
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// One scenario: a kind, a number of observers, a payload size and how much to post.
struct PointSpec: Codable, Sendable {
    var kind: Kind
    var observers: Int
    var payloadBytes: Int
    /// Paced posts before the measured ones, not measured.
    var warmup: Int
    /// Paced posts whose latency is measured.
    var latencyCount: Int
    /// Posts sent back to back after the paced ones, for throughput.
    var burstCount: Int
    /// The least time between two paced posts.
    var gapNanoseconds: UInt64
    /// Where cross-process scenarios keep their files.
    var directory: String
    /// The server of the Redis scenarios.
    var redisURL: String? = nil
    /// Whether the library stamps each step of the path (see `Anatomy`).
    var anatomy: Bool? = nil

    var total: Int { warmup + latencyCount + burstCount }
    var measuredLatency: Range<Int> { warmup..<(warmup + latencyCount) }
    var burst: Range<Int> { (warmup + latencyCount)..<total }
}

/// Percentiles of a latency distribution, in nanoseconds.
struct Percentiles: Codable, Sendable {
    var samples: Int
    var p50: UInt64
    var p99: UInt64
    var p999: UInt64
    var max: UInt64

    init(_ values: [UInt64]) {
        let sorted = values.sorted()
        samples = sorted.count
        func quantile(_ q: Double) -> UInt64 {
            guard !sorted.isEmpty else { return 0 }
            let rank = Int((q * Double(sorted.count)).rounded(.up)) - 1
            return sorted[Swift.min(sorted.count - 1, Swift.max(0, rank))]
        }
        p50 = quantile(0.5)
        p99 = quantile(0.99)
        p999 = quantile(0.999)
        max = sorted.last ?? 0
    }
}

/// Every figure of one scenario.
struct PointResult: Codable, Sendable {
    var kind: Kind
    var label: String
    var group: Kind.Group
    var observers: Int
    var payloadBytes: Int
    var latencyCount: Int
    var burstCount: Int
    var gapNanoseconds: UInt64
    /// Post until each observer has it: every (notification, observer) pair.
    var latencyToEach: Percentiles
    /// Post until the last of the observers has it.
    var latencyToLast: Percentiles
    /// Burst notifications per second, until the slowest observer had the last.
    var throughputPerSecond: Double
    /// CPU time of the posting process per burst post (for in-process kinds,
    /// that process also runs the observers).
    var posterCPUNanosecondsPerPost: Double
    /// System calls the posting process made per burst post (cross-process
    /// kinds only): the library's, counted by its platform layer, or the raw
    /// loop's own.
    var systemCallsPerPost: Double?
    /// Heap allocations per burst post in the posting process, observers
    /// included for in-process kinds; nil where they cannot be counted.
    var allocationsPerPost: Double?
    var posterPeakRSSKiB: Int
    /// The largest peak RSS among observer processes; nil for in-process kinds.
    var observerPeakRSSKiB: Int?
    /// CPU time of an observer process per notification it received, from
    /// ready to the end marker, paced and burst phases together (the mean
    /// over observers); nil for in-process kinds.
    var observerCPUNanosecondsPerNotification: Double?
    /// (notification, observer) pairs of the measured phases never received.
    var lost: Int
    /// p50 latency to the last observer over the baseline's at the same point.
    var latencyRatioToBaseline: Double?
    /// Throughput over the baseline's at the same point.
    var throughputRatioToBaseline: Double?
    /// p50 latency to the last observer in each round, in the order run,
    /// when the point ran in more than one (`--rounds`).
    var roundLatencyP50s: [UInt64]?
    /// Where the time went, step by step, in the median of the rounds that
    /// ran with stamping on (nil where none did).
    var anatomy: AnatomyResult? = nil
    /// The rounds with stamping on beside those with it off.
    var stampingCost: StampingCost? = nil

    /// The round with the median p50 latency to the last observer (the
    /// lower middle one of an even count), carrying every round's p50.
    static func median(of rounds: [PointResult], stamped: [PointResult] = []) -> PointResult {
        let ordered = rounds.sorted { $0.latencyToLast.p50 < $1.latencyToLast.p50 }
        var chosen = ordered[(ordered.count - 1) / 2]
        if rounds.count > 1 { chosen.roundLatencyP50s = rounds.map(\.latencyToLast.p50) }
        // The anatomy of the median stamped round, and the stamped rounds'
        // medians beside the others'.
        let stampedOrder = stamped.sorted { $0.latencyToLast.p50 < $1.latencyToLast.p50 }
        if !stampedOrder.isEmpty {
            chosen.anatomy = stampedOrder[(stampedOrder.count - 1) / 2].anatomy
            chosen.stampingCost = StampingCost(
                latencyP50Off: ordered[(ordered.count - 1) / 2].latencyToLast.p50,
                latencyP50On: stampedOrder[(stampedOrder.count - 1) / 2].latencyToLast.p50,
                posterCPUOff: medianValue(rounds.map(\.posterCPUNanosecondsPerPost)) ?? 0,
                posterCPUOn: medianValue(stamped.map(\.posterCPUNanosecondsPerPost)) ?? 0,
                observerCPUOff: medianValue(
                    rounds.compactMap(\.observerCPUNanosecondsPerNotification)),
                observerCPUOn: medianValue(
                    stamped.compactMap(\.observerCPUNanosecondsPerNotification)))
        }
        return chosen
    }
}

/// Figures of the fixed-cost micro benchmarks.
struct MicroResults: Codable, Sendable {
    /// Cost per notification, post until one handler ran, back to back.
    var floorNanoseconds: Double?
    var hubHandlerNanoseconds: Double?
    var hubActorHandlerNanoseconds: Double?
    var hubSequenceNanoseconds: Double?
    var foundationBlockNanoseconds: Double?
    var asyncMessageNanoseconds: Double?
    var encodeNanoseconds: [String: Double] = [:]
    var decodeNanoseconds: [String: Double] = [:]
    /// The observer table two ways: under a mutex (as the hub keeps it) and
    /// isolated to an actor. Per post: look the name up and call the
    /// observer; per registration: add one and take it out again.
    var tableMutexPostNanoseconds: Double?
    var tableActorPostNanoseconds: Double?
    var tableMutexRegisterNanoseconds: Double?
    var tableActorRegisterNanoseconds: Double?
}

/// The memory run: resident set over a long run, and the cost of an observer.
struct MemoryResults: Codable, Sendable {
    struct Series: Codable, Sendable {
        var kind: Kind
        var notifications: Int
        /// Resident set in KiB after each tenth of the run.
        var residentKiB: [Int]
        /// Growth from the first sample (after warm-up) to the last, in KiB.
        var growthKiB: Int
        /// The allocator's bytes in use after each tenth, in KiB (empty where
        /// it cannot say): live heap, as opposed to pages the allocator keeps.
        var heapKiB: [Int] = []
    }
    var series: [Series] = []
    /// Heap bytes one more handler observer costs on a hub.
    var heapBytesPerHandlerObserver: Int?
    /// Heap bytes one more sequence observer costs on a hub.
    var heapBytesPerSequenceObserver: Int?
    /// One observer, every notification from a sender never seen before.
    var distinctSenders: SenderSeries?
    /// Many hubs of one transport in one process, and what each costs.
    var hubs: [HubsOutput]?
}

/// One target of the issue: what was measured against what was asked.
struct TargetResult: Codable, Sendable {
    var target: String
    var measured: String
    var met: Bool
}

/// Where the figures came from.
struct MachineInfo: Codable, Sendable {
    var processor: String
    var cores: Int
    var kernel: String
    var date: String
    var mode: String

    static func current(quick: Bool) -> MachineInfo {
        let cpuinfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        let model =
            cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }
            .map { String($0.split(separator: ":", maxSplits: 1).last ?? "").trimmingCharacters(in: .whitespaces) }
            ?? "unknown"
        var names = utsname()
        uname(&names)
        let release = withUnsafeBytes(of: names.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let system = withUnsafeBytes(of: names.sysname) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let formatter = ISO8601DateFormatter()
        return MachineInfo(
            processor: model,
            cores: ProcessInfo.processInfo.activeProcessorCount,
            kernel: "\(system) \(release)",
            date: formatter.string(from: Date()),
            mode: quick ? "quick" : "full"
        )
    }
}

/// Everything one run measured: the JSON file's contents.
struct Report: Codable, Sendable {
    var machine: MachineInfo
    var micro: MicroResults
    var points: [PointResult]
    var memory: MemoryResults?
    var targets: [TargetResult]
}
