/// Where a socket transport sends each name, as a pure state machine.
///
/// A poster keeps, per notification name, the endpoints registered for it
/// (`DIR/names/NAME/ID`) and a connected socket per endpoint. Scanning the
/// registry and connecting cost system calls, so the cache is kept until
/// the registry changes, which the poster learns in two steps: a generation
/// counter every process shares (bumped by each registration and removal;
/// reading it is free) says whether anything changed at all, and only then
/// the change events (inotify, one watch per name directory) say which names
/// changed. A name whose directory changed, lost its watch, or was never
/// scanned is scanned again: endpoints not connected yet are connected, dead
/// ones have their entry removed, refused ones are left out. Endpoints no
/// route names any more are let go once they hold none of this poster's
/// spool, so order holds until they have read it. An endpoint found dead
/// while sending is reaped from every route.
///
/// No threads, no files, no system calls: the transport's send performs the
/// actions (reading the counter and the events, watching, listing,
/// connecting, removing) and reports what came of them. `Peer` is what a
/// connection is (a ``SocketPeer``; a plain value in tests).
struct SocketRoutingStateMachine<Peer> {
    /// This transport's own endpoint, left out of every route; `nil` when it
    /// delivers to itself.
    let excludedEndpoint: String?

    /// Endpoints per name, in registry order; a name missing here is scanned
    /// on its next post.
    private(set) var routes: [NotificationName: [String]] = [:]
    /// The connected endpoints, by identifier.
    private(set) var peers: [String: Peer] = [:]
    private var watchIndex: [NotificationName: Int] = [:]
    private var watchedNames: [Int: NotificationName] = [:]
    /// Names whose directory could not be watched: no change event will
    /// tell of them, so each change of the generation (each post, while
    /// there is none) lists them again and tries the watch again.
    private var unwatched: Set<NotificationName> = []
    /// The registry generation when the change events were last read.
    private var seenGeneration: UInt64?
    /// Routes or peers changed since ``takeChanges()``.
    private var changed = false
    /// The scan in progress: its name and the endpoints listed, in order.
    private var scan: (name: NotificationName, listed: [String])?

    init(excludedEndpoint: String?) {
        self.excludedEndpoint = excludedEndpoint
    }

    /// The endpoints a post of `name` goes to, in order.
    func route(of name: NotificationName) -> [String] {
        routes[name] ?? []
    }

    func peer(_ id: String) -> Peer? {
        peers[id]
    }

    // MARK: - Is the route current?

    enum CacheCheck: Equatable {
        /// Nothing registered or left since the last look: post on the route.
        case current
        /// Read the change events and report them with ``changesRead(_:lostWatches:for:)``.
        case readChanges
    }

    /// The first step of a post of `name`. `generation` is the registry's
    /// shared generation, read before the change events (so a bump made
    /// meanwhile is seen on the next post), or `nil` where there is none.
    mutating func check(_ name: NotificationName, generation: UInt64?) -> CacheCheck {
        guard let generation else { return .readChanges }
        if generation == seenGeneration, routes[name] != nil { return .current }
        seenGeneration = generation
        return .readChanges
    }

    /// What the change events said.
    enum ChangeEvents: Equatable {
        /// These watches' directories changed.
        case changed(Set<Int>)
        /// The events overflowed: every directory may have changed.
        case overflowed
    }

    enum RouteAction: Equatable {
        /// The route of the name is current.
        case current
        /// Watch the name's directory, report ``watched(_:as:)``, then list it.
        case watch
        /// List the name's registry entries, then report ``listed(_:endpoints:)``.
        case list
    }

    /// Forgets the routes of the names whose directories changed (all of
    /// them on overflow) and the watches that ended (their directories were
    /// removed; they are watched anew when next posted), then says what a
    /// post of `name` needs.
    mutating func changesRead(_ events: ChangeEvents, lostWatches: Set<Int>, for name: NotificationName)
        -> RouteAction
    {
        // Reached when the generation changed or is unknown: a name without
        // a watch may have changed unseen.
        if unwatched.remove(name) != nil { routes[name] = nil }
        switch events {
        case .changed(let indices):
            for index in indices {
                if let changedName = watchedNames[index] { routes[changedName] = nil }
            }
        case .overflowed:
            routes = [:]
        }
        for index in lostWatches {
            if let lostName = watchedNames.removeValue(forKey: index) {
                watchIndex[lostName] = nil
                routes[lostName] = nil
            }
        }
        guard routes[name] == nil else { return .current }
        changed = true
        // Watched before it is listed, so a change during the listing is not missed.
        return watchIndex[name] == nil ? .watch : .list
    }

