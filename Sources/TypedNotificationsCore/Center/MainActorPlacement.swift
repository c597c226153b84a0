/// Marks a handler that runs on the main actor: `addObserver(.of(T.self), on: .main)`.
public struct MainActorPlacement: Sendable {
    /// The main actor.
    public static let main = MainActorPlacement()
}
