import Foundation
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

// Fixed costs, back to back in this process: post until one handler has
// run, per notification; and encoding and decoding one envelope.

struct Tick: TypedNotification, Codable {
    static let name: NotificationName = "bench.micro"
    var index: Int
}

struct TickMessage: NotificationCenter.AsyncMessage {
    typealias Subject = AnyObject
    var index: Int
}

extension NotificationCenter.MessageIdentifier where Self == NotificationCenter.BaseMessageIdentifier<TickMessage> {
    static var microTick: Self { .init() }
}

/// An actor of the benchmark's own, as an application's would be.
actor TickCounter {
    var seen = 0
}

/// An observer as the table stores it: an identity and what it is offered.
struct TableEntry: Sendable {
    var id: Int
    var offer: @Sendable (Int) -> Int
}

/// The observer table as the hub keeps it: a dictionary under a mutex.
/// Posters and registrations run on the caller's thread, synchronously.
final class MutexObserverTable: Sendable {
    private let slots = Locked<[NotificationName: [TableEntry]]>([:])

    func add(_ entry: TableEntry, for name: NotificationName) {
        slots.withLock { $0[name, default: []].append(entry) }
    }

    func remove(_ id: Int, for name: NotificationName) {
        slots.withLock { $0[name]?.removeAll { $0.id == id } }
    }

    func post(_ value: Int, to name: NotificationName) -> Int {
        // Copied out, offered after the lock, as the hub does.
        let entries = slots.withLock { $0[name] } ?? []
        var sum = 0
        for entry in entries { sum &+= entry.offer(value) }
        return sum
    }
}

/// The same table isolated to an actor: every post and every registration
/// is a call onto the actor, so from code that is not on it, an `await`.
actor ActorObserverTable {
    private var slots: [NotificationName: [TableEntry]] = [:]

    func add(_ entry: TableEntry, for name: NotificationName) {
        slots[name, default: []].append(entry)
    }

    func remove(_ id: Int, for name: NotificationName) {
        slots[name]?.removeAll { $0.id == id }
    }

    func post(_ value: Int, to name: NotificationName) -> Int {
        var sum = 0
        for entry in slots[name] ?? [] { sum &+= entry.offer(value) }
        return sum
    }
}

struct Micro {
    var count: Int
    var runs: Int

    /// Runs `body` once to warm up, then `runs` times; prints and returns the
    /// best nanoseconds per notification.
    func measure(_ label: String, _ body: () async throws -> Int) async rethrows -> Double {
        var best = Double.infinity
        var checksum = 0
        _ = try await body()
        for _ in 0..<runs {
            let start = SystemClock.monotonicNanoseconds()
            checksum &+= try await body()
            let elapsed = SystemClock.monotonicNanoseconds() - start
            best = min(best, Double(elapsed) / Double(count))
        }
        // Printing the checksum keeps the optimizer from deleting the work.
        print(String(format: "  %-46@ %9.1f ns/notification  (checksum %d)", label as NSString, best, checksum))
        return best
    }

    /// The floor: a lock-guarded table lookup plus a closure call.
    func floor() -> Int {
        let table = Locked<[NotificationName: [@Sendable (Tick) -> Int]]>([Tick.name: [{ $0.index }]])
        var sum = 0
        for index in 0..<count {
            let handlers = table.withLock { $0[Tick.name] } ?? []
            for handler in handlers { sum &+= handler(Tick(index: index)) }
        }
        return sum
    }

    func hubHandler() async throws -> Int {
        let hub = try NotificationHub(endpoint: "bench", transport: InProcessTransport(bus: InProcessBus()))
        let done = AsyncStream<Int>.makeStream()
        let last = count - 1
        let token = try hub.addObserver(.of(Tick.self), bufferingPolicy: .unbounded) { tick, _ in
            if tick.index == last { done.continuation.yield(tick.index) }
        }
        for index in 0..<count { try hub.post(Tick(index: index)) }
        var iterator = done.stream.makeAsyncIterator()
        let result = await iterator.next() ?? 0
        await token.cancelAndWait()
        return result
    }

