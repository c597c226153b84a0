import Foundation

/// A `Codable` payload whose JSON must hold only the keys the type knows.
///
/// A plain `Codable` payload decodes JSON with fields its type does not know
/// by dropping them silently, so a type is no allow-list of what observers
/// accept. Conform to this protocol as well, and a payload with any key the
/// type would not itself encode, at any depth, is refused: decoding throws
/// ``StrictJSONPayloadError/unknownKeys(_:)``, and the center counts the
/// notification as undecodable (``NotificationMetrics/undecodable``) and
/// reports it in the observer's next ``NotificationDelivery/missed``, as it
/// does for any payload that does not decode.
///
/// ```swift
/// struct Transfer: TypedNotification, Codable, StrictJSONPayload {
///     static let name: NotificationName = "com.example.transfer"
///     var account: String
///     var cents: Int
///     var note: String?
/// }
/// ```
///
/// Which keys a type knows is found by encoding the decoded value again, so
/// custom `CodingKeys` and nested types are followed. A key whose value is
/// `null` counts as known when the type leaves it out (an optional that is
/// `nil`); a type whose `encode(to:)` omits a key it decodes makes that key
/// unknown, so such types should not conform. Encoding is unchanged.
public protocol StrictJSONPayload: DarwinPayload, Codable {}

extension StrictJSONPayload {
    /// Decodes the value from JSON with a default `JSONDecoder`, then refuses
    /// the payload if it has keys the type does not encode.
    public init(payload bytes: UnsafeRawBufferPointer) throws {
        let data = Data(bytes)
        let value = try JSONDecoder().decode(Self.self, from: data)
        let received = try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
        let known = try JSONSerialization.jsonObject(
            with: JSONEncoder().encode(value), options: [.fragmentsAllowed])
        var unknown: [String] = []
        StrictJSON.collectUnknown(received, known: known, path: "", into: &unknown)
        guard unknown.isEmpty else { throw StrictJSONPayloadError.unknownKeys(unknown) }
        self = value
    }
}

/// Why a ``StrictJSONPayload`` refused its bytes.
public enum StrictJSONPayloadError: Error, Hashable, CustomStringConvertible {
    /// The JSON held keys the type does not know, by path (`.field`,
    /// `.list[2].field`), at most 16 of them.
    case unknownKeys([String])

    /// What was wrong, for a person.
    public var description: String {
        switch self {
        case .unknownKeys(let paths):
            "the payload has keys the type does not know: \(paths.joined(separator: ", "))"
        }
    }
}

enum StrictJSON {
    static let reportLimit = 16

    /// Appends the paths of keys in `received` that `known` (the same value
    /// encoded again) lacks, comparing objects key by key and arrays element
    /// by element.
    static func collectUnknown(_ received: Any, known: Any, path: String, into unknown: inout [String]) {
        guard unknown.count < reportLimit else { return }
        if let object = received as? [String: Any] {
            let knownObject = known as? [String: Any] ?? [:]
            for key in object.keys.sorted() {
                guard let value = object[key] else { continue }
                if let knownValue = knownObject[key] {
                    collectUnknown(value, known: knownValue, path: path + "." + key, into: &unknown)
                } else if !(value is NSNull) {
                    if unknown.count < reportLimit { unknown.append(path + "." + key) }
                }
            }
        } else if let array = received as? [Any] {
            let knownArray = known as? [Any] ?? []
            for (index, element) in array.enumerated() {
                collectUnknown(
                    element, known: index < knownArray.count ? knownArray[index] : NSNull(),
                    path: path + "[\(index)]", into: &unknown)
            }
        }
    }
}
