import CTypedNotifications

/// Receives datagrams several at a time: one system call fills up to
/// ``slots`` of them, each in a slot of a ``LazyBuffer`` sized for the
/// largest, so a burst costs a call per batch and a single datagram needs
/// no second call to learn that nothing else is waiting.
///
/// A batch receives into storage of its own, or into the storage of the
/// thread its loop shares with other loops (``EventLoop/datagramStorage()``):
/// each loop's receive reads what it received before it returns, and the
/// loops sharing a thread run one at a time, so one storage serves them
/// all, and a thousand hubs keep one resident page, not a thousand.
///
/// Used by one thread at a time, as its owner is; a batch on shared
/// storage checks, at each receive, that it runs on that storage's thread.
package final class DatagramBatch {
    /// Datagrams one call can take.
    package let slots: Int
    /// The largest datagram a slot holds (one byte more tells a longer one apart).
    package let slotLength: Int
    private let storage: DatagramStorage
    // The loop whose thread alone may use shared storage; nil for storage of its own.
    private let confinedTo: EventLoop?
    /// How many the last ``receive(_:)`` took.
    package private(set) var count = 0

    /// A batch of `slots` slots of `slotLength` bytes, none resident yet.
    package init(slots: Int, slotLength: Int) {
        storage = DatagramStorage(slots: slots, slotLength: slotLength)
        self.slots = storage.slots
        self.slotLength = storage.slotLength
        confinedTo = nil
    }

    /// A batch of up to `slots` slots of `slotLength` bytes in the storage
    /// of `loop`'s thread (see ``EventLoop/datagramStorage()``), used on
    /// that thread only.
    package init(slots: Int, slotLength: Int, sharingThreadOf loop: EventLoop) {
        storage = loop.datagramStorage()
        self.slots = min(max(1, slots), storage.slots)
        self.slotLength = min(max(1, slotLength), storage.slotLength)
        confinedTo = loop
    }

    /// Whether fewer datagrams than ``slots`` from one ``receive(_:)`` mean
    /// the socket was drained (Linux); elsewhere each call takes one.
    package static let drainsInOneCall = ctn_receive_datagrams_at_once() == 1

    /// Receives what is waiting, without blocking, up to ``slots`` datagrams:
    /// their count, or `EAGAIN` when none was.
    ///
    /// The corresponding C function is `recvmmsg` (`recvmsg` elsewhere).
    package func receive(_ descriptor: borrowing FileDescriptor) -> Result<Int, Errno> {
        receive(descriptor, waiting: false)
    }

    /// Receives what is waiting, up to ``slots`` datagrams; with `waiting`,
    /// on a socket in blocking mode (Linux only), first waits until one
    /// arrives or the socket's receive timeout passes (`EAGAIN`).
    ///
    /// The corresponding C function is `recvmmsg`, with `MSG_WAITFORONE`
    /// when waiting.
    package func receive(_ descriptor: borrowing FileDescriptor, waiting: Bool) -> Result<Int, Errno> {
        if let confinedTo {
            precondition(confinedTo.isCurrent, "a thread's datagram storage used on another thread")
        }
        count = 0
        let buffer = storage.buffer
        let results = storage.results
        let slotLength = slotLength
        let slots = slots
        let received = SystemCalls.retrying {
            waiting
                ? ctn_receive_datagrams_waiting(
                    descriptor.rawValue, buffer.bytes.baseAddress, slotLength, CUnsignedInt(slots), results)
                : ctn_receive_datagrams(
                    descriptor.rawValue, buffer.bytes.baseAddress, slotLength, CUnsignedInt(slots), results)
        }
        if case .success(let taken) = received { count = Int(taken) }
        return received.map { Int($0) }
    }

    /// The `index`-th datagram of the last receive: its length, whether it
    /// was truncated, and who sent it.
    package func datagram(_ index: Int) -> SystemCalls.Datagram {
        let result = storage.results[index]
        let present = result.credentials.present == 1
        return SystemCalls.Datagram(
            length: min(Int(result.length), slotLength),
            truncated: result.truncated != 0,
            senderProcessID: present ? Int32(result.credentials.pid) : nil,
            senderUserID: present ? UInt32(result.credentials.uid) : nil,
            senderGroupID: present ? UInt32(result.credentials.gid) : nil
        )
    }

    /// The bytes of the `index`-th datagram of the last receive, valid until
    /// the next receive.
    package func bytes(_ index: Int) -> UnsafeRawBufferPointer {
        let start = index * slotLength
        let length = min(Int(storage.results[index].length), slotLength)
        return UnsafeRawBufferPointer(rebasing: storage.buffer.bytes[start..<(start + length)])
    }

    /// After the `index`-th datagram is decoded: gives back its slot's pages
    /// above the first 64 KiB, so one large datagram does not keep an
    /// endpoint large.
    package func shrink(_ index: Int) {
        let start = index * slotLength
        storage.buffer.shrink(region: start..<(start + slotLength), after: Int(storage.results[index].length))
    }
}

/// The bytes and results a ``DatagramBatch`` receives into: a lazy
/// mapping of `slots` slots of `slotLength` bytes.
package final class DatagramStorage: @unchecked Sendable {
    // Sendable: it is written by a receive and read after it by the thread
    // that called the receive, never between. Storage of one batch's own
    // is used by that batch's owner, one thread at a time; a thread's
    // shared storage is used only by batches made with
    // `init(slots:slotLength:sharingThreadOf:)`, whose every receive traps
    // unless it runs on that thread, which runs one loop's handler or job
    // at a time, and each reads its datagrams before it returns (a receive
    // never runs inside another: nothing on the thread runs a loop's handler
    // but the thread's loop itself). It passes between threads only under
    // the lock of the `EventLoop` that keeps it.
    let slots: Int
    let slotLength: Int
    let buffer: LazyBuffer
    let results: UnsafeMutablePointer<ctn_received>

    init(slots: Int, slotLength: Int) {
        self.slots = min(max(1, slots), Int(CTN_RECEIVE_BATCH_MAX))
        self.slotLength = max(1, slotLength)
        buffer = LazyBuffer(count: self.slots * self.slotLength)
        results = .allocate(capacity: self.slots)
        results.initialize(repeating: ctn_received(), count: self.slots)
    }

    deinit {
        results.deinitialize(count: slots)
        results.deallocate()
    }

    /// What a thread's shared storage holds: 8 datagrams of up to 4 MiB and
    /// a byte, the most a socket transport takes (its slots are cut to its
    /// own limit).
    static var sharedSlots: Int { 8 }
    static var sharedSlotLength: Int { 4 * 1024 * 1024 + 1 }
}
