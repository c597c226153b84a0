@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// The receive call of a loop made before the transport opened: set by
/// `open`, before the loop's thread starts, and read by that thread only.
package final class LoopReceiveCall: Sendable {
    // The closure is kept in a class: a function value read and written
    // through a generic lock's `inout` is wrapped in two conversion thunks
    // at every access, and a closure read on every receive grew without
    // bound (seen in a profile as nested `Int32` thunks).
    private final class Body: Sendable {
        let receive: @Sendable (CInt) -> Void
        init(_ receive: @escaping @Sendable (CInt) -> Void) { self.receive = receive }
    }

    private let body = Locked<Body?>(nil)

    /// A call with no receive yet.
    package init() {}

    /// What the loop's receive does from now on.
    package func set(_ receive: @escaping @Sendable (CInt) -> Void) {
        let made = Body(receive)
        body.withLock { $0 = made }
    }

    /// Lets go of the receive (and what it holds) once the loop stopped:
    /// the loop holds this call, and the receive holds what received.
    package func clear() {
        let gone = body.withLock { body -> Body? in
            defer { body = nil }
            return body
        }
        // Released after unlocking: its captures' deinits may run now.
        withExtendedLifetime(gone) {}
    }

    /// Runs the receive, waiting at most `timeoutMilliseconds` (-1: without limit).
    package func callAsFunction(_ timeoutMilliseconds: CInt) {
        body.withLock { $0 }?.receive(timeoutMilliseconds)
    }
}
