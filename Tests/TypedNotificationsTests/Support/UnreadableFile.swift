import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Each way a small file the library wrote (a cursor, a marker) can be
/// found unreadable by its next reader: damaged in place, or replaced by
/// something that is not a file of this user.
enum UnreadableFile: String, CaseIterable, CustomTestStringConvertible {
    case garbage
    /// The first bytes of a valid one: a write cut short.
    case truncated
    case empty
    case fifo
    case directory
    /// A symbolic link to a valid copy elsewhere: never followed.
    case link
    /// A valid copy that belongs to another user (needs root to make).
    case otherUsersFile

    var testDescription: String { rawValue }

    /// The ways this process can play: another user's file only as root.
    static var playable: [UnreadableFile] {
        allCases.filter { $0 != .otherUsersFile || getuid() == 0 }
    }

    /// Whether the library can write a valid file in its place again
    /// (a rename does not replace a directory).
    var isReplaceable: Bool { self != .directory }

    /// Replaces the file at `path`, which holds a valid copy, by this.
    func plant(at path: String) throws {
        let valid = try String(contentsOfFile: path, encoding: .utf8)
        try #require(unlink(path) == 0)
        switch self {
        case .garbage: try write("\u{1}garbage \u{FFFD}\n", to: path)
        case .truncated: try write(String(valid.prefix(valid.count / 2)), to: path)
        case .empty: try write("", to: path)
        case .fifo: try #require(mkfifo(path, 0o600) == 0)
        case .directory: try #require(mkdir(path, 0o700) == 0)
        case .link:
            let elsewhere = path + "-elsewhere"
            try write(valid, to: elsewhere)
            try #require(symlink(elsewhere, path) == 0)
        case .otherUsersFile:
            try write(valid, to: path)
            try #require(chown(path, 65_534, 65_534) == 0)
        }
    }

    private func write(_ text: String, to path: String) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        let bytes = Array(text.utf8)
        try #require(Foundation.write(descriptor, bytes, bytes.count) == bytes.count)
    }
}
