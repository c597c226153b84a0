import Synchronization
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

/// The readers of a transport's names, by name or for a namespace: a
/// bounded number read on connections of their own, the quiet ones wait
/// together.
///
/// A name read for a namespace starts quiet (a durable identity's once it
/// read its pending entries); a name read by name starts reading. Either
/// goes quiet when a read comes back empty (one blocking read's whole
/// ``RedisStreamsConfiguration/blockTimeout`` with nothing posted). A quiet name waits in a watch: one connection and one blocking
/// `XREAD COUNT 1` over up to ``capacity`` quiet names, each after the
/// entry its reader read last (a durable reader's: the stream's newest when
/// its group's read found nothing). The watch reads nothing for them and
/// takes nothing from a group: when it answers with an entry of a name,
/// that name's reader wakes and reads from where it stood, on a connection
/// of its own, counting what was trimmed meanwhile as after any pause. At
/// most ``readingLimit`` names read at once; a name woken beyond that waits
/// its turn, and while any waits, the reading names read without blocking
/// and go quiet as soon as a read finds nothing, handing their connection
/// to the next. So a transport holds at most ``readingLimit`` reading
/// connections, ``spareLimit`` spare ones, and between one per thousand
/// quiet names and 16 plus one per 500 (``watchLimit``), whatever the
/// number of names, by name or in namespaces; a name pays one round trip
/// more on its first post after it went quiet. Not in a cluster, where one
/// `XREAD` cannot span hash slots: there each name keeps a connection.
///
/// Made on any thread, used on the transport's loop only (through a
/// ``LoopBound``).
final class IdleReaders {
    /// Where a reader of a namespace's name stands.
    enum Membership: Equatable {
        /// Reading on a connection of its own.
        case reading
        /// Quiet: in this watch's read, or about to join its next one.
        case waiting(in: ObjectIdentifier)
        /// Woken, waiting for one of the ``readingLimit`` connections.
        case queued
    }

    /// One connection's read over quiet readers.
    final class Watch {
        var connection: RedisConnection?
        /// The readers the read in flight covers, by key.
        var covered: [[UInt8]: StreamReader] = [:]
        /// Readers that join when the read is sent again.
        var joining: [StreamReader] = []
        /// A read was sent and not answered yet.
        var awaiting = false
        /// When it was sent, for the transport's watchdog.
        var requestedAt: UInt64 = 0
        /// The loop watches the connection for the read's answer.
        var isRegistered = false

        var count: Int { covered.count + joining.count }
    }

    /// The most names one watch reads at once: its read names them all,
    /// about 50 KB, sent again each time one of them is posted to.
    static let capacity = 1_000
    /// The most names that read on connections of their own at once.
    static let readingLimit = 256
    /// Reading connections kept for the next name to wake.
    static let spareLimit = 8

    /// How many may read at once now: ``readingLimit``, less once the server
    /// refused a connection (its `maxclients`), one more per connection made.
    var readingCap = readingLimit
    /// Paces the tries to connect again after the server refused one.
    var backoff = ConnectBackoff()
    var retryScheduled = false

    var watches: [Watch] = [] {
        didSet { watchCount.value.store(watches.count, ordering: .relaxed) }
    }
    /// How many watches are open, for any thread (tests).
    let watchCount = Gauge()

    /// A count any thread may read.
    final class Gauge: Sendable {
        let value = Atomic<Int>(0)
    }
    /// The readers holding one of the reading connections.
    var reading: [ObjectIdentifier: StreamReader] = [:] {
        didSet {
            if reading.count > mostReading.value.load(ordering: .relaxed) {
                mostReading.value.store(reading.count, ordering: .relaxed)
            }
        }
    }
    /// The most readers that held reading connections at once, for any
    /// thread (tests). Written on the loop only.
    let mostReading = Gauge()
    /// Woken readers waiting for a reading connection, first woken first.
    var queue: [StreamReader] = []
    var queueStart = 0
    var spare: [RedisConnection] = []

    var isQueueEmpty: Bool { queueStart == queue.count }

    /// The next queued reader not cancelled meanwhile.
    func dequeue() -> StreamReader? {
        while queueStart < queue.count {
            let reader = queue[queueStart]
            queueStart += 1
            if queueStart == queue.count {
                queue.removeAll(keepingCapacity: true)
                queueStart = 0
            } else if queueStart >= 1_024, queueStart * 2 >= queue.count {
                // Under a long flood the queue never empties: what was taken
                // goes, so it holds what waits, not every wake since.
                queue.removeFirst(queueStart)
                queueStart = 0
            }
            if !reader.isCancelled { return reader }
        }
        return nil
    }

    /// How many watches may be open: one per ``capacity`` quiet names, and
    /// room for readers going quiet while every watch has a read in flight.
    var watchLimit: Int {
        16 + watches.reduce(0) { $0 + $1.count } / (Self.capacity / 2)
    }
}