    /// The same, with the handler on an actor of the caller's (held weakly by
    /// the hub while it waits, taken strongly for each slice).
    func hubActorHandler() async throws -> Int {
        let hub = try NotificationHub(endpoint: "bench", transport: InProcessTransport(bus: InProcessBus()))
        let done = AsyncStream<Int>.makeStream()
        let last = count - 1
        let actor = TickCounter()
        let token = try hub.addObserver(.of(Tick.self), bufferingPolicy: .unbounded, on: actor) { actor, tick, _ in
            actor.seen &+= 1
            if tick.index == last { done.continuation.yield(actor.seen) }
        }
        for index in 0..<count { try hub.post(Tick(index: index)) }
        var iterator = done.stream.makeAsyncIterator()
        let result = await iterator.next() ?? 0
        await token.cancelAndWait()
        withExtendedLifetime(actor) {}
        return result
    }

    func hubSequence() async throws -> Int {
        let hub = try NotificationHub(endpoint: "bench", transport: InProcessTransport(bus: InProcessBus()))
        let ticks = try hub.notifications(.of(Tick.self), bufferingPolicy: .unbounded)
        let last = count - 1
        let reader = Task {
            var sum = 0
            for await tick in ticks {
                sum &+= tick.index
                if tick.index == last { break }
            }
            return sum
        }
        for index in 0..<count { try hub.post(Tick(index: index)) }
        return await reader.value
    }

    func foundationBlock() -> Int {
        let center = NotificationCenter()
        let name = Notification.Name(Tick.name.rawValue)
        let sum = Locked(0)
        let observer = center.addObserver(forName: name, object: nil, queue: nil) { note in
            let index = note.userInfo?["index"] as? Int ?? 0
            sum.withLock { $0 &+= index }
        }
        for index in 0..<count { center.post(name: name, object: nil, userInfo: ["index": index]) }
        center.removeObserver(observer)
        return sum.withLock { $0 }
    }

    /// Foundation's async messages: posts until the reader has the last one.
    /// Registration happens only once iteration has started, so probes go
    /// first until the reader has seen one.
    func asyncMessage() async throws -> Int {
        let center = NotificationCenter()
        let primed = Countdown()
        let last = count - 1
        let reader = Task.detached {
            var sum = 0
            for await message in center.messages(of: AnyObject.self, for: .microTick, bufferSize: count + 1) {
                if message.index < 0 {
                    if primed.arrived == 0 { primed.arrive() }
                    continue
                }
                sum &+= message.index
                if message.index == last { break }
            }
            return sum
        }
        while primed.arrived == 0 {
            center.post(TickMessage(index: -1))
            try await Task.sleep(for: .milliseconds(1))
        }
        for index in 0..<count { center.post(TickMessage(index: index)) }
        return await reader.value
    }

    /// Encodes `count` envelopes with a payload of `size` bytes.
    func encode(size: Int) throws -> Int {
        let sender = try NotificationSender(processID: 1, userID: 0, endpoint: "bench", instance: 7)
        let payload = [UInt8](repeating: 0x5A, count: size)
        let timestamp = NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
        var sum = 0
        for index in 0..<count {
            let encoded = try NotificationEnvelope.encode(
                name: Tick.name,
                sender: sender,
                sequence: UInt64(index + 1),
                timestamp: timestamp,
                payloadSizeHint: payload.payloadSizeHint
            ) { $0.append(contentsOf: payload) }
            sum &+= encoded.envelopeRange.count
        }
        return sum
    }

    /// Decodes `count` envelopes from a receive buffer that is reused, as
    /// the socket transport does: each is checked there and copied into a
    /// buffer of its own (the one allocation).
    func decode(size: Int) throws -> Int {
        let sender = try NotificationSender(processID: 1, userID: 0, endpoint: "bench", instance: 7)
        let wire = Array(
            try NotificationEnvelope.encode(
                name: Tick.name,
                sender: sender,
                sequence: 1,
                timestamp: NotificationTimestamp(wallClockNanoseconds: 0, monotonicNanoseconds: 0)
            ) { $0.append(contentsOf: [UInt8](repeating: 0x5A, count: size)) }.envelope
        )
        var decoder = EnvelopeDecoder()
        var sum = 0
        for _ in 0..<count {
            let message = try wire.withUnsafeBytes { received throws(TypedNotificationError) in
                try decoder.decode(copying: received)
            }
            sum &+= Int(truncatingIfNeeded: message.sequence)
        }
        return sum
    }

