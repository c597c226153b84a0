import Foundation
import Synchronization
import Testing

@_spi(TransportAuthoring) @testable import TypedNotificationsPlatform

/// Counts the wake-ups a monitor's owner got.
private final class WakeCount: Sendable {
    let count = Atomic<Int>(0)
    var wake: @Sendable () -> Void { { self.count.add(1, ordering: .relaxed) } }
    var value: Int { count.load(ordering: .relaxed) }
}

/// Tells a thread of the test to end.
private final class StopFlag: Sendable {
    private let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .relaxed) }
    func set() { value.store(true, ordering: .relaxed) }
}

/// Adds a subscriber that must be accepted.
private func subscribe(
    _ state: inout ChangeQueueState, _ subscriber: ChangeQueueState.Subscriber, to watch: CInt,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    let added = state.add(subscriber, to: watch)
    #expect(added == .added, sourceLocation: sourceLocation)
}

@Suite("One inotify instance shared by every monitor of a process", .timeLimit(.minutes(10)))
struct ChangeQueueTests {
    private typealias State = ChangeQueueState

    private static func event(_ watch: CInt, _ mask: UInt32) -> State.Event {
        State.Event(watch: watch, mask: mask)
    }

    @Test("an event read by one monitor reaches the other, which is woken once until it takes it")
    func handedOverAndWokenOnce() {
        var state = State()
        let reader = state.addMonitor()
        let other = state.addMonitor()
        let wakes = WakeCount()
        state.inboxes[other]?.wake = wakes.wake
        subscribe(&state, State.Subscriber(monitor: reader, index: 0, includesModifications: false), to: 7)
        subscribe(&state, State.Subscriber(monitor: other, index: 3, includesModifications: false), to: 7)

        let taken = state.takeInbox(reader, after: [Self.event(7, State.creation)])
        #expect(taken.changed == [0] && taken.created == [0])
        for wake in state.takeWakes() { wake() }
        #expect(wakes.value == 1)

        // More for the other monitor before it asked: no second wake-up.
        _ = state.takeInbox(reader, after: [Self.event(7, State.creation), Self.event(7, State.creation)])
        let wakesBeforeAsking = state.takeWakes()
        #expect(wakesBeforeAsking.isEmpty)
        let handed = state.takeInbox(other, after: [])
        #expect(handed.changed == [3] && handed.created == [3] && !handed.overflowed)

        // Once it has taken what it had, the next hand-over wakes it again.
        _ = state.takeInbox(reader, after: [Self.event(7, State.creation)])
        let wakesAfterAsking = state.takeWakes()
        #expect(wakesAfterAsking.count == 1)
    }

    @Test(
        "a watch that names its entries gets each created entry's name, read by either monitor; past the bound, a listing"
    )
    func createdEntriesNamed() {
        var state = State()
        let reader = state.addMonitor()
        let namer = state.addMonitor()
        subscribe(
            &state, State.Subscriber(monitor: namer, index: 2, includesModifications: false, namesEntries: true), to: 5)
        subscribe(&state, State.Subscriber(monitor: reader, index: 0, includesModifications: false), to: 5)
        let made = [
            State.Event(watch: 5, mask: State.creation, name: "com.example.jobs.a"),
            State.Event(watch: 5, mask: State.creation, name: "com.example.jobs.b"),
        ]
        let own = state.takeInbox(reader, after: made)
        #expect(own.createdEntries.isEmpty, "a watch that did not ask gets no names")
        let named = state.takeInbox(namer, after: [])
        #expect(named.createdEntries == [2: ["com.example.jobs.a", "com.example.jobs.b"]])
        #expect(named.entriesOverflowed.isEmpty)
        // Past the bound (or a name not read): the directory must be listed.
        let many = (0...State.entriesRemembered).map { State.Event(watch: 5, mask: State.creation, name: "n\($0)") }
        let flood = state.takeInbox(namer, after: many)
        #expect(flood.entriesOverflowed == [2] && flood.createdEntries.isEmpty)
        let unnamed = state.takeInbox(namer, after: [State.Event(watch: 5, mask: State.creation)])
        #expect(unnamed.entriesOverflowed == [2])
    }

