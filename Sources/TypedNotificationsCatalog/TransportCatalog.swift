import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// The one list of transports that everything outside the library reads:
// `tnotify`, the test helper, the contract suite and the benchmark. A new
// transport is its own files in the library plus one entry here (a file of
// its own in this folder, and its name in `TransportCatalog.entries`).

/// Where the endpoints of a transport meet one another.
package enum Meeting: Sendable, Equatable {
    /// Inside one process, on a bus its hubs share.
    case process
    /// In a shared directory: `defaultPath` when none is given.
    case directory(defaultPath: String)
    /// At a server: `defaultURL` when none is given.
    case server(defaultURL: String)
}

/// Where one run's endpoints meet: what a ``Meeting`` is given.
package enum TransportPlace: Sendable {
    /// Inside this process: the buses its hubs share.
    case process(ProcessPlace)
    /// A directory path.
    case directory(String)
    /// A server's URL.
    case server(String)

    /// The path or URL, as a command line gives it; empty for a bus.
    package var text: String {
        switch self {
        case .process: ""
        case .directory(let path): path
        case .server(let url): url
        }
    }
}

/// One meeting inside a process: each in-process transport's bus, made
/// when its first hub asks, shared by every hub made at this place after.
package final class ProcessPlace: Sendable {
    private let buses = Locked<[ObjectIdentifier: any Sendable]>([:])

    /// A place with no bus yet.
    package init() {}

    /// The place's bus of type `Bus`, made by `make` the first time.
    package func bus<Bus: Sendable>(_ make: () -> Bus) -> Bus {
        buses.withLock { buses in
            if let bus = buses[ObjectIdentifier(Bus.self)] as? Bus { return bus }
            let bus = make()
            buses[ObjectIdentifier(Bus.self)] = bus
            return bus
        }
    }
}

/// What a hub asks of its transport beyond its place: a durable identity
/// and where a first run starts, for transports that keep what is posted.
package struct TransportRequest: Sendable {
    /// The durable identity, or `nil` for a reader that starts fresh.
    package var identity: String?
    /// Where a reader without a saved position starts.
    package var firstRead: ReadStart
    /// How many bytes a transport may hold for one reader that is behind,
    /// where it has such a limit (the socket transport's spool); `nil` for
    /// its default.
    package var backlogBytes: Int?
    /// How many notifications of a name a transport that keeps them by
    /// count keeps (a Redis stream's length); `nil` for its default.
    package var keepAtMost: Int?
    /// The loop group a transport that runs on one shares a thread of;
    /// `nil` for the process's. Tests that hold a handler on purpose give
    /// one of their own, so that no other test's hubs wait behind it.
    package var loopGroup: LoopGroup?
    /// Whether a transport in a shared directory shares it with the
    /// directory's group (``DirectorySharing/group``), not its owner alone.
    package var sharedWithGroup: Bool

    /// A request for `identity`, starting at `firstRead`.
    package init(
        identity: String? = nil, firstRead: ReadStart = .end, backlogBytes: Int? = nil, keepAtMost: Int? = nil,
        loopGroup: LoopGroup? = nil, sharedWithGroup: Bool = false
    ) {
        self.identity = identity
        self.firstRead = firstRead
        self.backlogBytes = backlogBytes
        self.keepAtMost = keepAtMost
        self.loopGroup = loopGroup
        self.sharedWithGroup = sharedWithGroup
    }
}

/// Makes a transport at a place.
package typealias TransportMaker =
    @Sendable (TransportPlace, TransportRequest) throws(TypedNotificationError) ->
    any NotificationTransport

