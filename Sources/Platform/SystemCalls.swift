import CTypedNotifications
import Synchronization

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#else
    #error("TypedNotifications does not support this platform yet.")
#endif

/// Thin wrappers over the system calls this package makes: each reads `errno`
/// at once, retries `EINTR`, and returns a `Result`.
@_spi(TransportAuthoring) public enum SystemCalls {
    /// System calls made through this layer so far, by every thread of the
    /// process: the benchmark reports them per post. One relaxed atomic add
    /// per call, against the hundreds of nanoseconds a call costs.
    package static let made = Atomic<Int>(0)

    /// Counts one system call in ``made``.
    @inline(__always)
    package static func count(_ calls: Int = 1) {
        made.add(calls, ordering: .relaxed)
    }

    /// Retries `call` while it fails with `EINTR`; counts every attempt.
    @inline(__always)
    static func retrying<T: BinaryInteger>(_ call: () -> T) -> Result<T, Errno> {
        while true {
            count()
            let result = call()
            if result != -1 { return .success(result) }
            let error = Errno.current
            if error != .interrupted { return .failure(error) }
        }
    }

    /// Opens `path`, close-on-exec; `permissions` are a created file's.
    ///
    /// The corresponding C function is `open`.
    package static func openFile(
        _ path: String, _ access: FileAccess, options: FileOpenOptions = [], permissions: FilePermissions = 0o600
    ) -> Result<FileDescriptor, Errno> {
        let flags = access.flags | options.flags
        return retrying { open(path, flags, permissions.mode) }.map(FileDescriptor.init(adopting:))
    }

    /// The corresponding C function is `unlink`.
    package static func removeFile(_ path: String) -> Result<Void, Errno> {
        retrying { unlink(path) }.map { _ in }
    }

    /// Makes `newPath` another name of the file at `existing`, failing with
    /// `EEXIST` when `newPath` exists, whatever it is.
    ///
    /// The corresponding C function is `link`.
    package static func hardLink(_ existing: String, to newPath: String) -> Result<Void, Errno> {
        retrying { link(existing, newPath) }.map { _ in }
    }

    /// The corresponding C function is `rmdir`.
    package static func removeDirectory(_ path: String) -> Result<Void, Errno> {
        retrying { rmdir(path) }.map { _ in }
    }

    /// The corresponding C function is `mkdir`.
    package static func makeDirectory(_ path: String, permissions: FilePermissions) -> Result<Void, Errno> {
        retrying { mkdir(path, permissions.mode) }.map { _ in }
    }

    /// The corresponding C function is `chmod`.
    package static func changeMode(_ path: String, permissions: FilePermissions) -> Result<Void, Errno> {
        retrying { chmod(path, permissions.mode) }.map { _ in }
    }

    /// The corresponding C function is `fchmod`.
    package static func changeMode(_ descriptor: borrowing FileDescriptor, permissions: FilePermissions) -> Result<
        Void, Errno
    > {
        let raw = descriptor.rawValue
        return retrying { fchmod(raw, permissions.mode) }.map { _ in }
    }

    /// The process's working directory, or `nil` when it cannot be read.
    ///
    /// The corresponding C function is `getcwd`.
    package static func currentDirectory() -> String? {
        guard let working = getcwd(nil, 0) else { return nil }
        defer { free(working) }
        return String(cString: working)
    }

