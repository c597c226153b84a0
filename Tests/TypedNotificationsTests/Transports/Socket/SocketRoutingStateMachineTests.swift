import Testing

@_spi(TransportAuthoring) @testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

/// Where a socket poster sends each name, tested without threads, sockets or
/// files: peers are plain strings, and the tests play the registry, the
/// change events and the connections.
@Suite("Socket routing state machine")
struct SocketRoutingStateMachineTests {
    typealias Machine = SocketRoutingStateMachine<String>

    let a: NotificationName = "com.example.a"
    let b: NotificationName = "com.example.b"

    /// Runs a post's routing steps as the transport does, with `registry`
    /// as the listing and `connect` deciding each connection. Returns the
    /// actions taken, for the tests to check what was (not) done.
    struct Driver {
        var machine = Machine(excludedEndpoint: "self")
        var registry: [NotificationName: [String]] = [:]
        var generation: UInt64? = 1
        var events: Machine.ChangeEvents = .changed([])
        var lostWatches: Set<Int> = []
        var watchable = true
        var connect: (String) -> Machine.Connection = { .connected("peer-" + $0) }
        var spoolHolders: Set<String> = []
        var nextWatch = 1

        var watches: [NotificationName: Int] = [:]
        /// Listings of a name's own directory (namespaces' are counted apart).
        var listings = 0
        var connects: [String] = []
        var removedEntries: [String] = []
        var released: [String] = []
        /// Endpoints registered for namespaces, and their directories' watches and listings.
        var namespaces: [NotificationNamespace: [String]] = [:]
        var namespaceWatches: [NotificationNamespace: Int] = [:]
        var namespaceListings = 0

        mutating func post(_ name: NotificationName) -> [String] {
            defer {
                events = .changed([])
                lostWatches = []
            }
            guard machine.check(name, generation: generation) == .readChanges else { return machine.route(of: name) }
            machine.changesRead(events, lostWatches: lostWatches, for: name)
            while let (directory, action) = machine.nextScan(for: name) {
                if action == .watch {
                    var index: Int?
                    if watchable {
                        index = nextWatch
                        switch directory {
                        case .name(let name): watches[name] = nextWatch
                        case .namespace(let namespace): namespaceWatches[namespace] = nextWatch
                        }
                        nextWatch += 1
                    }
                    machine.watched(directory, as: index)
                }
                let listed: [String]
                switch directory {
                case .name(let name):
                    listings += 1
                    listed = registry[name] ?? []
                case .namespace(let namespace):
                    namespaceListings += 1
                    listed = namespaces[namespace] ?? []
                }
                for id in machine.listed(directory, endpoints: listed) {
                    connects.append(id)
                    if case .removeEntry(let dead) = machine.connected(id, connect(id)) {
                        removedEntries.append("\(dead)/\(id)")
                    }
                }
                let holders = spoolHolders
                released += machine.finishScan(keeping: { holders.contains($0) })
            }
            return machine.route(of: name)
        }
    }

    @Test("the first post of a name watches it, lists it and connects to every endpoint but itself, in registry order")
    func firstPost() {
        var driver = Driver()
        driver.registry[a] = ["e2", "self", "e1"]
        #expect(driver.post(a) == ["e2", "e1"])
        #expect(driver.watches[a] == 1)
        #expect(driver.connects == ["e2", "e1"])
        #expect(driver.machine.peer("e1") == "peer-e1")
        #expect(driver.machine.routes[.name(a)] == ["e2", "e1"])
        #expect(driver.machine.takeChanges()?.listedIn == ["e2": .name(a), "e1": .name(a)])
        #expect(driver.machine.takeChanges() == nil, "published once")
    }

    @Test("a transport that delivers to itself routes to its own endpoint too")
    func deliversToSelf() {
        var driver = Driver()
        driver.machine = Machine(excludedEndpoint: nil)
        driver.registry[a] = ["self"]
        #expect(driver.post(a) == ["self"])
    }

    @Test("with the shared generation unchanged, a cached route is used without reading the change events")
    func generationHolds() {
        var driver = Driver()
        driver.registry[a] = ["e1"]
        _ = driver.post(a)
        #expect(driver.machine.check(a, generation: 1) == .current)
        #expect(driver.machine.check(b, generation: 1) == .readChanges, "a name never routed is looked up")
        #expect(driver.machine.check(a, generation: 2) == .readChanges, "a bumped generation reads the events")
        #expect(driver.machine.check(a, generation: 2) == .current, "and is then remembered")
    }

    @Test("without a shared generation, every post reads the change events, but lists only a changed name")
    func noGeneration() {
        var driver = Driver()
        driver.generation = nil
        driver.registry[a] = ["e1"]
        driver.registry[b] = ["e2"]
        _ = driver.post(a)
        _ = driver.post(b)
        #expect(driver.listings == 2)
        #expect(driver.machine.check(a, generation: nil) == .readChanges)

        driver.registry[a] = ["e1", "e3"]
        _ = driver.post(a)
        #expect(driver.listings == 2, "no event, so the cache holds")
        driver.events = .changed([driver.watches[a] ?? 0])
        #expect(driver.post(a) == ["e1", "e3"])
        #expect(driver.listings == 3)
        #expect(driver.post(b) == ["e2"])
        #expect(driver.listings == 3, "b's directory did not change")
        #expect(driver.connects == ["e1", "e2", "e3"], "a connected endpoint is not connected again")
    }

