import Dispatch
@_spi(TransportAuthoring) import TypedNotificationsCore
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// A spool file the endpoint has open and locked; closing the descriptor
/// (when this is released) unlocks it.
final class SpoolFileLock {
    /// Its name in the endpoint's spool folder.
    let name: String
    let descriptor: FileDescriptor
    /// The file's owner: the only user its records may claim.
    let owner: UInt32

    init(name: String, descriptor: consuming FileDescriptor, owner: UInt32) {
        self.name = name
        self.descriptor = descriptor
        self.owner = owner
    }

    /// The file's records, read a chunk at a time (the largest record the
    /// decoder takes, at least 64 KiB and at most 1 MiB), up to the first
    /// that is not valid (then `malformed`): what follows it is never read.
    /// A record over the decoder's limit costs one chunk, never its size.
    func readRecords(decoder: inout EnvelopeDecoder) -> (records: [Spool.Record], malformed: Bool) {
        guard case .success(let info) = SystemCalls.fileStatus(descriptor), info.size > 0 else { return ([], false) }
        let chunk = min(1024 * 1024, max(64 * 1024, decoder.largestEnvelope + 1))
        var records: [Spool.Record] = []
        // Bytes read and not parsed yet (a record that goes on into the next
        // chunk), and the file offset after them.
        var pending: [UInt8] = []
        var offset = 0
        var startingFile = true
        while true {
            let count = max(0, min(chunk, info.size - offset))
            var got = 0
            if count > 0 {
                let fresh = [UInt8](unsafeUninitializedCapacity: count) { bytes, initialized in
                    if case .success(let read) = SystemCalls.readBytes(
                        descriptor, into: UnsafeMutableRawBufferPointer(bytes), at: offset)
                    {
                        got = read
                    }
                    initialized = got
                }
                pending += fresh
                offset += got
            }
            let isWhole = got == 0 || offset >= info.size
            let parsed = Spool.parse(pending, startingFile: startingFile, decoder: &decoder, isWhole: isWhole)
            records += parsed.records
            if parsed.malformed { return (records, true) }
            if isWhole { return (records, false) }
            if let skipped = Spool.oversized(pending, at: parsed.next, decoder: &decoder) {
                // Over the receiver's limit and not all read yet: its
                // header says whose it is; the rest is never read.
                records.append(.oversized(skipped.report))
                offset += parsed.next + skipped.length - pending.count
                pending = []
                startingFile = false
                continue
            }
            if parsed.next > 0 {
                pending.removeSubrange(..<parsed.next)
                startingFile = false
            }
        }
    }
}

/// What the receiving side keeps between events.
/// Used only on the transport's event loop, through a ``LoopBound``.
final class SocketReceiving {
    let receiver: TransportReceiver
    /// What was received and not handed over yet (see ``SocketHandOver``).
    let handOver: SocketHandOver
    /// The socket is off the event queue while too much waits for room
    /// (where the thread sleeps in the event queue).
    var receivePaused = false
    /// A look at what waits for room is scheduled.
    var handOverRecheckScheduled = false
    /// How long until that look: 1 ms; with more names waiting than a look
    /// takes, doubled (up to 64 ms) after each look that handed nothing
    /// over, so thousands of names whose observers stopped reading cost
    /// little while they wait.
    var handOverRecheckNanoseconds: UInt64 = 1_000_000
    /// The spool was to be looked at while too much waited for room.
    var spoolWanted = false
    /// The spool's inotify watch, where the thread sleeps in the event
    /// queue; nil where it sleeps in its receive, and learns of the spool
    /// from posters.
    let spoolMonitor: DirectoryMonitor?
    /// The socket's receive timeout now, in milliseconds (`nil`: none),
    /// where the thread sleeps in its receive.
    var receiveTimeout: Int? = 1_000
    var decoder: EnvelopeDecoder
    // Slots sized for the largest datagram, resident only as far as datagrams reach.
    let batch: DatagramBatch
    // When this endpoint first saw each spool file, and when it last took
    // one (see takeSpool).
    var firstSeen: [String: UInt64] = [:]
    var lastTake: UInt64 = 0
    // A look at a busy or unsettled spool file is scheduled.
    var recheckScheduled = false
    var removalWatch: RemovalWatch
    /// The registration file every entry of this endpoint links to.
    var registration: FileDescriptor
    /// Looks in a row whose repair failed (an `rm -rf` still running, say).
    var failedRepairs = 0
    /// When the first of those looks failed (monotonic nanoseconds).
    var firstFailedRepair: UInt64 = 0
    /// A look after a failed repair is scheduled.
    var repairRetryScheduled = false
    /// The registration file's links beyond its linked entries at the last
    /// look: its own name, and any someone else made (a `cp -al` backup).
    var linksBeyondEntries = 1

    init(
        receiver: TransportReceiver, spoolMonitor: DirectoryMonitor?, maximumEnvelopeSize: Int,
        heldBytesPerName: Int, watchedFiles: [RecordedPath], registration: consuming FileDescriptor,
        loop: EventLoop
    ) {
        self.registration = registration
        self.receiver = receiver
        self.handOver = SocketHandOver(receiver: receiver, heldBytesPerName: heldBytesPerName)
        self.spoolMonitor = spoolMonitor
        self.decoder = EnvelopeDecoder(maximumPayloadSize: receiver.maximumPayloadSize)
        // A slot holds the largest envelope the center takes, and a byte
        // more: a longer datagram is cut there by the kernel, never copied
        // whole, and refused from its header (see `accept`).
        let slotLength = min(maximumEnvelopeSize, decoder.largestEnvelope) + 1
        // A transport with a thread of its own receives into storage of its
        // own; those sharing a thread share its storage too.
        self.batch =
            loop.sharesThread
            ? DatagramBatch(slots: SocketTransport.receiveBatch, slotLength: slotLength, sharingThreadOf: loop)
            : DatagramBatch(slots: SocketTransport.receiveBatch, slotLength: slotLength)
        self.removalWatch = RemovalWatch(watchedFiles)
    }
}
