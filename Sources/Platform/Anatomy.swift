import Synchronization

/// The anatomy of a notification: the time at each step from `post` to the
/// handler, stamped on the library's real path for the benchmark to read.
///
/// Off unless a process starts it (only the benchmark does): then every
/// stamp point costs one relaxed load of a word and a branch not taken. On,
/// a stamp reads `CLOCK_MONOTONIC` (system-wide, so stamps of a poster and
/// its observers compare) and files `(step, key, time)` in a buffer of fixed
/// size, dropping stamps once it is full. The key is the notification's
/// monotonic timestamp, which the envelope carries, so the poster's stamps
/// and each observer's join up across processes.
///
/// The steps taken before a notification's key is known (the post call, the
/// receive call) are held per thread until the same thread learns the key
/// (the post's message is made, the received bytes decoded). A post sent by
/// another thread's batch, or a thread whose slot another took meanwhile,
/// files its later steps without that first one.
@_spi(TransportAuthoring) public enum Anatomy {
    /// A step of a notification's path, in the order it takes them between
    /// processes.
    @usableFromInline package enum Step: UInt64, CaseIterable, Sendable {
        /// `post` was called.
        case postCalled
        /// The message is made: the envelope encoded and stamped (for a
        /// transport that takes values, the value and its stamp).
        case encoded
        /// The transport's send returned.
        case sent
        /// The receive call that brought the bytes returned.
        case received
        /// The envelope was decoded and its checksum verified.
        case decoded
        /// The notification was queued for its observer.
        case queued
        /// Its handler began.
        case handlerBegan
    }

    /// One stamp.
    package struct Stamp: Sendable, Equatable {
        package var step: Step
        package var key: UInt64
        package var nanoseconds: UInt64

        package init(step: Step, key: UInt64, nanoseconds: UInt64) {
            self.step = step
            self.key = key
            self.nanoseconds = nanoseconds
        }
    }

    // The buffer's address while stamping is on, 0 when off. A buffer, once
    // made, lives as long as the process: a stamp point that read the
    // address just before `stop()` may still write to it.
    @usableFromInline static let buffer = Atomic<UInt>(0)

    /// Whether stamping is on: the one branch each stamp point pays when off.
    @inlinable package static var isOn: Bool {
        _slowPath(buffer.load(ordering: .relaxed) != 0)
    }

    /// Starts stamping into a buffer of `capacity` stamps.
    package static func start(capacity: Int) {
        let storage = StampStorage(capacity: capacity)
        let address = UInt(bitPattern: Unmanaged.passRetained(storage).toOpaque())
        buffer.store(address, ordering: .releasing)
    }

    /// Stops stamping and returns the stamps filed, in the order filed.
    package static func stop() -> [Stamp] {
        let address = buffer.exchange(0, ordering: .acquiringAndReleasing)
        guard let pointer = UnsafeRawPointer(bitPattern: address) else { return [] }
        return Unmanaged<StampStorage>.fromOpaque(pointer).takeUnretainedValue().stamps()
    }

    /// Files `step` of the notification `key` at `nanoseconds` (now, by default).
    @usableFromInline package static func stamp(
        _ step: Step, key: UInt64, at nanoseconds: UInt64 = SystemClock.monotonicNanoseconds()
    ) {
        withStorage { $0.file(step, key: key, nanoseconds: nanoseconds) }
    }

    /// Runs `body` with the buffer, when stamping is on.
    private static func withStorage(_ body: (StampStorage) -> Void) {
        let address = buffer.load(ordering: .acquiring)
        guard let pointer = UnsafeRawPointer(bitPattern: address) else { return }
        Unmanaged<StampStorage>.fromOpaque(pointer)._withUnsafeGuaranteedRef { body($0) }
    }

    /// `post` was called: held until ``made(key:)`` knows the key.
    @inlinable package static func postCalled() {
        if isOn { notePost() }
    }

    @usableFromInline static func notePost() {
        withStorage { $0.hold(SystemClock.monotonicNanoseconds(), receiving: false) }
    }

    /// The message `key` was made: files the post call held, and this step.
    @inlinable package static func made(key: UInt64) {
        if isOn { fileMade(key: key) }
    }

    @usableFromInline static func fileMade(key: UInt64) {
        let now = SystemClock.monotonicNanoseconds()
        withStorage { storage in
            if let called = storage.takeHeld(receiving: false) {
                storage.file(.postCalled, key: key, nanoseconds: called)
            }
            storage.file(.encoded, key: key, nanoseconds: now)
        }
    }

