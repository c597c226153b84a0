import Foundation

/// One notification as `tnotify watch --json` printed it.
struct Watched: Hashable {
    var name: String
    var pid: Int
    var sequence: UInt64
    var isRedelivery: Bool

    /// The notifications among `lines`, in order; other lines are skipped.
    static func parse(_ lines: [String]) -> [Watched] {
        lines.compactMap { line in
            guard line.hasPrefix("{"),
                let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let name = object["name"] as? String, let sequence = object["sequence"] as? NSNumber,
                let sender = object["sender"] as? [String: Any], let pid = sender["pid"] as? Int
            else { return nil }
            return Watched(
                name: name, pid: pid, sequence: sequence.uint64Value,
                isRedelivery: object["redelivery"] as? Bool ?? false)
        }
    }
}

extension Watched {
    /// The JSON objects among `lines`, in order; other lines are skipped.
    static func jsonObjects(_ lines: some Sequence<String>) -> [[String: Any]] {
        lines.compactMap { line in
            guard line.hasPrefix("{") else { return nil }
            return try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        }
    }
}
