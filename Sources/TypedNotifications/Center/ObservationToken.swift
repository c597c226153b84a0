/// Keeps an observer registered; cancelling it, or releasing the last copy,
/// removes the observer.
///
/// ```swift
/// let token = try center.addObserver(Reload.self) { note, delivery in … }
/// …
/// await token.cancel()   // no run of the handler is in flight or will start
/// ```
///
/// Copies share one registration. Hold the token for as long as you want
/// notifications: a token that is never stored cancels at once.
public struct ObservationToken: Hashable, Sendable {
    private let handle: Handle

    init(control: any ObservationControl, loop: Task<Void, Never>) {
        handle = Handle(control: control, loop: loop)
    }

    /// Whether the observer has been cancelled, or its center closed.
    public var isCancelled: Bool { handle.control.isEnded }

    /// Cancels without waiting: no run of the handler starts after this
    /// returns, but one already running elsewhere may still be finishing.
    ///
    /// Use this from inside the handler itself, or from synchronous code.
    public func cancel() {
        handle.control.cancel()
    }

    /// Cancels and waits: once this returns, the handler never runs again and
    /// no run of it is in flight.
    public func cancel() async {
        handle.control.cancel()
        await handle.loop.value
    }

    /// Whether two tokens control the same registration.
    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.handle === rhs.handle }

    /// Hashes the registration's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(handle)) }

    private final class Handle: Sendable {
        let control: any ObservationControl
        let loop: Task<Void, Never>

        init(control: any ObservationControl, loop: Task<Void, Never>) {
            self.control = control
            self.loop = loop
        }

        deinit {
            control.cancel()
        }
    }
}
