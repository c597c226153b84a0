@_spi(TransportAuthoring) import TypedNotificationsCore
/// Where a socket transport sends each name, as a pure state machine.
///
/// A poster keeps, per registry directory, the endpoints registered there
/// (`DIR/names/NAME/ID`, and `DIR/namespaces/NS/ID` for a namespace) and a
/// connected socket per endpoint. A post of a name goes to the endpoints of
/// its own directory and of each enclosing namespace's
/// (``SocketRegistry/directories(of:)``), each endpoint once: the union is
/// kept per name until a route changes, so a post in steady state looks up
/// one name, however many namespaces are observed elsewhere. Scanning the
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

    /// Endpoints per registry directory, in registry order; a directory
    /// missing here is scanned on the next post that looks in it.
    private(set) var routes: [NotificationSelector: [String]] = [:]
    /// How many routes name each endpoint, kept with ``routes``, so that a
    /// scan finds the peers no route names any more without going through
    /// every route (a poster of 10,000 names has 20,000 and more).
    private var routeCounts: [String: Int] = [:]
    /// A directory each routed endpoint was listed in, for naming it in
    /// messages by its registry entry (as small as ``peers``).
    private var listedIn: [String: NotificationSelector] = [:]
    /// The directories each posted name looks in.
    private var directories: [NotificationName: [NotificationSelector]] = [:]
    /// The endpoints a post of each name goes to: the union of its
    /// directories' routes, each endpoint once. A name's is forgotten when
    /// a route it was made of changes (every name's, for a namespace's
    /// route); a name missing here has its directories checked.
    private var unions: [NotificationName: [String]] = [:]
    /// The connected endpoints, by identifier.
    private(set) var peers: [String: Peer] = [:]
    private var watchIndex: [NotificationSelector: Int] = [:]
    private var watchedNames: [Int: NotificationSelector] = [:]
    /// Names whose directory could not be watched: no change event will
    /// tell of them, so each change of the generation (each post, while
    /// there is none) lists them again and tries the watch again.
    private var unwatched: Set<NotificationSelector> = []
    /// Namespace directories that do not exist: posters do not make them
    /// (only observers do), so their route is empty until `namespaces/`
    /// itself, watched under ``registryIndex``, says one was made there.
    private var absent: Set<NotificationSelector> = []
    /// The watch on `namespaces/`, made before the first namespace
    /// directory is looked for.
    private var registryIndex: Int?
    /// The registry generation when the change events were last read.
    private var seenGeneration: UInt64?
    /// Routes or peers changed since ``takeChanges()``.
    private var changed = false
    /// The scan in progress: its name and the endpoints listed, in order.
    private var scan: (name: NotificationSelector, listed: [String])?

    init(excludedEndpoint: String?) {
        self.excludedEndpoint = excludedEndpoint
    }

    /// The endpoints a post of `name` goes to, in order: its own
    /// directory's, then each namespace's not already among them.
    mutating func route(of name: NotificationName) -> [String] {
        if let union = unions[name] { return union }
        var union: [String] = []
        var complete = true
        for directory in directories(of: name) {
            guard let route = routes[directory] else {
                complete = false
                continue
            }
            for id in route where !union.contains(id) { union.append(id) }
        }
        // Kept only once every directory was scanned: a name with one
        // missing is checked again on its next post.
        if complete { unions[name] = union }
        return union
    }

    /// Sets or removes one directory's route, keeping ``routeCounts``.
    /// A name's union is forgotten only when a route it was made of
    /// changes: a route made where there was none was in no union yet.
    private mutating func setRoute(_ directory: NotificationSelector, _ ids: [String]?) {
        if let old = routes[directory], old != ids {
            switch directory {
            case .name(let name): unions[name] = nil
            case .namespace: unions = [:]
            }
        }
        for id in routes[directory] ?? [] {
            let left = routeCounts[id, default: 0] - 1
            routeCounts[id] = left > 0 ? left : nil
        }
        routes[directory] = ids
        for id in ids ?? [] {
            routeCounts[id, default: 0] += 1
            listedIn[id] = directory
        }
    }

    /// The directories a post of `name` looks in, computed once per name.
    private mutating func directories(of name: NotificationName) -> [NotificationSelector] {
        if let known = directories[name] { return known }
        let found = SocketRegistry.directories(of: name)
        directories[name] = found
        return found
    }

    /// Forgets the route of `directory`, and every name's union with it.
    private mutating func forget(_ directory: NotificationSelector) {
        guard routes[directory] != nil else { return }
        setRoute(directory, nil)
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
        if generation == seenGeneration, unions[name] != nil { return .current }
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
        /// Watch `namespaces/` itself (making it) and report
        /// ``watchedRegistry(as:for:)``; then ask again.
        case watchRegistry
        /// Watch the directory, report ``watched(_:as:)``, then list it. A
        /// name's directory is made first; a namespace's is not (see ``absent``).
        case watch
        /// List the name's registry entries, then report ``listed(_:endpoints:)``.
        case list
    }

    /// Forgets the routes of the directories that changed (all of them on
    /// overflow) and the watches that ended (their directories were
    /// removed; they are watched anew when next posted to). Then call
    /// ``nextScan(for:)`` until it returns `nil`.
    mutating func changesRead(_ events: ChangeEvents, lostWatches: Set<Int>, for name: NotificationName) {
        // Reached when the generation changed or is unknown: a directory
        // without a watch may have changed unseen.
        for directory in directories(of: name) where unwatched.remove(directory) != nil { forget(directory) }
        switch events {
        case .changed(let indices):
            for index in indices {
                if let changedName = watchedNames[index] { forget(changedName) }
            }
            if let registryIndex, indices.contains(registryIndex) { forgetAbsent() }
        case .overflowed:
            routes = [:]
            routeCounts = [:]
            unions = [:]
            absent = []
        }
        for index in lostWatches {
            if let lostName = watchedNames.removeValue(forKey: index) {
                watchIndex[lostName] = nil
                forget(lostName)
            }
            if index == registryIndex {
                registryIndex = nil
                forgetAbsent()
            }
        }
    }

    /// A namespace's directory was made in (or removed from) `namespaces/`:
    /// those found missing are looked for again.
    private mutating func forgetAbsent() {
        for directory in absent { forget(directory) }
        absent = []
    }

    /// The next directory a post of `name` must scan, and how; `nil` once
    /// every one has a route.
    mutating func nextScan(for name: NotificationName) -> (directory: NotificationSelector, action: RouteAction)? {
        guard let directory = directories(of: name).first(where: { routes[$0] == nil }) else { return nil }
        changed = true
        // `namespaces/` is watched before a namespace's directory is looked for,
        // so its making is not missed; and a directory is watched before it
        // is listed, so a change during the listing is not missed.
        if case .namespace = directory, registryIndex == nil, !registryWatchFailed(for: directory) {
            return (directory, .watchRegistry)
        }
        return (directory, watchIndex[directory] == nil ? .watch : .list)
    }

    /// Whether the watch on `namespaces/` was tried for this scan and
    /// failed (the system's watches ran out): the directory is then looked
    /// for as an unwatched one is.
    private func registryWatchFailed(for directory: NotificationSelector) -> Bool {
        registryAttempt == directory
    }

    /// The namespace directory whose scan tried the watch on `namespaces/` last.
    private var registryAttempt: NotificationSelector?

    /// `namespaces/` is watched under `index`, or could not be (`nil`).
    mutating func watchedRegistry(as index: Int?, for directory: NotificationSelector) {
        registryIndex = index
        registryAttempt = index == nil ? directory : nil
    }

    /// The directory is watched under `index`, or could not be
    /// (`nil`: its directory is gone, or the system's watches ran out). It
    /// is listed now either way. Without a watch, the name is listed and
    /// watched again on its first post after the shared generation
    /// changes, which every registration and repair bumps (on every post
    /// while there is no generation), so an observer that registers later
    /// is found all the same.
    mutating func watched(_ name: NotificationSelector, as index: Int?) {
        guard let index else {
            // A namespace's directory not made yet: looked for again when
            // `namespaces/` changes, or without that watch, as any unwatched one.
            if case .namespace = name, registryIndex != nil {
                absent.insert(name)
            } else {
                unwatched.insert(name)
            }
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
    mutating func listed(_ name: NotificationSelector, endpoints: [String]) -> [String] {
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
        case removeEntry(NotificationSelector)
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
        setRoute(name, listed.filter { peers[$0] != nil })
        var released: [Peer] = []
        for (id, peer) in peers where routeCounts[id] == nil && !isHoldingSpool(peer) {
            peers[id] = nil
            released.append(peer)
        }
        return released
    }

    // MARK: - While sending

    /// The endpoint `id` turned out dead while sending: it leaves every
    /// route. Returns the names it was routed for, whose entries the caller
    /// removes with its socket file and spool.
    mutating func endpointDied(_ id: String) -> [NotificationSelector] {
        changed = true
        peers[id] = nil
        var names: [NotificationSelector] = []
        for (name, ids) in routes where ids.contains(id) {
            setRoute(name, ids.filter { $0 != id })
            names.append(name)
        }
        return names.sorted { $0.description < $1.description }
    }

    /// Lets every peer go (the transport closed); routes are scanned anew.
    mutating func removeAll() -> [Peer] {
        let all = Array(peers.values)
        peers = [:]
        routes = [:]
        routeCounts = [:]
        unions = [:]
        absent = []
        changed = true
        return all
    }

    /// The peers and a directory each was listed in, when they changed since
    /// the last call (for the transport's statistics, flush and error
    /// messages), else `nil`. Never the routes: a poster of 10,000 names
    /// would copy them all at each change.
    mutating func takeChanges() -> (peers: [String: Peer], listedIn: [String: NotificationSelector])? {
        guard changed else { return nil }
        changed = false
        listedIn = listedIn.filter { peers[$0.key] != nil }
        return (peers, listedIn)
    }
}
