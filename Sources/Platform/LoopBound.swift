/// An object that belongs to one event loop: made on any thread, then used
/// only by the loop's jobs, handlers and timers (or, once the loop stopped,
/// by the one thread draining its jobs). ``value`` checks that on every
/// access, in every build, so confinement is a check rather than a comment.
///
/// The check is one atomic load and `pthread_self`, no lock.
@_spi(TransportAuthoring) public final class LoopBound<Value: AnyObject>: @unchecked Sendable {
    // Sendable: the object is reached only through `value`, which traps
    // unless the calling thread is the one running the loop's jobs now, and
    // that thread runs one job, handler or timer at a time, so two threads
    // never touch it at once. It is stored here before the first job that
    // uses it is enqueued, and enqueueing goes through the loop's lock, so
    // that job sees what its maker wrote.

    /// The loop the object belongs to.
    @_spi(TransportAuthoring) public let loop: EventLoop
    private let object: Value

    /// Binds `object`, which the caller must not use any more, to `loop`.
    @_spi(TransportAuthoring) public init(_ object: Value, on loop: EventLoop) {
        self.object = object
        self.loop = loop
    }

    /// The object; traps when called off the loop.
    @_spi(TransportAuthoring) public var value: Value {
        precondition(loop.isCurrent, "state of the event loop \(loop.name) used on another thread")
        return object
    }
}
