import CTypedNotifications
import Foundation
import TypedNotifications
import TypedNotificationsCatalog
@_spi(TransportAuthoring) import TypedNotificationsPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

// An observer process of a cross-process scenario:
//
//   TypedNotificationsBenchmark observe KIND DIR TOTAL STAMPS PAYLOAD INDEX [anatomy]
//
// prints "ready" once it is registered, files the receive time of every
// notification, and at the end marker writes the stamps (TOTAL native
// UInt64s) to STAMPS and prints "done received=N rss=KiB cpu=NS", the CPU
// time it spent from ready to the end marker. With `anatomy`, the library
// stamps each step of the path and the stamps go to STAMPS.anatomy.

func runObserver(_ arguments: ArraySlice<String>) throws {
    let values = Array(arguments)
    let stamping = values.count == 7 && values[6] == "anatomy"
    guard values.count == 6 || stamping, let kind = Kind(rawValue: values[0]), kind.isCrossProcess,
        let total = Int(values[2]), let payloadBytes = Int(values[4]), let index = Int(values[5])
    else { fail("usage: observe KIND DIR TOTAL STAMPS PAYLOAD INDEX [anatomy]") }
    let directory = values[1]
    if stamping { Anatomy.start(capacity: anatomyCapacity(total: total)) }
    let recorder = Recorder(total: total, primed: Countdown())
    if let entry = kind.entry {
        // DIR is the server's URL for a transport that meets at one.
        try observeWithHub(entry.make(entry.place(directory), TransportRequest()), recorder)
    } else if kind == .rawDatagram {
        observeRawDatagrams(path: rawSocketPath(directory, index), payloadBytes: payloadBytes, recorder)
    } else if kind == .rawDatagramEpoll {
        observeRawDatagramsAfterWaiting(path: rawSocketPath(directory, index), payloadBytes: payloadBytes, recorder)
    } else if kind == .rawAppend {
        observeRawAppends(path: directory + "/raw.log", payloadBytes: payloadBytes, recorder)
    } else if kind.meetsAtServer {
        try observeRedis(kind, url: directory, recorder: recorder)
    } else {
        fail("\(kind.rawValue) has no observer process")
    }
    let data = Data(buffer: recorder.stamps)
    guard FileManager.default.createFile(atPath: values[3], contents: data) else { fail("cannot write \(values[3])") }
    if stamping { writeAnatomy(Anatomy.stop(), to: values[3] + ".anatomy") }
    let cpu = processCPUNanoseconds() &- (recorder.readyCPUNanoseconds ?? 0)
    say("done received=\(recorder.received) rss=\(peakResidentKiB()) cpu=\(cpu)")
}

/// Says "ready" and notes the CPU time spent so far, which the figure at
/// the end leaves out: setting up is not receiving.
func sayReady(_ recorder: Recorder) {
    recorder.readyCPUNanoseconds = processCPUNanoseconds()
    say("ready")
}

/// One of our transports: a handler files each notification until the end marker.
func observeWithHub<T: NotificationTransport>(_ transport: T, _ recorder: Recorder) throws {
    let hub = try NotificationHub(endpoint: "observer", transport: transport)
    let token = try hub.addObserver(.of(BenchTick.self), bufferingPolicy: .unbounded) { tick, _ in
        recorder.record(tick.index)
    }
    sayReady(recorder)
    recorder.finished.wait()
    token.cancel()
    hub.closeAndWait()
}

/// The raw datagram floor: a blocking socket, one recv per notification.
func observeRawDatagrams(path: String, payloadBytes: Int, _ recorder: Recorder) {
    let descriptor = rawSocket(AF_UNIX, stream: false)
    guard descriptor >= 0, (try? SystemCalls.bindSocket(raw: descriptor, toSocketPath: path).get()) != nil else {
        fail("raw datagram bind: errno \(errno)")
    }
    defer { closeDescriptor(descriptor) }
    sayReady(recorder)
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(8, payloadBytes) + 64, alignment: 8)
    defer { buffer.deallocate() }
    while true {
        let length = recv(descriptor, buffer.baseAddress, buffer.count, 0)
        if length < 0 {
            if errno == EINTR { continue }
            fail("raw datagram recv: errno \(errno)")
        }
        guard length >= 8 else { continue }
        let index = UInt64(littleEndian: buffer.loadUnaligned(as: UInt64.self))
        recorder.record(index)
        if index == BenchTick.endIndex { return }
    }
}