/// One transport, as tools and tests meet it: how to make one, where its
/// endpoints meet, what it keeps, and what `tnotify` can show of it.
package struct TransportEntry: Sendable {
    /// The name `tnotify --transport` and the test helper's KIND use.
    package let name: String
    /// The Swift type users write, such as `SocketTransport`.
    package let typeName: String
    /// Where its endpoints meet.
    package let meeting: Meeting
    /// Whether it keeps what is posted: durable identities, a first read,
    /// the newest value (`tnotify latest`, `--cursor`, `--from`).
    package let keepsPosts: Bool
    /// Another platform's path played on this one (no kernel credentials,
    /// no change events): run by the contract suite, not offered by `tnotify`.
    package let isVariant: Bool
    /// Makes a transport at `place`.
    package let make: TransportMaker
    /// `tnotify ls`: lines that describe what is at a place.
    package let list: (@Sendable (String) throws(TypedNotificationError) -> [String])?
    /// `tnotify gc`: cleans up at a place and says what it did.
    package let collectGarbage: (@Sendable (String) throws(TypedNotificationError) -> String)?
    /// Why `tnotify gc` has nothing to do, when ``collectGarbage`` is `nil`.
    package let noGarbage: String
    /// `tnotify watch`: warnings about a name at a place shared so, before watching.
    package let warnings: @Sendable (NotificationName, String, DirectorySharing) -> [String]
    /// A place as tools print it (a URL without its password).
    package let describe: @Sendable (String) -> String

    /// An entry; every optional part may be left out.
    package init(
        name: String, typeName: String, meeting: Meeting, keepsPosts: Bool = false, isVariant: Bool = false,
        make: @escaping TransportMaker,
        list: (@Sendable (String) throws(TypedNotificationError) -> [String])? = nil,
        collectGarbage: (@Sendable (String) throws(TypedNotificationError) -> String)? = nil,
        noGarbage: String = "",
        warnings: @escaping @Sendable (NotificationName, String, DirectorySharing) -> [String] = { _, _, _ in [] },
        describe: @escaping @Sendable (String) -> String = { $0 }
    ) {
        self.name = name
        self.typeName = typeName
        self.meeting = meeting
        self.keepsPosts = keepsPosts
        self.isVariant = isVariant
        self.make = make
        self.list = list
        self.collectGarbage = collectGarbage
        self.noGarbage = noGarbage
        self.warnings = warnings
        self.describe = describe
    }

    /// Whether its endpoints can be in different processes.
    package var crossesProcesses: Bool { meeting != .process }

    /// Where its endpoints meet when no place is given.
    package var defaultPlace: TransportPlace {
        switch meeting {
        case .process: .process(ProcessPlace())
        case .directory(let path): .directory(path)
        case .server(let url): .server(url)
        }
    }

    /// `text` as a place of this transport: a directory or a URL.
    package func place(_ text: String) -> TransportPlace {
        switch meeting {
        case .process: .process(ProcessPlace())
        case .directory: .directory(text)
        case .server: .server(text)
        }
    }

    /// A hub over a new transport at `place`, erased to what tools use.
    package func makeHub(
        at place: TransportPlace, endpoint: String, request: TransportRequest = TransportRequest(),
        configuration: NotificationHubConfiguration = NotificationHubConfiguration()
    ) throws(TypedNotificationError) -> AnyHub {
        let transport = try make(place, request)
        return AnyHub(try erase(transport, endpoint: endpoint, configuration: configuration))
    }

    /// Runs `body` with a hub over a new transport at `place`, typed.
    package func withHub<Body: HubBody>(
        at place: TransportPlace, endpoint: String, request: TransportRequest = TransportRequest(),
        _ body: Body
    ) async throws -> Body.Result {
        try await open(try make(place, request), endpoint: endpoint, body)
    }
}

/// What runs with a hub whose transport type a catalog entry chose.
package protocol HubBody {
    /// What the body returns.
    associatedtype Result
    /// Runs with `hub`.
    func run<T: NotificationTransport>(_ hub: NotificationHub<T>) async throws -> Result
}

private func open<T: NotificationTransport, Body: HubBody>(_ transport: T, endpoint: String, _ body: Body)
    async throws -> Body.Result
{
    try await body.run(NotificationHub(endpoint: endpoint, transport: transport))
}

private func erase<T: NotificationTransport>(
    _ transport: T, endpoint: String, configuration: NotificationHubConfiguration
) throws(TypedNotificationError) -> any ErasedHub {
    try NotificationHub(endpoint: endpoint, transport: transport, configuration: configuration)
}

/// Every transport this package has.
package enum TransportCatalog {
    /// Every entry, variants included, in the order tools list them.
    package static let entries: [TransportEntry] = [
        .inProcess, .envelopeLoopback, .socket, .socketWithoutCredentials, .file, .fileSleepingInRead,
        .fileInEventQueue, .fileWithoutChangeEvents, .redis,
    ]

    /// The transports `tnotify` offers: between processes, no variants.
    package static var tools: [TransportEntry] { entries.filter { $0.crossesProcesses && !$0.isVariant } }

    /// The entry called `name`, if there is one.
    package static func entry(named name: String) -> TransportEntry? {
        entries.first { $0.name == name }
    }
}