    @Test("a write to a file reaches only monitors that asked for writes")
    func writesOnlyToThoseWhoAsked() {
        var state = State()
        let files = state.addMonitor()
        let registry = state.addMonitor()
        subscribe(&state, State.Subscriber(monitor: files, index: 0, includesModifications: true), to: 2)
        subscribe(&state, State.Subscriber(monitor: registry, index: 0, includesModifications: false), to: 2)
        let toFiles = state.takeInbox(files, after: [Self.event(2, State.modification)])
        #expect(toFiles.changed == [0])
        let toRegistry = state.takeInbox(registry, after: [])
        #expect(toRegistry.changed.isEmpty)
    }

    @Test("a directory gone: every monitor on its watch loses it, and the watch is forgotten")
    func lostForEveryone() {
        var state = State()
        let first = state.addMonitor()
        let second = state.addMonitor()
        subscribe(&state, State.Subscriber(monitor: first, index: 1, includesModifications: false), to: 4)
        subscribe(&state, State.Subscriber(monitor: second, index: 5, includesModifications: true), to: 4)
        let toFirst = state.takeInbox(first, after: [Self.event(4, State.ending)])
        #expect(toFirst.lost == [1])
        let toSecond = state.takeInbox(second, after: [])
        #expect(toSecond.lost == [5])
        #expect(state.watches[4] == nil)
    }

    @Test("a watch whose end was handed out before its adder listened is refused as gone, not joined deaf")
    func endedBeforeAdding() {
        var state = State()
        let reader = state.addMonitor()
        let late = state.addMonitor()
        subscribe(&state, State.Subscriber(monitor: reader, index: 0, includesModifications: false), to: 11)
        // The late monitor's inotify_add_watch returned 11; before it took
        // the lock, its directory went and another reader handed the end out.
        let toReader = state.takeInbox(reader, after: [Self.event(11, State.ending)])
        #expect(toReader.lost == [0])
        let added = state.add(State.Subscriber(monitor: late, index: 0, includesModifications: false), to: 11)
        #expect(added == .gone)
        // Even when nobody listened to it: the end is remembered.
        let unheard = state.takeInbox(reader, after: [Self.event(12, State.ending)])
        #expect(unheard.lost.isEmpty)
        let alsoGone = state.add(State.Subscriber(monitor: late, index: 1, includesModifications: false), to: 12)
        #expect(alsoGone == .gone)
    }

    @Test(
        "a directory renamed: its monitors lose it, and the watch the kernel keeps is removed; an adder handed its number meanwhile tries again"
    )
    func renamedIsRemoved() {
        var state = State()
        let reader = state.addMonitor()
        let late = state.addMonitor()
        subscribe(&state, State.Subscriber(monitor: reader, index: 0, includesModifications: false), to: 9)
        // Renamed (IN_MOVE_SELF): the kernel keeps watch 9 on it, wherever it went.
        let renamed = State.ending & ~State.removal
        let toReader = state.takeInbox(reader, after: [Self.event(9, renamed)])
        #expect(toReader.lost == [0])
        #expect(state.takeRemovals() == [9])
        #expect(state.takeRemovals().isEmpty)
        // Renamed back before the removal: inotify_add_watch hands out 9
        // again. Refused as gone, the path would go unwatched for good.
        let added = state.add(State.Subscriber(monitor: late, index: 0, includesModifications: false), to: 9)
        #expect(added == .retry)
        state.retired(9)
        _ = state.takeInbox(reader, after: [Self.event(9, State.removal)])
        // A rename of a watch nobody listens to is removed too, once.
        _ = state.takeInbox(reader, after: [Self.event(10, renamed), Self.event(10, renamed)])
        #expect(state.takeRemovals() == [10])
    }