/// The floor of a thread that waits in the system's event queue: a
/// blocking `epoll_wait` (`kevent` on Apple platforms) on the socket alone,
/// then one `recv`, which finds the datagram waiting. What an event loop
/// pays for being woken by its poller rather than in the receive itself,
/// with nothing of the loop's own.
func observeRawDatagramsAfterWaiting(path: String, payloadBytes: Int, _ recorder: Recorder) {
    let descriptor = rawSocket(AF_UNIX, stream: false)
    guard descriptor >= 0, (try? SystemCalls.bindSocket(raw: descriptor, toSocketPath: path).get()) != nil else {
        fail("raw datagram bind: errno \(errno)")
    }
    defer { closeDescriptor(descriptor) }
    #if os(Linux)
        let queue = epoll_create1(Int32(EPOLL_CLOEXEC))
        var interest = epoll_event()
        interest.events = EPOLLIN.rawValue
        interest.data.fd = descriptor
        guard queue >= 0, epoll_ctl(queue, EPOLL_CTL_ADD, descriptor, &interest) == 0 else {
            fail("raw datagram epoll: errno \(errno)")
        }
        var ready = epoll_event()
        func waitForDatagram() -> Bool { epoll_wait(queue, &ready, 1, -1) >= 0 || errno == EINTR }
    #else
        let queue = kqueue()
        var interest = kevent(
            ident: UInt(descriptor), filter: Int16(EVFILT_READ), flags: UInt16(EV_ADD), fflags: 0, data: 0, udata: nil)
        guard queue >= 0, kevent(queue, &interest, 1, nil, 0, nil) == 0 else {
            fail("raw datagram kqueue: errno \(errno)")
        }
        var ready = kevent()
        func waitForDatagram() -> Bool { kevent(queue, nil, 0, &ready, 1, nil) >= 0 || errno == EINTR }
    #endif
    defer { closeDescriptor(queue) }
    sayReady(recorder)
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(8, payloadBytes) + 64, alignment: 8)
    defer { buffer.deallocate() }
    while true {
        guard waitForDatagram() else { fail("raw datagram wait: errno \(errno)") }
        let length = recv(descriptor, buffer.baseAddress, buffer.count, Int32(MSG_DONTWAIT))
        if length < 0 {
            if errno == EINTR || errno == EAGAIN { continue }
            fail("raw datagram recv: errno \(errno)")
        }
        guard length >= 8 else { continue }
        let index = UInt64(littleEndian: buffer.loadUnaligned(as: UInt64.self))
        recorder.record(index)
        if index == BenchTick.endIndex { return }
    }
}

/// The raw append floor: read the file to its end, then sleep in inotify
/// until the next append.
func observeRawAppends(path: String, payloadBytes: Int, _ recorder: Recorder) {
    #if os(Linux)
        observeRawAppendsWithInotify(path: path, payloadBytes: payloadBytes, recorder)
    #else
        fail(
            "the raw append + inotify floor has no Darwin form: Darwin has no inotify, and notify(3), "
                + "which the file transport uses there, is not a floor of the same kind")
    #endif
}

#if os(Linux)
    func observeRawAppendsWithInotify(path: String, payloadBytes: Int, _ recorder: Recorder) {
        let file = open(path, O_RDONLY | O_CLOEXEC)
        let notify = inotify_init1(Int32(IN_CLOEXEC))
        guard file >= 0, notify >= 0, inotify_add_watch(notify, path, UInt32(IN_MODIFY)) >= 0 else {
            fail("raw append watch: errno \(errno)")
        }
        defer {
            closeDescriptor(file)
            closeDescriptor(notify)
        }
        sayReady(recorder)
        let recordSize = max(8, payloadBytes)
        let capacity = max(64 * 1024, recordSize * 16)
        let start = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
        let buffer = UnsafeMutableRawBufferPointer(start: start, count: capacity)
        let events = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 8)
        defer {
            start.deallocate()
            events.deallocate()
        }
        var filled = 0
        while true {
            let length = read(file, start + filled, capacity - filled)
            if length > 0 {
                filled += length
                var offset = 0
                while filled - offset >= recordSize {
                    let index = UInt64(littleEndian: buffer.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
                    recorder.record(index)
                    if index == BenchTick.endIndex { return }
                    offset += recordSize
                }
                if offset > 0 {
                    start.copyMemory(from: start + offset, byteCount: filled - offset)
                    filled -= offset
                }
            } else if length == 0 {
                // At the end: wait for the next modification.
                if read(notify, events.baseAddress, events.count) < 0, errno != EINTR {
                    fail("raw append inotify: errno \(errno)")
                }
            } else if errno != EINTR {
                fail("raw append read: errno \(errno)")
            }
        }
    }
#endif
