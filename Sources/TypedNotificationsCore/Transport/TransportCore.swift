@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// The skeleton of a transport with an event loop of its own: what the
/// socket, file and Redis transports share, written once.
///
/// It owns the driver's loop (an ``EventLoop``, on a thread of its own or
/// one it shares with other transports' loops, which also runs the hub's
/// executor, so a received notification reaches a handler there without
/// waking another thread), the live counters behind the transport's
/// statistics, and one lock over the transport's lifecycle and whatever the
/// driver shares between threads. The driver keeps what differs: how it
/// sets up, what its thread waits for, how it subscribes, sends and tears
/// down. The rule is the package's: decide under the lock, act after it.
///
/// The driver makes the thread and hands it over, choosing how it waits
/// (``LoopWaiting``): in the system's event queue, for drivers that watch
/// several descriptors (every driver here today), or in a receive call of
/// the driver's own, so a thread that sleeps is woken by what it receives.
///
/// The in-process transport needs none of this: it has no thread, nothing
/// to wait for and nothing to encode; a post reaches the other hubs'
/// receivers on the poster's own thread.
@_spi(TransportAuthoring)
public final class TransportCore<Opened: Sendable, Shared, Statistics: CountedStatistics>: Sendable {
    /// What the lock guards: the lifecycle, and what the driver shares.
    @_spi(TransportAuthoring) public struct State {
        // `shared` comes first: a driver with nothing to share (`Void`) has
        // a zero-sized field, and one at the end would have the address
        // just past this object, which ThreadSanitizer then reports as a
        // race with whatever object the allocator put next.
        /// The driver's own state.
        @_spi(TransportAuthoring) public var shared: Shared
        /// Created, open (holding what `open` kept) or closed.
        @_spi(TransportAuthoring) public var lifecycle: TransportLifecycle<Opened>
    }

    /// The live counters of the transport's statistics.
    @_spi(TransportAuthoring) public let counters = Counters<Statistics>()
    /// The driver's thread: it receives, runs timers and the hub's executor.
    @_spi(TransportAuthoring) public let loop: EventLoop
    /// The lifecycle and the driver's shared state, under one lock held for
    /// no system call and no user code.
    @_spi(TransportAuthoring) public let state: Locked<State>
    /// Signalled once what `close` started is done.
    private let closeDone = OneShotEvent()

    /// A core for a transport called `kind` in errors ("socket"), around
    /// `loop`, sharing `shared` under its lock.
    @_spi(TransportAuthoring) public init(kind: String, loop: EventLoop, shared: sending Shared) {
        self.loop = loop
        state = Locked(State(shared: shared, lifecycle: TransportLifecycle(kind: kind)))
    }

    /// A thread for a core: an event loop named `name` that waits as
    /// `waiting` says.
    ///
    /// - Throws: ``TypedNotificationError/Code/transportFailure`` naming
    ///   `place` when the system refuses one (out of descriptors).
    @_spi(TransportAuthoring) public static func makeLoop(
        named name: String, for place: String, waiting: LoopWaiting = .events
    ) throws(TypedNotificationError) -> EventLoop {
        do throws(Errno) {
            return try EventLoop(name: name, waiting: waiting)
        } catch {
            throw SharedDirectory.failure(error, "could not start an event loop for \(place)")
        }
    }

    /// A loop for a core on a thread of `group`, which it shares with
    /// other transports' loops: its own descriptors, timers, stop and
    /// finish, on one of a few threads.
    ///
    /// - Throws: ``TypedNotificationError/Code/transportFailure`` naming
    ///   `place` when the system refuses the group a new thread's event
    ///   queue (out of descriptors).
    package static func sharedLoop(named name: String, for place: String, in group: LoopGroup)
        throws(TypedNotificationError) -> EventLoop
    {
        do throws(Errno) {
            return try group.loop(named: name)
        } catch {
            throw SharedDirectory.failure(error, "could not start an event loop for \(place)")
        }
    }