    @Test("an overflow tells every monitor to look at everything, and wakes the others")
    func overflowReachesAll() {
        var state = State()
        let reader = state.addMonitor()
        let others = [state.addMonitor(), state.addMonitor()]
        let wakes = WakeCount()
        for other in others { state.inboxes[other]?.wake = wakes.wake }
        let toReader = state.takeInbox(reader, after: [Self.event(-1, State.overflow)])
        #expect(toReader.overflowed)
        for wake in state.takeWakes() { wake() }
        #expect(wakes.value == 2)
        for other in others {
            let toOther = state.takeInbox(other, after: [])
            #expect(toOther.overflowed)
        }
        let readerAgain = state.takeInbox(reader, after: [])
        #expect(!readerAgain.overflowed)
    }

    @Test("a watch is removed only when its last monitor goes, and is not joined while being removed")
    func retiringWatch() {
        var state = State()
        let first = state.addMonitor()
        let second = state.addMonitor()
        subscribe(&state, State.Subscriber(monitor: first, index: 0, includesModifications: false), to: 9)
        subscribe(&state, State.Subscriber(monitor: second, index: 0, includesModifications: false), to: 9)
        let afterFirst = state.removeMonitor(first)
        let afterSecond = state.removeMonitor(second)
        #expect(afterFirst.isEmpty)
        #expect(afterSecond == [9])
        // Between the decision and the kernel's removal, an adder that got
        // the same watch back must try again.
        let third = state.addMonitor()
        let refused = state.add(State.Subscriber(monitor: third, index: 0, includesModifications: false), to: 9)
        #expect(refused == .retry)
        state.retired(9)
        // Removed, its number is one a call made before the removal got:
        // the adder asks the kernel again, whose new watch it joins.
        let stale = state.add(State.Subscriber(monitor: third, index: 0, includesModifications: false), to: 9)
        #expect(stale == .retry)
        subscribe(&state, State.Subscriber(monitor: third, index: 0, includesModifications: false), to: 19)
        // Events for a monitor that went are dropped, not kept.
        _ = state.takeInbox(third, after: [Self.event(19, State.creation)])
        #expect(state.inboxes[first] == nil && state.inboxes[second] == nil)
    }

    @Test(
        "a subscriber that follows a renamed directory and watches its path again is removed from each watch in turn"
    )
    func subscriberInTwoWatches() {
        var state = State()
        let owner = state.addMonitor()
        var following = State.Subscriber(monitor: owner, index: 3, includesModifications: false)
        following.followsItsFile = true
        subscribe(&state, following, to: 9)
        // Renamed: the kernel keeps watch 9 on it, and the subscriber stays.
        _ = state.takeInbox(owner, after: [Self.event(9, State.ending & ~State.removal)])
        #expect(state.watches[9]?.count == 1)
        // Its owner watches the path again, under the same index.
        subscribe(&state, following, to: 12)
        #expect(state.remove(monitor: owner, index: 3) == 9)
        #expect(state.remove(monitor: owner, index: 3) == 12)
        #expect(state.remove(monitor: owner, index: 3) == nil)
        #expect(state.watches.isEmpty)
        // A removal left for a reader: handed out once; until the kernel
        // removed it, an adder handed its number tries again.
        state.removeLater(12)
        #expect(state.takeRemovals() == [12])
        #expect(state.takeRemovals().isEmpty)
        let other = state.addMonitor()
        #expect(state.add(State.Subscriber(monitor: other, index: 0, includesModifications: false), to: 12) == .retry)
        state.retired(12)
        // The removal's end (IN_IGNORED) read after it: to an adder handed
        // 12 before the removal, still "ask again", never "gone".
        _ = state.takeInbox(owner, after: [Self.event(12, State.removal)])
        #expect(state.add(State.Subscriber(monitor: other, index: 0, includesModifications: false), to: 12) == .retry)
        subscribe(&state, State.Subscriber(monitor: other, index: 0, includesModifications: false), to: 13)
        // Only the subscriber that is there now hears of a change.
        let toOther = state.takeInbox(other, after: [Self.event(13, State.creation)])
        #expect(toOther.changed == [0])
        #expect(state.takeInbox(owner, after: []).changed.isEmpty)
    }

