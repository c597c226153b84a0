import Dispatch
@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// Limits and policies of a ``SocketTransport``.
public struct SocketTransportConfiguration: Sendable {
    /// Who besides the owner may use the directory. Default: ``DirectorySharing/ownerOnly``.
    public var sharing: DirectorySharing
    /// How many bytes of notifications a poster spools for one endpoint whose
    /// socket cannot take more (a suspended or slow process), counting what
    /// other posters already spooled there when it starts. Default 16 MiB:
    /// about 150,000 notifications with small payloads. Past it, posts to that
    /// endpoint throw ``TypedNotificationError/Code/undelivered`` and the
    /// endpoint is told how many it missed. The spool is a file in the shared
    /// directory, so what it holds outlives the poster.
    public var spoolLimitPerEndpoint: Int
    /// How long a post waits, at most, for endpoints whose socket is full
    /// before it writes to their spool instead. Default 1 ms.
    ///
    /// A running endpoint drains its socket within microseconds, so a short
    /// wait lets a burst to live observers go through their sockets, which
    /// costs less than writing it to files. A suspended endpoint makes one post
    /// wait this long; every later post to it is spooled at once, without
    /// waiting, until the endpoint has read the spool. The wait is one for all
    /// full endpoints of a post, not one each. `.zero` spools at once.
    public var fullSocketWait: Duration
    /// Whether a post also reaches observers of this same transport. Default `true`.
    public var deliversToSelf: Bool
    /// Whether received datagrams are checked against the sender the kernel
    /// names (`SCM_CREDENTIALS`, Linux). Where the system cannot say (Darwin:
    /// xnu attaches no credentials to a datagram), `false`, and a sender is
    /// what its envelope claims, guarded by the directory's permissions (see
    /// the *Security model*). Tests turn it off on Linux to run Darwin's path;
    /// not public: no application should give up the kernel's word.
    package var usesKernelCredentials = SystemCalls.credentialsSupported

    /// Whether the receiving thread sleeps in its receive call where it can
    /// (Linux), rather than in the system's event queue. Tests turn it off
    /// to run, on Linux, the path Apple platforms take.
    package var sleepsInReceive = true

    /// Whether the receiving thread sleeps in its receive call however
    /// many such threads the process has already (the first two, see
    /// `SocketTransport.receivingThreads`): tests run that path whatever
    /// else runs beside them.
    package var sleepsInReceiveBeyondLimit = false

    /// The most one name keeps waiting for its observers' room, in bytes
    /// (see `SocketHandOver`): 32 MiB. Tests of the bound lower it.
    package var heldBytesPerName = 32 * 1024 * 1024

    /// The loop group a transport shares a thread of when it does not
    /// sleep in a receive of its own: the process's; tests that hold a
    /// handler on purpose give one of their own.
    package var loopGroup = LoopGroup.shared

    /// Creates a configuration.
    public init(
        sharing: DirectorySharing = .ownerOnly,
        spoolLimitPerEndpoint: Int = 16 * 1024 * 1024,
        fullSocketWait: Duration = .milliseconds(1),
        deliversToSelf: Bool = true
    ) {
        self.sharing = sharing
        self.spoolLimitPerEndpoint = spoolLimitPerEndpoint
        self.fullSocketWait = fullSocketWait
        self.deliversToSelf = deliversToSelf
    }

    /// ``fullSocketWait`` in nanoseconds, at least 0 and at most a second.
    var fullSocketWaitNanoseconds: UInt64 {
        let (seconds, attoseconds) = fullSocketWait.components
        guard seconds >= 0, attoseconds >= 0 else { return 0 }
        guard seconds < 1 else { return 1_000_000_000 }
        return UInt64(attoseconds / 1_000_000_000)
    }
}

/// Counters of a ``SocketTransport``: what it sent, held back, dropped,
/// refused and cleaned up.
public struct SocketTransportStatistics: Hashable, Sendable {
    /// Datagrams sent to endpoints, including this transport's own.
    public var sent: Int
    /// Notifications written to an endpoint's spool because its socket could
    /// not take more at once.
    public var spooled: Int
    /// Posts that found an endpoint's socket full, with nothing spooled for
    /// it, and waited for it (at most
    /// ``SocketTransportConfiguration/fullSocketWait``) before sending or
    /// spooling.
    public var fullSocketWaits: Int
    /// Notifications an endpoint did not take: its spool was over the limit
    /// (the endpoint is told how many) or could not be written.
    public var dropped: Int
    /// Envelopes received and handed to the center, from the socket and from
    /// this endpoint's spool.
    package var received: Int
    /// Of `received`, those read from this endpoint's spool.
    public var receivedFromSpool: Int
    /// Endpoints never sent to because their socket file was not a socket of
    /// this directory: a symbolic link, another owner's file, or a socket
    /// that turned out to be bound elsewhere.
    public var refusedEndpoints: Int
    /// Datagrams refused because they came from a user who may not post here,
    /// or claimed to come from another user than they did.
    public var refusedForeignSender: Int
    /// Datagrams refused because they were not a valid envelope.
    public var refusedMalformed: Int
    /// Notifications refused unread because their payload was over the
    /// center's the hub's `maximumPayloadSize` (``NotificationHub/init(endpoint:transport:maximumPayloadSize:)``); the
    /// center counts them as undecodable and reports them as missed.
    public var refusedOversized: Int
    /// This endpoint's registry entries that someone removed (`rm -rf
    /// DIR/names/NAME`, say) and it made again, as soon as the removal
    /// changed its registration file's link count, so posts reach it again.
    public var repairedEntries: Int
    /// Registry entries of dead endpoints this transport removed.
    public var reapedEndpoints: Int
    /// Files in the registry that were not valid entries (wrong name, a
    /// symbolic link, another owner) and were ignored.
    public var ignoredRegistryFiles: Int
    /// Sends and spool writes that failed for a reason other than a full or
    /// dead endpoint.
    public var failedSends: Int
    /// The `errno` of the last such failure, or 0.
    package var lastSendError: Int32
    /// Times a name's registry directory was read. Posting reads it once per
    /// name and again only after it changed, never once per post.
    package var registryScans: Int
    /// Endpoints this transport holds a socket to now.
    package var connectedEndpoints: Int
}
