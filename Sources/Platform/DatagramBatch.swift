import CTypedNotifications

/// Receives datagrams several at a time: one system call fills up to
/// ``slots`` of them, each in a slot of a ``LazyBuffer`` sized for the
/// largest, so a burst costs a call per batch and a single datagram needs
/// no second call to learn that nothing else is waiting.
///
/// Used by one thread at a time, as its owner is.
package final class DatagramBatch {
    /// Datagrams one call can take.
    package let slots: Int
    /// The largest datagram a slot holds (one byte more tells a longer one apart).
    package let slotLength: Int
    private let buffer: LazyBuffer
    private let results: UnsafeMutablePointer<ctn_received>
    /// How many the last ``receive(_:)`` took.
    package private(set) var count = 0

    /// A batch of `slots` slots of `slotLength` bytes, none resident yet.
    package init(slots: Int, slotLength: Int) {
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
        count = 0
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
        let result = results[index]
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
        let length = min(Int(results[index].length), slotLength)
        return UnsafeRawBufferPointer(rebasing: buffer.bytes[start..<(start + length)])
    }

    /// After the `index`-th datagram is decoded: gives back its slot's pages
    /// above the first 64 KiB, so one large datagram does not keep an
    /// endpoint large.
    package func shrink(_ index: Int) {
        let start = index * slotLength
        buffer.shrink(region: start..<(start + slotLength), after: Int(results[index].length))
    }
}