    /// Posts through the mutex table from a task that is on no actor.
    func tableMutexPost() async -> Int {
        let table = MutexObserverTable()
        table.add(TableEntry(id: 1) { $0 }, for: Tick.name)
        var sum = 0
        for index in 0..<count { sum &+= table.post(index, to: Tick.name) }
        return sum
    }

    /// Posts through the actor table from a task that is on no actor: each
    /// post hops onto the actor and back.
    func tableActorPost() async -> Int {
        let table = ActorObserverTable()
        await table.add(TableEntry(id: 1) { $0 }, for: Tick.name)
        var sum = 0
        for index in 0..<count { sum &+= await table.post(index, to: Tick.name) }
        return sum
    }

    /// Adds and removes an observer, `count` times, on the mutex table: the
    /// registration is done when the call returns.
    func tableMutexRegister() async -> Int {
        let table = MutexObserverTable()
        table.add(TableEntry(id: -1) { $0 }, for: Tick.name)
        for index in 0..<count {
            table.add(TableEntry(id: index) { $0 }, for: Tick.name)
            table.remove(index, for: Tick.name)
        }
        return table.post(1, to: Tick.name)
    }

    /// The same on the actor table: only an `await` tells when it is done,
    /// so a synchronous `addObserver` could not promise that.
    func tableActorRegister() async -> Int {
        let table = ActorObserverTable()
        await table.add(TableEntry(id: -1) { $0 }, for: Tick.name)
        for index in 0..<count {
            await table.add(TableEntry(id: index) { $0 }, for: Tick.name)
            await table.remove(index, for: Tick.name)
        }
        return await table.post(1, to: Tick.name)
    }

    /// The observer-table section: the table under a mutex and on an actor.
    func tables(into results: MicroResults) async -> MicroResults {
        var results = results
        print("Observer table, \(count) operations back to back, best of \(runs) runs, one observer")
        results.tableMutexPostNanoseconds = await measure("mutex table: post to a handler") { await tableMutexPost() }
        results.tableActorPostNanoseconds = await measure("actor table: post to a handler") { await tableActorPost() }
        results.tableMutexRegisterNanoseconds = await measure("mutex table: add and remove an observer") {
            await tableMutexRegister()
        }
        results.tableActorRegisterNanoseconds = await measure("actor table: add and remove an observer") {
            await tableActorRegister()
        }
        return results
    }

    /// The envelope section: encode and decode at each size.
    func envelopes(sizes: [Int], into results: MicroResults) async throws -> MicroResults {
        var results = results
        print("Envelope encode and decode, \(count) messages, best of \(runs) runs")
        for size in sizes {
            let encoding = try await measure("encode, \(size) B payload") { try encode(size: size) }
            let decoding = try await measure("decode, \(size) B payload") { try decode(size: size) }
            results.encodeNanoseconds["\(size)"] = encoding
            results.decodeNanoseconds["\(size)"] = decoding
            let bytes = Double(
                NotificationEnvelope.size(
                    nameLength: Tick.name.rawValue.utf8.count, endpointLength: 5, payloadLength: size))
            print(String(format: "    %.2f GB/s encode, %.2f GB/s decode", bytes / encoding, bytes / decoding))
        }
        return results
    }

    /// The delivery-cost section: one observer, back to back.
    func delivery(into results: MicroResults) async throws -> MicroResults {
        var results = results
        print("In-process delivery cost, \(count) notifications back to back, best of \(runs) runs, one observer")
        results.floorNanoseconds = await measure("floor: locked lookup + closure call") { floor() }
        results.hubHandlerNanoseconds = try await measure("NotificationHub, handler on its executor") {
            try await hubHandler()
        }
        results.hubSequenceNanoseconds = try await measure("NotificationHub, for await sequence") {
            try await hubSequence()
        }
        results.hubActorHandlerNanoseconds = try await measure("NotificationHub, handler on a caller's actor") {
            try await hubActorHandler()
        }
        results.foundationBlockNanoseconds = await measure("Foundation NotificationCenter, block observer") {
            foundationBlock()
        }
        // About 60 times slower per message: fewer of them keep the run short.
        let slower = Micro(count: max(1, count / 20), runs: runs)
        results.asyncMessageNanoseconds = try await slower.measure("Foundation AsyncMessage, for await") {
            try await slower.asyncMessage()
        }
        return await tables(into: results)
    }
}
