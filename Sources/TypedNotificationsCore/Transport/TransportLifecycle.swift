@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// The lifecycle every transport shares: created, open once, closed for
/// good. A transport keeps one in the state its lock guards, decides under
/// the lock, and acts (starts or ends its loop, closes descriptors) after
/// it. Pure: no system call, no lock, no thread.
@_spi(TransportAuthoring) public struct TransportLifecycle<Opened: Sendable>: Sendable {
    /// What `close` must do once the lock is let go.
    @_spi(TransportAuthoring) public enum Closing: Sendable {
        /// Closed before: nothing to do.
        case alreadyClosed
        /// Never opened: the loop never started, so it is only stopped.
        case neverOpened
        /// Was open: end what `open` started.
        case wasOpen(Opened)
    }

    private enum Phase {
        case created
        case open(Opened)
        case closed
    }

    private var phase = Phase.created
    /// How errors name the transport: "socket", "file", "Redis", "in-process".
    private let kind: String

    /// A lifecycle that has not been opened, of a transport called `kind` in errors.
    @_spi(TransportAuthoring) public init(kind: String) {
        self.kind = kind
    }

    /// Opens, keeping `opened` for as long as the transport is open.
    ///
    /// - Throws: `.closed` if it was opened or closed before: a transport
    ///   opens once.
    @_spi(TransportAuthoring) public mutating func open(_ opened: Opened) throws(TypedNotificationError) {
        try checkOpenable()
        phase = .open(opened)
    }

    /// Throws what ``open(_:)`` would: a transport asks this before the
    /// work an open does (sockets, watches), so a second open or one after
    /// close is refused as `.closed` without doing any of it.
    @_spi(TransportAuthoring) public func checkOpenable() throws(TypedNotificationError) {
        switch phase {
        case .created: return
        case .open:
            throw TypedNotificationError(code: .closed, message: "this \(kind) transport was already opened")
        case .closed:
            throw TypedNotificationError(code: .closed, message: "this \(kind) transport is closed")
        }
    }

    /// What `open` kept, for `operation` (such as "subscribe").
    ///
    /// - Throws: `.closed`, naming `operation`, unless the transport is open.
    @_spi(TransportAuthoring) public func opened(for operation: String) throws(TypedNotificationError) -> Opened {
        switch phase {
        case .open(let opened): return opened
        case .created:
            throw TypedNotificationError(
                code: .closed, message: "\(operation) on a \(kind) transport that is not open yet")
        case .closed:
            throw TypedNotificationError(code: .closed, message: "\(operation) on a \(kind) transport that is closed")
        }
    }

    /// Whether it is open now.
    @_spi(TransportAuthoring) public var isOpen: Bool {
        if case .open = phase { return true }
        return false
    }

    /// Whether it was closed.
    @_spi(TransportAuthoring) public var isClosed: Bool {
        if case .closed = phase { return true }
        return false
    }

    /// Closes for good, and says what the transport must do after its lock.
    @_spi(TransportAuthoring) public mutating func close() -> Closing {
        defer { phase = .closed }
        switch phase {
        case .created: return .neverOpened
        case .open(let opened): return .wasOpen(opened)
        case .closed: return .alreadyClosed
        }
    }
}

extension TransportLifecycle where Opened == Void {
    /// Opens a transport that keeps nothing from `open`.
    @_spi(TransportAuthoring) public mutating func open() throws(TypedNotificationError) {
        try open(())
    }
}

extension TransportLifecycle.Closing {
    /// Whether the transport was open until this close.
    @_spi(TransportAuthoring) public var wasOpen: Bool {
        if case .wasOpen = self { return true }
        return false
    }

    /// Ends a transport's event loop the one way every transport does,
    /// without waiting for it: the loop is stopped, and `finish` runs once
    /// its thread has finished (on that thread, after the handler running
    /// there now returns; at once when it never ran). `finish` tears down
    /// what the thread used and says the close is done
    /// (``TransportCore/finishClosing()``). A second close does nothing:
    /// the first one's `finish` runs. Returns ``wasOpen``.
    @discardableResult
    @_spi(TransportAuthoring) public func end(_ loop: EventLoop, then finish: @escaping @Sendable () -> Void) -> Bool {
        switch self {
        case .alreadyClosed: return false
        case .neverOpened, .wasOpen:
            loop.stop()
            loop.whenFinished(finish)
            return wasOpen
        }
    }
}
