/// Keeps an observer registered; cancelling it, or releasing the last copy,
/// removes the observer.
///
/// ```swift
/// let token = try center.addObserver(.of(Reload.self)) { note, delivery in … }
/// …
/// token.cancel()               // from any code: no run of the handler begins after this
/// await token.cancelAndWait()  // from async code: the same, without blocking a thread
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

    /// Cancels: once this returns, no run of the handler begins, whatever
    /// thread or actor calls it.
    ///
    /// A run that had already begun on another thread is waited for, so it has
    /// ended too, with two exceptions: a handler that cancels its own token
    /// goes on to the end of its run; and a run whose thread is itself blocked
    /// cancelling (two handlers cancelling each other) is not waited for, as
    /// its body has begun and waiting could deadlock.
    ///
    /// This may block the calling thread for as long as a run in flight takes.
    /// Do not call it while holding something the handler waits for (a lock it
    /// takes, or the main thread while the handler calls
    /// `DispatchQueue.main.sync`). In async code, ``cancelAndWait()`` gives the
    /// same promise without blocking a thread. Releasing the last copy of the
    /// token does what this does.
    public func cancel() {
        handle.control.cancel(waitingForRun: true)
    }

    /// Cancels and waits without blocking a thread: once this returns, the
    /// handler never runs again and no run of it is in flight.
    public func cancelAndWait() async {
        handle.control.cancel(waitingForRun: false)
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
            control.cancel(waitingForRun: true)
        }
    }
}