    /// A transport's receive call returned with bytes to decode: held until
    /// the decoder knows which notification they are.
    ///
    /// A transport calls it right after the call that brought the bytes
    /// (`recvmsg`, `read`); it costs a load and a branch unless the
    /// benchmark is stamping.
    @inlinable public static func received() {
        if _slowPath(buffer.load(ordering: .relaxed) != 0) { noteReceive() }
    }

    @usableFromInline static func noteReceive() {
        withStorage { $0.hold(SystemClock.monotonicNanoseconds(), receiving: true) }
    }

    /// The envelope of `key` was decoded: files the receive call held (the
    /// same for every envelope that call brought), and this step.
    @inlinable package static func decoded(key: UInt64) {
        if isOn { fileDecoded(key: key) }
    }

    @usableFromInline static func fileDecoded(key: UInt64) {
        let now = SystemClock.monotonicNanoseconds()
        withStorage { storage in
            if let received = storage.held(receiving: true) {
                storage.file(.received, key: key, nanoseconds: received)
            }
            storage.file(.decoded, key: key, nanoseconds: now)
        }
    }

    /// Files `step` of `key` now, when stamping is on.
    @inlinable package static func mark(_ step: Step, key: UInt64) {
        if isOn { stamp(step, key: key) }
    }
}

/// Where stamps go: a fixed array of `(step, key, time)` words and the next
/// free index, taken atomically so threads file stamps at once; and the
/// steps held per thread until their key is known.
///
/// `@unchecked Sendable`: `next` is atomic and each index it hands out is
/// written by the one thread that took it, once; `stamps()` reads an index
/// only below `next`, after `stop()` has taken the buffer away (a stamp
/// point that loaded the address first may still be writing its last word:
/// the benchmark stops only once its traffic is over). The held steps are
/// atomics.
final class StampStorage: @unchecked Sendable {
    private let words: UnsafeMutablePointer<UInt64>
    private let capacity: Int
    private let next = Atomic<Int>(0)
    // Per thread (hashed), for a post call and for a receive call: the
    // thread's identity and the time held. A thread that finds another's
    // identity in its slot holds nothing.
    private let heldSlots = (0..<(2 * StampStorage.threadSlots)).map { _ in HeldStep() }
    private static let threadSlots = 256

    final class HeldStep: Sendable {
        let thread = Atomic<UInt>(0)
        let nanoseconds = Atomic<UInt64>(0)
    }

    private func slot(receiving: Bool) -> (HeldStep, UInt) {
        let thread = ThreadIdentity.current.rawValue
        // Fibonacci hashing: thread identities are aligned addresses or small numbers.
        let index = Int(truncatingIfNeeded: (UInt64(thread) &* 0x9E37_79B9_7F4A_7C15) >> 56)
        return (heldSlots[(receiving ? StampStorage.threadSlots : 0) + index], thread)
    }

    func hold(_ nanoseconds: UInt64, receiving: Bool) {
        let (slot, thread) = slot(receiving: receiving)
        slot.thread.store(thread, ordering: .relaxed)
        slot.nanoseconds.store(nanoseconds, ordering: .relaxed)
    }

    /// The time this thread held, if its slot is still its own.
    func held(receiving: Bool) -> UInt64? {
        let (slot, thread) = slot(receiving: receiving)
        guard slot.thread.load(ordering: .relaxed) == thread else { return nil }
        let time = slot.nanoseconds.load(ordering: .relaxed)
        return time == 0 ? nil : time
    }

    /// Like ``held(receiving:)``, and lets it go: a post call is filed once.
    func takeHeld(receiving: Bool) -> UInt64? {
        let (slot, thread) = slot(receiving: receiving)
        guard slot.thread.load(ordering: .relaxed) == thread else { return nil }
        let time = slot.nanoseconds.exchange(0, ordering: .relaxed)
        return time == 0 ? nil : time
    }

    init(capacity: Int) {
        self.capacity = max(0, capacity)
        words = .allocate(capacity: 3 * self.capacity)
    }

    deinit { words.deallocate() }

    func file(_ step: Anatomy.Step, key: UInt64, nanoseconds: UInt64) {
        let index = next.wrappingAdd(1, ordering: .relaxed).oldValue
        guard index < capacity else { return }
        words[3 * index] = step.rawValue
        words[3 * index + 1] = key
        words[3 * index + 2] = nanoseconds
    }

    func stamps() -> [Anatomy.Stamp] {
        let count = min(capacity, next.load(ordering: .acquiring))
        return (0..<count).compactMap { index in
            Anatomy.Step(rawValue: words[3 * index]).map {
                Anatomy.Stamp(step: $0, key: words[3 * index + 1], nanoseconds: words[3 * index + 2])
            }
        }
    }
}
