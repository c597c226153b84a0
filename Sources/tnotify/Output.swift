import Foundation
import TypedNotifications

/// Writes one line to standard output at once, so a pipe sees every line as it happens.
func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// A timestamp as ISO 8601 with milliseconds, in UTC.
func isoTime(_ timestamp: NotificationTimestamp) -> String {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    return formatter.string(from: timestamp.date)
}

/// The payload for a person: text if it is UTF-8, else hex.
func readablePayload(_ bytes: [UInt8]) -> String {
    if bytes.isEmpty { return "(empty)" }
    if let text = String(validating: bytes, as: UTF8.self) { return text }
    return "0x"
        + bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
}

/// One delivery as a line of text: time, name, sender, sequence, payload.
func textLine(_ name: NotificationName, _ delivered: DeliveredNotification<RawNotification>) -> String {
    let delivery = delivered.delivery
    var line =
        "\(isoTime(delivery.timestamp)) \(name) from \(delivery.sender.endpoint)(\(delivery.sender.processID)) #\(delivery.sequence)"
    if delivery.missed > 0 || !delivery.missedIsExact {
        // `N+`: at least N, how many more cannot be known.
        line += " missed=\(delivery.missed)\(delivery.missedIsExact ? "" : "+")"
    }
    if delivery.isRedelivery { line += " redelivery" }
    return line + " " + readablePayload(delivered.notification.bytes)
}

/// One delivery as a JSON object; the payload as JSON when it is JSON, else as
/// `payloadText` or `payloadBase64`.
func jsonLine(_ name: NotificationName, _ delivered: DeliveredNotification<RawNotification>) -> String {
    let delivery = delivered.delivery
    var object: [String: Any] = [
        "time": isoTime(delivery.timestamp),
        "name": name.rawValue,
        "sender": [
            "endpoint": delivery.sender.endpoint, "pid": Int(delivery.sender.processID),
            "uid": Int(delivery.sender.userID),
        ],
        "sequence": delivery.sequence,
        "missed": delivery.missed,
    ]
    if !delivery.missedIsExact { object["missedExact"] = false }
    if delivery.isRedelivery { object["redelivery"] = true }
    let bytes = Data(delivered.notification.bytes)
    if !bytes.isEmpty, let json = try? JSONSerialization.jsonObject(with: bytes, options: [.fragmentsAllowed]) {
        object["payload"] = json
    } else if let text = String(validating: delivered.notification.bytes, as: UTF8.self) {
        object["payloadText"] = text
    } else {
        object["payloadBase64"] = bytes.base64EncodedString()
    }
    guard
        let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    else { return "{}" }
    return String(decoding: data, as: UTF8.self)
}

/// Writes one line to standard error at once.
func warn(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}
