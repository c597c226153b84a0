#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// A byte buffer per thread, lent to one user at a time, so that a payload
/// can be encoded into a `[UInt8]` without allocating one for each post.
///
/// Allocating an array costs about three times what `malloc` does here: each
/// allocation looks up its storage class's generic metadata in the runtime's
/// cache. The envelope's own buffer is not an array, but a payload's
/// `encodePayload(into:)` writes into one, so that one is kept per thread.
///
/// ``take()`` empties the thread's slot and ``giveBack(_:)`` refills it, so a
/// payload encoder that posts in turn (and so encodes again on the same
/// thread) finds the slot empty and gets a fresh array: the two never share.
package enum ThreadScratch {
    /// A scratch larger than this is not kept: a thread that once encoded a
    /// large payload does not hold its memory for life.
    package static let keptCapacity = 16 * 1024

    /// Where each thread's array lives: a pointer to one `[UInt8]`, made on
    /// the thread's first use and released when the thread exits.
    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        let made = pthread_key_create(&key) { slot in
            #if canImport(Darwin)
                let slot: UnsafeMutableRawPointer? = slot
            #endif
            guard let slot else { return }
            let bytes = slot.assumingMemoryBound(to: [UInt8].self)
            bytes.deinitialize(count: 1)
            bytes.deallocate()
        }
        return made == 0 ? key : nil
    }()

    /// The calling thread's array, emptied, with the capacity it kept; an
    /// empty array when the slot is lent out or no key could be made.
    package static func take() -> [UInt8] {
        guard let key, let slot = pthread_getspecific(key) else { return [] }
        let bytes = slot.assumingMemoryBound(to: [UInt8].self)
        let taken = bytes.move()
        bytes.initialize(to: [])
        return taken
    }

    /// Keeps `bytes`' storage for the calling thread's next ``take()``, unless
    /// it is over ``keptCapacity``.
    package static func giveBack(_ bytes: consuming [UInt8]) {
        guard let key, bytes.capacity <= keptCapacity else { return }
        bytes.removeAll(keepingCapacity: true)
        if let slot = pthread_getspecific(key) {
            slot.assumingMemoryBound(to: [UInt8].self).pointee = bytes
            return
        }
        let slot = UnsafeMutablePointer<[UInt8]>.allocate(capacity: 1)
        slot.initialize(to: bytes)
        if pthread_setspecific(key, slot) != 0 {
            slot.deinitialize(count: 1)
            slot.deallocate()
        }
    }
}