    // MARK: - The lifecycle

    /// Throws `.closed` unless the transport can still open: asked before
    /// the work an open does, so a second open does none of it.
    @_spi(TransportAuthoring) public func checkOpenable() throws(TypedNotificationError) {
        try state.withLock { (state: inout State) throws(TypedNotificationError) in
            try state.lifecycle.checkOpenable()
        }
    }

    /// Opens, keeping `opened`, and lets the driver record what it set up
    /// in its shared state, under the same lock.
    ///
    /// - Throws: `.closed` if it was opened or closed meanwhile; what
    ///   `record` throws. Either way the lifecycle is as it was.
    @_spi(TransportAuthoring) public func open<Result>(
        _ opened: Opened, recording record: (inout Shared) throws(TypedNotificationError) -> sending Result
    ) throws(TypedNotificationError) -> sending Result {
        try state.withLock { (state: inout State) throws(TypedNotificationError) -> sending Result in
            try state.lifecycle.checkOpenable()
            let result = try record(&state.shared)
            try state.lifecycle.open(opened)
            return result
        }
    }

    /// What `open` kept, for `operation`.
    ///
    /// - Throws: `.closed`, naming `operation`, unless the transport is open.
    @_spi(TransportAuthoring) public func opened(for operation: String) throws(TypedNotificationError) -> Opened {
        try state.withLock { (state: inout State) throws(TypedNotificationError) in
            try state.lifecycle.opened(for: operation)
        }
    }

    /// Whether the transport is open now.
    @_spi(TransportAuthoring) public var isOpen: Bool {
        state.withLock { $0.lifecycle.isOpen }
    }

    /// Closes for good, and lets the driver take, under the same lock, what
    /// it must tear down after it. The caller then tears down and ends the
    /// thread (``TransportLifecycle/Closing/end(_:)``) where its order needs.
    @_spi(TransportAuthoring) public func close<Result>(taking take: (inout Shared) -> sending Result) -> (
        closing: TransportLifecycle<Opened>.Closing, taken: Result
    ) {
        state.withLock { state in
            let closing = state.lifecycle.close()
            return (closing, take(&state.shared))
        }
    }

    /// Says that what `close` started is done (the thread finished, the
    /// last acknowledgements sent, the cursors saved): every body given to
    /// `whenClosed(_:)` runs now, on the calling thread. Later calls do
    /// nothing.
    @_spi(TransportAuthoring) public func finishClosing() {
        closeDone.signal()
    }

    /// Runs `body` once ``finishClosing()`` was called: at once, on the
    /// calling thread, if it was; else on the thread that calls it.
    @_spi(TransportAuthoring) public func whenClosed(_ body: @escaping @Sendable () -> Void) {
        closeDone.whenSignalled(body)
    }

    // MARK: - What every driver checks

    /// The envelope of `message`: every driver here carries bytes, never
    /// values.
    ///
    /// - Throws: ``TypedNotificationError/Code/transportFailure`` for a
    ///   message its center did not encode (a center never sends one).
    @_spi(TransportAuthoring) public func envelope(of message: TransportMessage, kind: String)
        throws(TypedNotificationError)
        -> EncodedNotification
    {
        guard case .encoded(let encoded) = message.payload else {
            throw TypedNotificationError(code: .transportFailure, message: "the \(kind) transport sends envelopes only")
        }
        return encoded
    }

    /// A decoder for what the driver receives, refusing before it copies a
    /// payload over the receiving center's limit.
    @_spi(TransportAuthoring) public static func decoder(for receiver: TransportReceiver) -> EnvelopeDecoder {
        EnvelopeDecoder(maximumPayloadSize: receiver.maximumPayloadSize)
    }

    /// Binds the driver's receive state to its thread: from now on only
    /// that thread touches it.
    @_spi(TransportAuthoring) public func onThread<Receiving: AnyObject>(_ receiving: Receiving) -> LoopBound<Receiving>
    {
        LoopBound(receiving, on: loop)
    }
}