    /// What the symbolic link at `path` contains; `nil` when it is not one
    /// or cannot be read.
    ///
    /// The corresponding C function is `readlink`.
    package static func linkTarget(_ path: String) -> String? {
        let capacity = Int(PATH_MAX) + 1
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: capacity) { buffer -> String? in
            guard let start = buffer.baseAddress else { return nil }
            count()
            let length = readlink(path, start, capacity)
            guard length > 0, length < capacity else { return nil }
            return String(decoding: UnsafeRawBufferPointer(start: start, count: length), as: UTF8.self)
        }
    }

    /// The corresponding C function is `lstat`.
    package static func linkStatus(_ path: String) -> Result<FileStatus, Errno> {
        var info = stat()
        return retrying { lstat(path, &info) }.map { _ in FileStatus(info) }
    }

    /// The corresponding C function is `write`; writes everything or fails.
    package static func writeAll(_ descriptor: borrowing FileDescriptor, _ bytes: UnsafeRawBufferPointer) -> Result<
        Void, Errno
    > {
        var offset = 0
        while offset < bytes.count {
            let base = bytes.baseAddress.map { $0 + offset }
            switch retrying({ write(descriptor.rawValue, base, bytes.count - offset) }) {
            case .success(let written): offset += written
            case .failure(let error): return .failure(error)
            }
        }
        return .success(())
    }

    /// Writes all of `bytes`.
    ///
    /// The corresponding C function is `write`.
    package static func writeAll(_ descriptor: borrowing FileDescriptor, _ bytes: [UInt8]) -> Result<Void, Errno> {
        let raw = descriptor.rawValue
        return bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let base = buffer.baseAddress.map { $0 + offset }
                switch retrying({ write(raw, base, buffer.count - offset) }) {
                case .success(let written): offset += written
                case .failure(let error): return .failure(error)
                }
            }
            return .success(())
        }
    }

    /// The corresponding C function is `read`.
    package static func readBytes(_ descriptor: borrowing FileDescriptor, into buffer: UnsafeMutableRawBufferPointer)
        -> Result<Int, Errno>
    {
        retrying { read(descriptor.rawValue, buffer.baseAddress, buffer.count) }
    }

    /// Names in a directory, without `.` and `..`. A name that is not UTF-8
    /// comes back repaired (each bad byte U+FFFD), so it names no file:
    /// ``removeTree(_:)`` removes such files by their bytes.
    ///
    /// The corresponding C functions are `opendir`, `readdir` and `closedir`.
    package static func directoryEntries(_ path: String) -> Result<[String], Errno> {
        guard let directory = opendir(path) else { return .failure(.current) }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            // Read in place, up to its NUL: an entry is only as long as its
            // name, and the last one of the system's buffer may end a page
            // before the 256 bytes `d_name` declares, so copying the whole
            // field (as `entry.pointee.d_name` does) can read past the page.
            let name = String(
                cString: UnsafeRawPointer(entry).advanced(by: nameOffset).assumingMemoryBound(to: CChar.self))
            if name != "." && name != ".." { names.append(name) }
        }
        return .success(names)
    }

    /// Where a directory entry's name starts in its `dirent`.
    static let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name) ?? MemoryLayout<dirent>.size

    /// A non-blocking, close-on-exec Unix datagram socket.
    ///
    /// The corresponding C function is `socket`.
    package static func datagramSocket() -> Result<FileDescriptor, Errno> {
        #if os(Linux)
            // Atomically close-on-exec: tests and tools spawn processes while sockets are open.
            let type = CInt(SOCK_DGRAM.rawValue) | CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue)
            return retrying { socket(AF_UNIX, type, 0) }.map(FileDescriptor.init(adopting:))
        #else
            return retrying { socket(AF_UNIX, SOCK_DGRAM, 0) }.flatMap { raw in
                let descriptor = FileDescriptor(adopting: raw)
                guard fcntl(raw, F_SETFD, FD_CLOEXEC) != -1, fcntl(raw, F_SETFL, O_NONBLOCK) != -1 else {
                    return .failure(.current)
                }
                return .success(descriptor)
            }
        #endif
    }

    /// Bytes a connected datagram socket sent that its receiver has not read
    /// yet: zero once the receiver took everything.
    ///
    /// The corresponding calls are `ioctl(TIOCOUTQ)` on Linux and
    /// `getsockopt(SO_NWRITE)` on Apple platforms.
    package static func unreadSentBytes(_ descriptor: borrowing FileDescriptor) -> Result<Int, Errno> {
        retrying { ctn_unread_sent_bytes(descriptor.rawValue) }.map { Int($0) }
    }

    /// The corresponding C function is `stat` (it follows symbolic links).
    package static func status(_ path: String) -> Result<FileStatus, Errno> {
        var info = stat()
        return retrying { stat(path, &info) }.map { _ in FileStatus(info) }
    }

    /// Sends one datagram without blocking and without raising SIGPIPE.
    ///
    /// The corresponding C function is `send`.
    package static func sendDatagram(_ descriptor: borrowing FileDescriptor, _ bytes: UnsafeRawBufferPointer) -> Result<
        Int, Errno
    > {
        retrying { send(descriptor.rawValue, bytes.baseAddress, bytes.count, CInt(MSG_DONTWAIT) | CInt(MSG_NOSIGNAL)) }
    }

    /// Asks for sender credentials on every datagram received.
    ///
    /// The corresponding C function is `setsockopt(SO_PASSCRED)`.
    package static func enableCredentials(_ descriptor: borrowing FileDescriptor) -> Result<Void, Errno> {
        retrying { ctn_enable_credentials(descriptor.rawValue) }.map { _ in }
    }

    /// Whether this platform reports a datagram sender's credentials.
    package static var credentialsSupported: Bool { ctn_credentials_supported() == 1 }

    /// One received datagram's length, sender and whether it was cut short.
    package struct Datagram {
        package var length: Int
        package var truncated: Bool
        package var senderProcessID: Int32?
        package var senderUserID: UInt32?
        package var senderGroupID: UInt32?
    }

    /// The corresponding C function is `getsockopt(SO_SNDBUF)`.
    package static func sendBufferSize(_ descriptor: borrowing FileDescriptor) -> Result<Int, Errno> {
        var size: CInt = 0
        var length = socklen_t(MemoryLayout<CInt>.size)
        return retrying { getsockopt(descriptor.rawValue, SOL_SOCKET, SO_SNDBUF, &size, &length) }.map { _ in Int(size)
        }
    }

    /// The corresponding C function is `setsockopt(SO_SNDBUF)` or `setsockopt(SO_RCVBUF)`.
    package static func setBufferSize(_ descriptor: borrowing FileDescriptor, send: Bool, bytes: Int) -> Result<
        Void, Errno
    > {
        var size = CInt(clamping: bytes)
        return retrying {
            setsockopt(
                descriptor.rawValue, SOL_SOCKET, send ? SO_SNDBUF : SO_RCVBUF, &size, socklen_t(MemoryLayout<CInt>.size)
            )
        }.map { _ in }
    }

    /// Whether a process with this id exists (it may belong to another user).
    ///
    /// The corresponding C function is `kill(pid, 0)`.
    package static func processExists(_ pid: Int32) -> Bool {
        guard pid > 0 else { return false }
        return kill(pid, 0) == 0 || Errno.current != .noSuchProcess
    }

    /// Waits until one of `descriptors` can be written to without blocking
    /// (or has failed), or `milliseconds` pass (−1: no limit). Returns, for
    /// each descriptor, whether it is ready.
    ///
    /// The corresponding C function is `poll` with `POLLOUT`.
    package static func waitUntilWritable(_ descriptors: [CInt], milliseconds: CInt) -> Result<[Bool], Errno> {
        var polled = descriptors.map { pollfd(fd: $0, events: Int16(POLLOUT), revents: 0) }
        return pollDescriptors(&polled, timeout: milliseconds).map { _ in polled.map { $0.revents != 0 } }
    }

    /// Waits until `descriptor` can be read without blocking, or
    /// `milliseconds` pass (−1: no limit). Returns whether it can.
    ///
    /// The corresponding C function is `poll` with `POLLIN`.
    @_spi(TransportAuthoring) public static func waitUntilReadable(_ descriptor: CInt, milliseconds: CInt) -> Result<
        Bool, Errno
    > {
        var polled = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
        return pollDescriptors(&polled, timeout: milliseconds).map { $0 > 0 }
    }

    /// Waits until one of `descriptors` is ready or `timeout` milliseconds pass
    /// (−1: no limit). Returns the `revents` of each.
    ///
    /// The corresponding C function is `poll`.
    package static func pollDescriptors(_ descriptors: inout [pollfd], timeout: CInt) -> Result<Int, Errno> {
        retrying { poll(&descriptors, nfds_t(descriptors.count), timeout) }.map(Int.init)
    }

    /// Takes or releases an advisory lock on a whole file, waiting for it.
    ///
    /// The corresponding C function is `flock`.
    package static func lockFile(_ descriptor: borrowing FileDescriptor, exclusive: Bool) -> Result<Void, Errno> {
        let operation = exclusive ? LOCK_EX : LOCK_SH
        return retrying { flock(descriptor.rawValue, operation) }.map { _ in }
    }

    /// Takes an exclusive advisory lock on a whole file if nobody holds one;
    /// returns `false` at once when another holds it.
    ///
    /// The corresponding C function is `flock(LOCK_EX | LOCK_NB)`.
    package static func tryLockFile(_ descriptor: borrowing FileDescriptor) -> Result<Bool, Errno> {
        switch retrying({ flock(descriptor.rawValue, LOCK_EX | LOCK_NB) }) {
        case .success: return .success(true)
        case .failure(.wouldBlock): return .success(false)
        case .failure(let error): return .failure(error)
        }
    }

    /// The corresponding C function is `flock(LOCK_UN)`.
    package static func unlockFile(_ descriptor: borrowing FileDescriptor) {
        count()
        _ = flock(descriptor.rawValue, LOCK_UN)
    }

    /// Asks that reads through `descriptor` leave its file's access time
    /// alone, where the caller owns the file (Linux's `O_NOATIME`); does
    /// nothing elsewhere, or for another user's file.
    ///
    /// The corresponding C function is `fcntl(F_SETFL)`.
    package static func skipAccessTime(_ descriptor: borrowing FileDescriptor) {
        #if os(Linux)
            count(2)
            _ = ctn_skip_access_time(descriptor.rawValue)
        #endif
    }

    /// The size and identity of an open file.
    ///
    /// The corresponding C function is `fstat`.
    package static func fileStatus(_ descriptor: borrowing FileDescriptor) -> Result<FileStatus, Errno> {
        var info = stat()
        return retrying { fstat(descriptor.rawValue, &info) }.map { _ in FileStatus(info) }
    }

    /// The size, link count and identity of an open file, read without its
    /// timestamps. Reading a file's times, as ``fileStatus(_:)`` does,
    /// makes its next write stamp a fine-grained time and dirty its inode
    /// where timestamps are multigrain (Linux 6.13 and later): for a log
    /// that one process appends to while others watch its size, that is a
    /// third of each append's cost. Use this between the reads or writes of
    /// a file that grows.
    ///
    /// The corresponding C function is `statx` (Linux; `fstat` where it is
    /// missing or refused, and elsewhere).
    package static func fileExtent(_ descriptor: borrowing FileDescriptor) -> Result<FileExtent, Errno> {
        let descriptor = descriptor.rawValue
        return extent { ctn_file_extent(descriptor, $0, $1, $2, $3) }
    }

    /// ``fileExtent(_:)`` of the file at `path`; a symbolic link as its last
    /// part is not followed.
    ///
    /// The corresponding C function is `statx` (Linux; `lstat` where it is
    /// missing or refused, and elsewhere).
    package static func pathExtent(_ path: String) -> Result<FileExtent, Errno> {
        pathExtent(SystemPath(path))
    }

    /// ``pathExtent(_:)`` of a path kept in C form, for a path looked up
    /// again and again: nothing is converted or allocated per call.
    package static func pathExtent(_ path: SystemPath) -> Result<FileExtent, Errno> {
        path.bytes.withUnsafeBufferPointer { bytes in
            guard let start = bytes.baseAddress else { return .failure(.invalidArgument) }
            return extent { ctn_path_extent(start, $0, $1, $2, $3) }
        }
    }

    /// Makes one of the C extent calls, which fill in a size, a link count,
    /// a device and an inode, and returns what it filled in.
    private static func extent(
        _ call: (
            UnsafeMutablePointer<Int64>, UnsafeMutablePointer<UInt64>, UnsafeMutablePointer<UInt64>,
            UnsafeMutablePointer<UInt64>
        ) -> CInt
    ) -> Result<FileExtent, Errno> {
        var size: Int64 = 0
        var links: UInt64 = 0
        var device: UInt64 = 0
        var inode: UInt64 = 0
        return retrying { call(&size, &links, &device, &inode) }.map { _ in
            FileExtent(
                size: Int(size), links: Int(clamping: links), identity: FileIdentity(device: device, inode: inode))
        }
    }

    /// Cuts a file to `length` bytes.
    ///
    /// The corresponding C function is `ftruncate`.
    package static func truncate(_ descriptor: borrowing FileDescriptor, to length: Int) -> Result<Void, Errno> {
        retrying { ftruncate(descriptor.rawValue, off_t(length)) }.map { _ in }
    }

    /// Reads up to `buffer.count` bytes at `offset`.
    ///
    /// The corresponding C function is `pread`.
    package static func readBytes(
        _ descriptor: borrowing FileDescriptor,
        into buffer: UnsafeMutableRawBufferPointer,
        at offset: Int
    ) -> Result<Int, Errno> {
        retrying { pread(descriptor.rawValue, buffer.baseAddress, buffer.count, off_t(offset)) }
    }

    /// Reads `count` bytes at `offset` (fewer at the end of the file).
    ///
    /// The corresponding C function is `pread`, until `count` bytes or the end.
    package static func readBytes(_ descriptor: borrowing FileDescriptor, at offset: Int, count: Int)
        -> Result<[UInt8], Errno>
    {
        var bytes = [UInt8](repeating: 0, count: count)
        var total = 0
        while total < count {
            let result = bytes.withUnsafeMutableBytes { raw in
                readBytes(descriptor, into: UnsafeMutableRawBufferPointer(rebasing: raw[total...]), at: offset + total)
            }
            switch result {
            case .success(0): return .success(Array(bytes[..<total]))
            case .success(let read): total += read
            case .failure(let error): return .failure(error)
            }
        }
        return .success(bytes)
    }

    /// Writes all of `bytes` at `offset`.
    ///
    /// The corresponding C function is `pwrite`.
    package static func writeAll(
        _ descriptor: borrowing FileDescriptor,
        _ bytes: UnsafeRawBufferPointer,
        at offset: Int
    ) -> Result<Void, Errno> {
        var written = 0
        while written < bytes.count {
            let base = bytes.baseAddress.map { $0 + written }
            switch retrying({ pwrite(descriptor.rawValue, base, bytes.count - written, off_t(offset + written)) }) {
            case .success(let count): written += count
            case .failure(let error): return .failure(error)
            }
        }
        return .success(())
    }

    /// Replaces `destination` with `source` in one step.
    ///
    /// The corresponding C function is `rename`.
    package static func renameFile(_ source: String, to destination: String) -> Result<Void, Errno> {
        retrying { rename(source, destination) }.map { _ in }
    }

    /// Makes a write that exceeds the file-size limit (RLIMIT_FSIZE) fail with
    /// EFBIG instead of killing the process with SIGXFSZ. Process-wide.
    ///
    /// The corresponding C function is `signal(SIGXFSZ, SIG_IGN)`.
    package static func ignoreFileSizeSignal() {
        _ = signal(SIGXFSZ, SIG_IGN)
    }

    /// The two ends of a pipe, for waking a thread that waits in poll.
    package struct Pipe: ~Copyable, Sendable {
        package let readEnd: FileDescriptor
        package let writeEnd: FileDescriptor
    }

    /// A pipe whose ends are non-blocking and close-on-exec.
    ///
    /// The corresponding C functions are `pipe2` and `fcntl`.
    package static func makePipe() -> Result<Pipe, Errno> {
        var ends: [CInt] = [-1, -1]
        guard ctn_pipe_cloexec(&ends) == 0 else { return .failure(.current) }
        let pair = Pipe(readEnd: FileDescriptor(adopting: ends[0]), writeEnd: FileDescriptor(adopting: ends[1]))
        for end in ends {
            guard fcntl(end, F_SETFL, O_NONBLOCK) != -1 else { return .failure(.current) }
        }
        return .success(pair)
    }
}
