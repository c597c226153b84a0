import Foundation
import Testing
@_spi(TransportAuthoring) import TypedNotifications
import TypedNotificationsCatalog

/// What a transport's subscription selects, on every transport of the
/// catalog: one name, or every name of a namespace. A transport that serves
/// single names only says so with a typed error and subscribes nothing.
@Suite("A transport subscribes to what its selector says", .timeLimit(.minutes(5)))
struct SelectorContractTests {
    /// The transports that serve namespaces today; the others refuse them.
    static let servingNamespaces: Set<String> = [
        "in-process", "envelope-loopback", "socket", "socket-without-credentials", "file",
        "file-sleeping-in-read", "file-in-event-queue", "file-without-change-events", "redis",
    ]

    /// Posts from `poster` under each of `names`, one sequence each.
    private func post(_ names: [String], from poster: any NotificationTransport, as sender: NotificationSender)
        throws
    {
        for (index, text) in names.enumerated() {
            let name = try NotificationName(validating: text)
            try poster.send(try forgedMessage(Ping(index: index), named: name, from: sender, sequence: 1))
        }
    }

    @Test(
        "a namespace takes every name in it, first posted after the subscription, each once; a near miss never",
        arguments: ContractTransport.available.filter { $0.directoryLength == nil })
    func namespace(kind: ContractTransport) async throws {
        try await kind.withPlace { place in
            let observer = try kind.entry.make(place, TransportRequest())
            let poster = try kind.entry.make(place, TransportRequest())
            defer {
                observer.close()
                poster.close()
            }
            let received = Collector<String>()
            let posterSender = try forgedSender(endpoint: "poster", instance: 1)
            try observer.open(
                as: try forgedSender(endpoint: "observer", instance: 2),
                receiver: TransportReceiver(receive: { received.append($0.name.rawValue) }))
            try poster.open(as: posterSender, receiver: TransportReceiver(receive: { _ in }))
            let jobs = try NotificationNamespace(validating: "com.example.jobs")
            do throws(TypedNotificationError) {
                try observer.subscribe(to: .namespace(jobs))
            } catch {
                #expect(error.code == .unsupported, "\(error)")
                #expect(!Self.servingNamespaces.contains(kind.entry.name), "\(kind.entry.name) refused: \(error)")
                // Nothing was subscribed: a post of a name in it reaches nobody.
                try observer.subscribe(to: .name("com.example.end"))
                try post(["com.example.jobs.started", "com.example.end"], from: poster, as: posterSender)
                await received.wait(forCount: 1)
                #expect(received.values == ["com.example.end"])
                return
            }
            #expect(Self.servingNamespaces.contains(kind.entry.name))
            // Also by name, inside the namespace: still once per post.
            try observer.subscribe(to: .name("com.example.jobs.started"))
            try observer.subscribe(to: .name("com.example.end"))
            try post(
                [
                    "com.example.jobsx", "com.example", "com.example.jobs", "com.example.jobs.started",
                    "com.example.jobs.batch.done", "com.example.jobs.", "com.other.jobs", "com.example.end",
                ], from: poster, as: posterSender)
            await received.wait(forCount: 5)
            #expect(
                received.values.sorted()
                    == [
                        "com.example.end", "com.example.jobs", "com.example.jobs.", "com.example.jobs.batch.done",
                        "com.example.jobs.started",
                    ])

            // Unsubscribing the namespace leaves the name; exact once it returns.
            observer.unsubscribe(from: .namespace(jobs))
            try post(
                ["com.example.jobs.batch.done", "com.example.jobs.started", "com.example.end"], from: poster,
                as: posterSender)
            await received.wait(forCount: 7)
            #expect(received.values.suffix(2).sorted() == ["com.example.end", "com.example.jobs.started"])
        }
    }
}

@Suite("Notification namespaces")
struct NotificationNamespaceTests {
    @Test("membership is by whole labels")
    func wholeLabels() throws {
        let jobs = try NotificationNamespace(validating: "com.example.jobs")
        #expect(jobs.contains("com.example.jobs"))
        #expect(jobs.contains("com.example.jobs.started"))
        #expect(jobs.contains("com.example.jobs.batch.done"))
        #expect(!jobs.contains("com.example.jobsx"))
        #expect(!jobs.contains("com.example.job"))
        #expect(!jobs.contains("com.example"))
        #expect(!jobs.contains("org.com.example.jobs"))
        #expect(NotificationSelector.namespace(jobs).description == "com.example.jobs.*")
        #expect(NotificationSelector.name("com.example.jobs").matches("com.example.jobs"))
        #expect(!NotificationSelector.name("com.example.jobs").matches("com.example.jobs.started"))
    }

    @Test(
        "a namespace's text follows a name's rules and ends with a label",
        arguments: ["", ".com", "a..b", "a b", "com.example.", String(repeating: "a", count: 201)])
    func invalid(text: String) {
        #expect(throws: TypedNotificationError.self) { try NotificationNamespace(validating: text) }
        do {
            _ = try NotificationNamespace(validating: text)
        } catch {
            #expect(error.code == .invalidName)
        }
    }

    @Test("the namespaces containing a name are one per label, shortest first")
    func containing() throws {
        var found: [String] = []
        NotificationNamespace.forEach(containing: "com.example.jobs.started") { found.append($0.rawValue) }
        #expect(found == ["com", "com.example", "com.example.jobs", "com.example.jobs.started"])
        found = []
        NotificationNamespace.forEach(containing: "com.example.") { found.append($0.rawValue) }
        #expect(found == ["com", "com.example"])
        found = []
        NotificationNamespace.forEach(containing: "a..b") { found.append($0.rawValue) }
        #expect(found.isEmpty, "an invalid literal is in no namespace")
        for namespace in ["com", "com.example", "com.example.jobs"] {
            #expect(try NotificationNamespace(validating: namespace).contains("com.example.jobs.started"))
        }
    }

    @Test("a selector table finds each subscriber once, by name and by every enclosing namespace")
    func table() throws {
        var table = SelectorTable<Int, String>()
        let com = try NotificationNamespace(validating: "com")
        let jobs = try NotificationNamespace(validating: "com.example.jobs")
        table.add("by name", key: 1, to: .name("com.example.jobs.started"))
        table.add("by name", key: 1, to: .namespace(jobs))
        table.add("jobs", key: 2, to: .namespace(jobs))
        table.add("everything under com", key: 3, to: .namespace(com))
        // By name first, then by each namespace that contains it, shortest first.
        #expect(table.subscribers(of: "com.example.jobs.started").map(\.key) == [1, 3, 2])
        #expect(table.subscribers(of: "com.example.jobsx").map(\.key) == [3])
        #expect(table.subscribers(of: "org.example").isEmpty)
        table.remove(3, from: .namespace(com))
        table.removeEverywhere(1)
        #expect(table.subscribers(of: "com.example.jobs.started").map(\.key) == [2])
        table.remove(2, from: .namespace(jobs))
        #expect(table.isEmpty)
    }
}
