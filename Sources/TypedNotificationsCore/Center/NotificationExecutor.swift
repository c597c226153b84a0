import Synchronization
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// The serial executor a center runs handlers on when no actor is given.
///
/// Handlers of one center that run here never run concurrently with each
/// other. On a transport that receives on an event loop (the socket and
/// file transports), that loop is this executor: a notification it
/// receives is handed to these handlers on the thread that received it,
/// without waking another. When a handler has nothing queued, that thread
/// calls it there and then, inline, before it receives more: no job is
/// queued and no task switched to (unless inline handlers on that thread
/// have run for 1 ms since it last ran its jobs: then it is queued, as it
/// would be otherwise). An inline run is outside any task, so
/// task-local values bound where the observer was added are not seen
/// there (capture what a handler needs when adding it); order, exact
/// cancel and everything else a handler is promised are the same either
/// way. A process's first few such transports have a
/// thread each; the rest share a few threads, as the channels of a
/// swift-nio event loop do. A handler here should not block, then: while
/// it runs, its transport, and the others on its thread, receive for
/// nobody. A transport looks at its I/O again after at most 1 ms of
/// handlers plus the handler call running then, and so does every other
/// transport on that thread; handlers on other actors never run there. A
/// handler that must block belongs on an actor of its own
/// (the `addObserver` forms that take `on actor:`).
public actor NotificationExecutor {
    // The transport's executor, or nil: the jobs queue on `pool`.
    private let shared: (any TaskExecutor & SerialExecutor)?
    private let pool = PoolQueue()
    /// The transport's event loop, when that is the executor: a handler
    /// here may then run inline, from the I/O that brought its notification.
    let loop: EventLoop?

    /// Creates an executor whose jobs run on the shared pool.
    package init() {
        shared = nil
        loop = nil
    }

    /// Creates an executor on a transport's own executor, if it has one.
    init(sharing executor: (any TaskExecutor & SerialExecutor)?) {
        shared = executor
        loop = executor as? EventLoop
    }

    /// Where this actor's jobs run.
    public nonisolated var unownedExecutor: UnownedSerialExecutor {
        shared?.asUnownedSerialExecutor() ?? pool.unownedExecutor
    }

    /// The same thread as a task executor, or `nil` when this executor runs
    /// on the shared pool. A `for await` loop in a task that prefers it
    /// receives without a second thread wake-up:
    ///
    /// ```swift
    /// Task(executorPreference: center.executor.taskExecutor) {
    ///     for await reload in try center.notifications(.of(Reload.self)) { … }
    /// }
    /// ```
    ///
    /// The loop's body then runs on the transport's thread and, like a
    /// handler on this executor, should not block.
    public nonisolated var taskExecutor: (any TaskExecutor)? { shared }
}

/// A plain actor whose executor a ``NotificationExecutor`` without a
/// transport executor shares: the runtime's queue on the shared pool.
private actor PoolQueue {}