    /// The name's directory is watched under `index`, or could not be
    /// (`nil`: its directory is gone, or the system's watches ran out). It
    /// is listed now either way. Without a watch, the name is listed and
    /// watched again on its first post after the shared generation
    /// changes, which every registration and repair bumps (on every post
    /// while there is no generation), so an observer that registers later
    /// is found all the same.
    mutating func watched(_ name: NotificationName, as index: Int?) {
        guard let index else {
            unwatched.insert(name)
            return
        }
        watchIndex[name] = index
        watchedNames[index] = name
    }

    // MARK: - Scanning

    /// The valid endpoints registered for `name`, in the registry's order.
    /// Returns those to connect to (listed, not this transport, not yet
    /// connected); report each with ``connected(_:_:)``, then call
    /// ``finishScan(keeping:)``.
    mutating func listed(_ name: NotificationName, endpoints: [String]) -> [String] {
        let listed = endpoints.filter { $0 != excludedEndpoint }
        scan = (name, listed)
        return listed.filter { peers[$0] == nil }
    }

    /// How connecting to an endpoint went.
    enum Connection {
        case connected(Peer)
        /// Nobody is bound there any more.
        case dead
        /// Not a socket of this directory: never sent to.
        case refused
        /// Some other failure: tried again on the next scan.
        case unreachable
    }

    enum ConnectAction: Equatable {
        case none
        /// The endpoint is dead: remove its entry for the scanned name, its
        /// socket file and its spool.
        case removeEntry(NotificationName)
    }

    /// Records how connecting to `id`, during the scan, went.
    mutating func connected(_ id: String, _ connection: Connection) -> ConnectAction {
        switch connection {
        case .connected(let peer):
            peers[id] = peer
            return .none
        case .dead:
            return scan.map { .removeEntry($0.name) } ?? .none
        case .refused, .unreachable:
            return .none
        }
    }

    /// Ends the scan: the name's route is every listed endpoint now
    /// connected, in the registry's order. Returns the peers let go: those
    /// no route names any more, for which `isHoldingSpool` says this poster
    /// has nothing waiting in their spool (so its order holds until they
    /// have read it).
    mutating func finishScan(keeping isHoldingSpool: (Peer) -> Bool) -> [Peer] {
        guard let (name, listed) = scan else { return [] }
        scan = nil
        routes[name] = listed.filter { peers[$0] != nil }
        let routed = Set(routes.values.joined())
        var released: [Peer] = []
        for (id, peer) in peers where !routed.contains(id) && !isHoldingSpool(peer) {
            peers[id] = nil
            released.append(peer)
        }
        return released
    }

    // MARK: - While sending

    /// The endpoint `id` turned out dead while sending: it leaves every
    /// route. Returns the names it was routed for, whose entries the caller
    /// removes with its socket file and spool.
    mutating func endpointDied(_ id: String) -> [NotificationName] {
        changed = true
        peers[id] = nil
        var names: [NotificationName] = []
        for (name, ids) in routes where ids.contains(id) {
            routes[name] = ids.filter { $0 != id }
            names.append(name)
        }
        return names.sorted { $0.rawValue < $1.rawValue }
    }

    /// Lets every peer go (the transport closed); routes are scanned anew.
    mutating func removeAll() -> [Peer] {
        let all = Array(peers.values)
        peers = [:]
        routes = [:]
        changed = true
        return all
    }

    /// The peers and routes, when they changed since the last call (for the
    /// transport's statistics, flush and error messages), else `nil`.
    mutating func takeChanges() -> (peers: [String: Peer], routes: [NotificationName: [String]])? {
        guard changed else { return nil }
        changed = false
        return (peers, routes)
    }
}
