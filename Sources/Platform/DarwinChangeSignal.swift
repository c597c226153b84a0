#if canImport(Darwin)
    import CTypedNotifications
    import Darwin

    /// The wake-up signal of the file-plus-signal transport on Apple platforms:
    /// notify(3), the same mechanism as Darwin notifications, shared by an app and
    /// its extensions. It carries nothing; the log is the truth.
    ///
    /// Not built or tested in this repository's CI, which runs on Linux.
    package enum DarwinChangeSignal {
        /// Posts the signal for `name`.
        ///
        /// The corresponding C function is `notify_post`.
        package static func post(_ name: String) {
            _ = ctn_signal_post(name)
        }

        /// Makes `descriptor` readable whenever `name` is posted; pass `nil` the
        /// first time and the returned descriptor afterwards.
        ///
        /// The corresponding C function is `notify_register_file_descriptor`.
        package static func register(_ name: String, descriptor: CInt?) -> CInt? {
            var value = descriptor ?? -1
            return ctn_signal_register(name, &value) == 0 ? value : nil
        }

        /// Reads the tokens waiting on `descriptor`, so it stops being readable.
        ///
        /// The corresponding C function is `read`.
        package static func drain(_ descriptor: CInt) {
            var tokens = [UInt8](repeating: 0, count: 64)
            _ = tokens.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        }
    }
#endif