    @Test("a subscriber dropped by its watch's end is not found by a later removal; one that followed a rename is")
    func endedWatchForgetsItsSubscribers() {
        var state = State()
        let owner = state.addMonitor()
        subscribe(&state, State.Subscriber(monitor: owner, index: 1, includesModifications: false), to: 4)
        var following = State.Subscriber(monitor: owner, index: 2, includesModifications: false)
        following.followsItsFile = true
        subscribe(&state, following, to: 4)
        // Renamed: the one that follows stays; the other is lost.
        _ = state.takeInbox(owner, after: [Self.event(4, State.ending & ~State.removal)])
        #expect(state.remove(monitor: owner, index: 1) == nil)
        #expect(state.remove(monitor: owner, index: 2) == 4)
    }

    @Test("a monitor that asks while another read of the queue is handing out waits for it, and not for later reads")
    func readsInFlightWaitedFor() {
        var state = State()
        let other = state.addMonitor()
        let asker = state.addMonitor()
        subscribe(&state, State.Subscriber(monitor: asker, index: 2, includesModifications: false), to: 5)
        // The other monitor's read took the asker's event from the kernel first.
        let othersRead = state.beginRead()
        let ownRead = state.beginRead()
        let (early, bound) = state.finishRead(ownRead, by: asker, events: [])
        #expect(early == nil, "taken before the event it was owed was handed out")
        #expect(state.takeInbox(asker, settledThrough: bound) == nil)
        // A read begun after the asker's ended is not waited for.
        let laterRead = state.beginRead()
        _ = state.finishRead(othersRead, by: other, events: [Self.event(5, State.creation)])
        let settled = state.takeInbox(asker, settledThrough: bound)
        #expect(settled?.changed == [2] && settled?.created == [2])
        _ = state.finishRead(laterRead, by: other, events: [])
    }

    #if os(Linux)
        @Test("a change made before a monitor asks is reported, while another thread keeps reading the shared queue")
        func changeSeenDespiteConcurrentReader() throws {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            try FileManager.default.createDirectory(atPath: directory + "/a", withIntermediateDirectories: false)
            try FileManager.default.createDirectory(atPath: directory + "/b", withIntermediateDirectories: false)
            let queue = try ChangeQueue.make()
            let asker = DirectoryMonitor(queue: queue)
            let watched = try asker.watch(directory + "/a")
            // Another monitor's owner reading the queue all the time, as
            // other hubs' loops of the process do.
            let stop = StopFlag()
            let busy = Thread { [queue] in
                let reader = DirectoryMonitor(queue: queue)
                _ = try? reader.watch(directory + "/b")
                while !stop.isSet { _ = reader.changes() }
            }
            busy.start()
            defer { stop.set() }
            var missed = 0
            for round in 0..<3000 {
                let path = directory + "/a/\(round)"
                guard FileManager.default.createFile(atPath: path, contents: nil) else { continue }
                // Created before asking: the kernel queued its event first.
                if asker.changes()?.contains(watched) != true { missed += 1 }
                unlink(path)
                _ = asker.changes()
            }
            #expect(missed == 0, "changes made before asking, not reported")
        }

        @Test("two monitors sharing one inotify instance each see their own directory")
        func sharedInstance() throws {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            try FileManager.default.createDirectory(atPath: directory + "/a", withIntermediateDirectories: false)
            try FileManager.default.createDirectory(atPath: directory + "/b", withIntermediateDirectories: false)
            // A queue of the test's own, so no other test's loop reads its events.
            let queue = try ChangeQueue.make()
            let first = DirectoryMonitor(queue: queue)
            let second = DirectoryMonitor(queue: queue)
            #expect(first.pollDescriptor == second.pollDescriptor)
            let a = try first.watch(directory + "/a")
            let b = try second.watch(directory + "/b")
            let wakes = WakeCount()
            second.whenChangedElsewhere = wakes.wake
            #expect(FileManager.default.createFile(atPath: directory + "/a/x", contents: nil))
            #expect(FileManager.default.createFile(atPath: directory + "/b/y", contents: nil))
            // The first monitor reads both events: its own, and the second's, handed over.
            #expect(first.changes() == [a])
            #expect(first.takeCreations() == [a])
            #expect(wakes.value == 1)
            #expect(second.changes() == [b])
            #expect(second.takeCreations() == [b])
        }