    @Test("overflowed change events forget every route, so each name is listed again on its next post")
    func overflow() {
        var driver = Driver()
        driver.registry = [a: ["e1"], b: ["e2"]]
        _ = driver.post(a)
        _ = driver.post(b)
        driver.generation = 2
        driver.events = .overflowed
        _ = driver.post(a)
        #expect(driver.listings == 3)
        driver.generation = 3
        _ = driver.post(b)
        #expect(driver.listings == 4)
        #expect(driver.watches.count == 2, "still watched: no watch is added twice")
    }

    @Test("a name whose directory was removed loses its watch and is watched anew")
    func lostWatch() {
        var driver = Driver()
        driver.registry[a] = ["e1"]
        _ = driver.post(a)
        driver.generation = 2
        let lost = driver.watches[a] ?? 0
        driver.lostWatches = [lost]
        driver.registry[a] = []
        #expect(driver.post(a) == [])
        #expect(driver.watches[a].map { $0 != lost } == true, "watched again under a new index")
        #expect(driver.released == ["peer-e1"], "an endpoint no name routes to is let go")
    }

    @Test("a directory that cannot be watched is listed all the same, and again after each registry change")
    func unwatchable() {
        var driver = Driver()
        driver.watchable = false
        driver.registry[a] = ["e1"]
        #expect(driver.post(a) == ["e1"], "listed without a watch")
        #expect(driver.listings == 1)
        #expect(driver.post(a) == ["e1"])
        #expect(driver.listings == 1, "cached while the generation stands: nothing registered meanwhile")
        // No change event can tell of it: the generation does.
        driver.registry[a] = ["e1", "e2"]
        driver.generation = 2
        #expect(driver.post(a) == ["e1", "e2"])
        #expect(driver.listings == 2)
        // Once it can be watched, it is, and the events take over.
        driver.watchable = true
        driver.generation = 3
        #expect(driver.post(a) == ["e1", "e2"])
        #expect(driver.watches[a] != nil)
        driver.generation = 4
        #expect(driver.post(a) == ["e1", "e2"])
        #expect(driver.listings == 3, "watched now: a generation change with no event for it lists nothing")
    }

    @Test("without a generation, a name that cannot be watched is listed and tried again on every post")
    func unwatchableWithoutGeneration() {
        var driver = Driver()
        driver.generation = nil
        driver.watchable = false
        #expect(driver.post(a) == [], "its directory is gone, and nobody registered yet")
        driver.registry[a] = ["e1"]
        #expect(driver.post(a) == ["e1"], "an observer that registers later is found at the next post")
        driver.watchable = true
        #expect(driver.post(a) == ["e1"])
        #expect(driver.watches[a] != nil)
        let listings = driver.listings
        #expect(driver.post(a) == ["e1"])
        #expect(driver.listings == listings, "watched: no change event, no listing")
    }

    @Test("a dead endpoint's entry is removed; refused and unreachable ones are left out and retried on the next scan")
    func connectionOutcomes() {
        var driver = Driver()
        driver.registry[a] = ["dead", "refused", "later", "e1"]
        driver.connect = { id in
            switch id {
            case "dead": .dead
            case "refused": .refused
            case "later": .unreachable
            default: .connected("peer-" + id)
            }
        }
        #expect(driver.post(a) == ["e1"])
        #expect(driver.removedEntries == ["com.example.a/dead"])

        driver.connect = { .connected("peer-" + $0) }
        driver.registry[a] = ["refused", "later", "e1"]
        driver.generation = 2
        driver.events = .changed([driver.watches[a] ?? 0])
        #expect(driver.post(a) == ["refused", "later", "e1"])
        #expect(driver.connects.suffix(2) == ["refused", "later"], "only the unconnected are connected")
    }

    @Test("an endpoint that left keeps its connection while this poster's spool for it is unread, then is let go")
    func spoolKeepsPeer() {
        var driver = Driver()
        driver.registry = [a: ["e1", "e2"], b: ["e2"]]
        _ = driver.post(a)
        _ = driver.post(b)
        driver.spoolHolders = ["peer-e1"]
        driver.registry[a] = ["e2"]
        driver.generation = 2
        driver.events = .changed([driver.watches[a] ?? 0])
        #expect(driver.post(a) == ["e2"])
        #expect(driver.released.isEmpty, "e1 has not read its spool: its order must hold")
        #expect(driver.machine.peer("e1") == "peer-e1")

        driver.spoolHolders = []
        driver.generation = 3
        driver.events = .changed([driver.watches[a] ?? 0])
        _ = driver.post(a)
        #expect(driver.released == ["peer-e1"])
        #expect(driver.machine.peer("e1") == nil)
        #expect(driver.machine.peer("e2") == "peer-e2", "still routed for both names")
    }

    @Test("an endpoint found dead while sending leaves every route, and the names to clean up are reported")
    func diedWhileSending() {
        var driver = Driver()
        driver.registry = [a: ["e1", "e2"], b: ["e1"]]
        _ = driver.post(a)
        _ = driver.post(b)
        _ = driver.machine.takeChanges()
        #expect(driver.machine.endpointDied("e1") == [.name(a), .name(b)])
        #expect(driver.machine.route(of: a) == ["e2"])
        #expect(driver.machine.route(of: b) == [])
        #expect(driver.machine.peer("e1") == nil)
        #expect(driver.machine.takeChanges()?.peers == ["e2": "peer-e2"])
        #expect(driver.machine.check(b, generation: 1) == .current, "an emptied route is still current")
    }

    @Test("closing lets every peer go and forgets every route")
    func removeAll() {
        var driver = Driver()
        driver.registry = [a: ["e1", "e2"]]
        _ = driver.post(a)
        #expect(Set(driver.machine.removeAll()) == ["peer-e1", "peer-e2"])
        #expect(driver.machine.route(of: a) == [])
        #expect(driver.machine.check(a, generation: 1) == .readChanges)
    }
}
