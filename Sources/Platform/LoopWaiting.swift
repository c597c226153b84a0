/// How an ``EventLoop``'s thread waits when it has nothing to run: the
/// choice of the driver that makes the loop.
@_spi(TransportAuthoring) public struct LoopWaiting: Sendable {
    enum Kind {
        case events
        case receiving(receive: @Sendable (CInt) -> Void, wake: @Sendable () -> Void)
    }

    let kind: Kind

    /// In the system's event queue (`epoll` on Linux, `kqueue` on Apple
    /// platforms) for every descriptor registered with
    /// ``EventLoop/register(_:exclusive:onReadable:)``, woken by an
    /// `eventfd` or a user event. Any number of descriptors; a thread woken
    /// from it then makes a second call to receive what arrived.
    @_spi(TransportAuthoring) public static let events = LoopWaiting(kind: .events)

    /// In the driver's own receive call, so a thread that sleeps is woken by
    /// what it receives and takes it in the same call.
    ///
    /// `receive` runs on the loop's thread whenever the loop has nothing
    /// else to do. It blocks at most `timeoutMilliseconds` (-1: without
    /// limit, 0: not at all; the loop's next timer sets it, rounded up and
    /// at most 60 s, so a timer never fires early), handles what
    /// it received, and returns. `wake`, called from any thread, makes the
    /// receive blocked now, or the next one, return soon: for example a
    /// datagram the process sends to its own socket, which `receive` then
    /// takes and discards. The loop calls it at most once per sleep, and
    /// only while the thread sleeps or is about to, for jobs, timers and
    /// ``EventLoop/stop()`` alike. The loop watches no
    /// descriptors then (``EventLoop/register(_:exclusive:onReadable:)``
    /// refuses).
    @_spi(TransportAuthoring) public static func receiving(
        _ receive: @escaping @Sendable (_ timeoutMilliseconds: CInt) -> Void,
        wake: @escaping @Sendable () -> Void
    ) -> LoopWaiting {
        LoopWaiting(kind: .receiving(receive: receive, wake: wake))
    }
}
