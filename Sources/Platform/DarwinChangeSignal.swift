#if canImport(Darwin)
    import CTypedNotifications
    import Darwin

    /// The wake-up signal of the file-plus-signal transport on Apple platforms:
    /// notify(3), the same mechanism as Darwin notifications, shared by an app and
    /// its extensions. It carries nothing; the log is the truth. Used through
    /// ``DirectoryMonitor/listen(forSignal:as:)`` and
    /// ``DirectoryMonitor/postSignal(_:)``.
    ///
    /// Not built or tested in this repository's CI, which runs on Linux.
    enum DarwinChangeSignal {
        /// Posts the signal for `name`.
        ///
        /// The corresponding C function is `notify_post`.
        static func post(_ name: String) {
            _ = ctn_signal_post(name)
        }

        /// Makes `descriptor` readable whenever `name` is posted; pass `nil` the
        /// first time and the returned descriptor afterwards. Returns the
        /// descriptor and the token that reading it yields for `name`.
        ///
        /// The corresponding C function is `notify_register_file_descriptor`.
        static func register(_ name: String, descriptor: CInt?) -> (descriptor: CInt, token: Int32)? {
            var value = descriptor ?? -1
            var token: CInt = 0
            guard ctn_signal_register(name, &value, &token) == 0 else { return nil }
            return (value, token)
        }

        /// Reads tokens waiting on `descriptor` (one per post, in network
        /// byte order). One read, since the descriptor blocks: tokens left
        /// over keep it readable, and the caller's poller wakes it again.
        ///
        /// The corresponding C function is `read`.
        static func drain(_ descriptor: CInt) -> [Int32] {
            var buffer = [Int32](repeating: 0, count: 64)
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            guard count > 0 else { return [] }
            return buffer.prefix(count / 4).map { Int32(bigEndian: $0) }
        }
    }
#endif