        @Test(
            "a directory renamed away and back, watched by monitors sharing one instance: watched again, its changes are seen"
        )
        func renamedAwayAndBack() throws {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            let path = directory + "/log"
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            // A queue of the test's own, so no other test's loop reads its events.
            let queue = try ChangeQueue.make()
            let monitors = (0..<4).map { _ in DirectoryMonitor(queue: queue) }
            var indices = try monitors.map { try $0.watch(path) }
            for round in 0..<3 {
                #expect(rename(path, directory + "/away") == 0)
                #expect(rename(directory + "/away", path) == 0)
                for (number, monitor) in monitors.enumerated() {
                    _ = monitor.changes()
                    #expect(monitor.takeLostWatches().contains(indices[number]), "round \(round)")
                }
                // Without removing the watch the kernel kept, each monitor
                // was refused its number as gone, and the path went unwatched.
                indices = try monitors.map { try $0.watch(path) }
                #expect(FileManager.default.createFile(atPath: path + "/\(round)", contents: nil))
                for (number, monitor) in monitors.enumerated() {
                    #expect(monitor.changes()?.contains(indices[number]) == true, "round \(round)")
                }
            }
        }

        @Test("a directory removed while the kernel's queue overflowed is still reported lost, and watched again")
        func lostDuringOverflow() throws {
            let directory = try makeTemporaryDirectory()
            defer { removeDirectory(directory) }
            let kept = directory + "/kept"
            let busy = directory + "/busy"
            try FileManager.default.createDirectory(atPath: kept, withIntermediateDirectories: false)
            try FileManager.default.createDirectory(atPath: busy, withIntermediateDirectories: false)
            let monitor = DirectoryMonitor(queue: try ChangeQueue.make())
            let index = try monitor.watch(kept)
            _ = try monitor.watch(busy)
            // More events than the kernel queues (fs.inotify.max_queued_events),
            // unread: the queue overflows, and what comes after is dropped,
            // the removal of `kept` among it.
            let setting = try? String(contentsOfFile: "/proc/sys/fs/inotify/max_queued_events", encoding: .utf8)
            let limit = setting.flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) } ?? 16_384
            for file in 0...limit {
                #expect(FileManager.default.createFile(atPath: busy + "/\(file)", contents: nil))
            }
            try FileManager.default.removeItem(atPath: kept)
            try FileManager.default.createDirectory(atPath: kept, withIntermediateDirectories: false)
            #expect(monitor.changes() == nil, "the queue did not overflow")
            // Without the look after an overflow, `kept` stayed watched on a
            // directory that is gone, and the new one was never watched.
            #expect(monitor.takeLostWatches().contains(index))
            let again = try monitor.watch(kept)
            #expect(FileManager.default.createFile(atPath: kept + "/after", contents: nil))
            #expect(monitor.changes()?.contains(again) == true)
        }

        @Test("an exhausted instance limit is named as such, with its sysctl")
        func limitNamed() {
            let instances = ChangeMonitorError(creating: .tooManyDescriptors)
            #expect(instances.description.contains("fs.inotify.max_user_instances"))
            let watches = ChangeMonitorError(watching: .noSpace)
            #expect(watches.description.contains("fs.inotify.max_user_watches"))
            #expect(ChangeMonitorError(watching: .permissionDenied).description == "\(Errno.permissionDenied)")
        }
    #endif
}
