/// A notification: a value whose type names where it travels.
///
/// Declare one per event. A `Codable` struct gets its payload coding for free
/// (see ``DarwinPayload``):
///
/// ```swift
/// struct BroadcastStarted: TypedNotification, Codable {
///     static let name: NotificationName = "com.example.broadcast.started"
///     var sessionID: UUID
/// }
/// ```
///
/// Observers of ``name`` receive values of the type they asked for. Within one
/// process a posted value is handed over as it is, never encoded; across
/// processes, or to an observer that asked for a different type under the same
/// name, it travels as its ``DarwinPayload`` bytes.
public protocol TypedNotification: DarwinPayload {
    /// The name every value of this type is posted under.
    static var name: NotificationName { get }
}
