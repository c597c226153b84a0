@_spi(TransportAuthoring) import TypedNotifications

/// Where a Redis (or Valkey) server is and how to log in to it, usually
/// read from a URL.
///
/// ```swift
/// let options = try RedisConnectionOptions(url: "redis://app:secret@cache.internal:6379/2")
/// ```
///
/// URLs take these forms:
/// - `redis://host`, `redis://host:port`, `redis://[::1]:port`: TCP, port 6379 by default;
/// - `redis://user:password@host:port/db`: logs in with ACL `AUTH user password`,
///   then selects database `db` (0 by default); `redis://:password@host` uses
///   the `default` user; user and password may be percent-encoded;
/// - `unix:///path/to/redis.sock` (with `?db=N`): a Unix socket on this host.
///
/// `rediss://` (TLS) is refused with ``TypedNotifications/TypedNotificationError/Code/invalidConfiguration``:
/// TLS is not built in, and a silent plaintext connection would be worse than
/// none. Run a TLS tunnel such as `stunnel` or `spiped` on each host, and
/// point the URL at its local end.
public struct RedisConnectionOptions: Sendable, Hashable, CustomStringConvertible {
    /// The host name or address, or a Unix socket path when ``isUnixSocket``.
    public var host: String
    /// The TCP port (ignored for a Unix socket).
    public var port: Int
    /// Whether ``host`` is a Unix socket path.
    public var isUnixSocket: Bool
    /// The ACL user to log in as; `nil` with a password: the `default` user.
    public var username: String?
    /// The password; `nil`: no `AUTH`.
    public var password: String?
    /// The database number selected after logging in (standalone servers only).
    public var database: Int
    /// How long a connection attempt may take.
    public var connectTimeout: Duration
    /// How long the server may take to answer a command, after which the
    /// connection is treated as broken.
    public var commandTimeout: Duration

    /// Options for `host`:`port`, without logging in.
    public init(
        host: String = "127.0.0.1",
        port: Int = 6379,
        username: String? = nil,
        password: String? = nil,
        database: Int = 0,
        connectTimeout: Duration = .seconds(2),
        commandTimeout: Duration = .seconds(5)
    ) {
        self.host = host
        self.port = port
        self.isUnixSocket = false
        self.username = username
        self.password = password
        self.database = database
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
    }

    /// Reads a `redis://` or `unix://` URL (see the type's description).
    ///
    /// - Throws: ``TypedNotifications/TypedNotificationError/Code/invalidConfiguration`` for a URL
    ///   that is not one of those forms, has a bad port or database, or asks
    ///   for TLS (`rediss://`); the message says what is wrong.
    public init(url: String) throws(TypedNotificationError) {
        self.init()
        let shown = TypedNotificationError.quote(Self.redacted(url), limit: 200)
        func invalid(_ why: String) -> TypedNotificationError {
            TypedNotificationError(code: .invalidConfiguration, message: "Redis URL \(shown) \(why)")
        }
        guard let schemeEnd = url.range(of: "://") else {
            throw invalid("has no scheme: write redis://host:port or unix:///path")
        }
        let scheme = url[..<schemeEnd.lowerBound].lowercased()
        var rest = Substring(url[schemeEnd.upperBound...])
        var query: Substring = ""
        if let mark = rest.firstIndex(of: "?") {
            query = rest[rest.index(after: mark)...]
            rest = rest[..<mark]
        }
        switch scheme {
        case "rediss":
            throw invalid(
                "asks for TLS, which TypedNotificationsRedis does not build in; it will not fall back to "
                    + "plaintext. Run a TLS tunnel (stunnel or spiped) on this host and use redis:// to its local port")
        case "unix", "redis+unix":
            guard rest.hasPrefix("/"), rest.count > 1 else { throw invalid("has no absolute socket path") }
            guard let path = Self.percentDecoded(rest) else { throw invalid("has a bad percent escape in its path") }
            host = path
            isUnixSocket = true
        case "redis":
            var authority = rest
            if let slash = rest.firstIndex(of: "/") {
                authority = rest[..<slash]
                let path = rest[rest.index(after: slash)...]
                if !path.isEmpty {
                    guard let number = Int(path), number >= 0 else {
                        throw invalid("has a database that is not a number ≥ 0")
                    }
                    database = number
                }
            }
            if let at = authority.lastIndex(of: "@") {
                let credentials = authority[..<at]
                authority = authority[authority.index(after: at)...]
                let user: Substring
                let secret: Substring?
                if let colon = credentials.firstIndex(of: ":") {
                    user = credentials[..<colon]
                    secret = credentials[credentials.index(after: colon)...]
                } else {
                    user = ""
                    secret = credentials
                }
                guard let decodedUser = Self.percentDecoded(user), let decodedSecret = Self.percentDecoded(secret ?? "")
                else { throw invalid("has a bad percent escape in its user or password") }
                username = decodedUser.isEmpty ? nil : decodedUser
                password = decodedSecret
            }
            var portText: Substring?
            if authority.hasPrefix("[") {
                guard let close = authority.firstIndex(of: "]") else { throw invalid("has an unclosed [ in its host") }
                host = String(authority[authority.index(after: authority.startIndex)..<close])
                let after = authority[authority.index(after: close)...]
                if !after.isEmpty {
                    guard after.hasPrefix(":") else { throw invalid("has text after its [host]") }
                    portText = after.dropFirst()
                }
            } else if let colon = authority.lastIndex(of: ":") {
                host = String(authority[..<colon])
                portText = authority[authority.index(after: colon)...]
            } else {
                host = String(authority)
            }
            guard !host.isEmpty else { throw invalid("has no host") }
            if let portText {
                guard let number = Int(portText), (1...65535).contains(number) else {
                    throw invalid("has a port that is not 1-65535")
                }
                port = number
            }
        default:
            throw invalid("has scheme \(TypedNotificationError.quote(String(scheme))); use redis:// or unix://")
        }
        for pair in query.split(separator: "&") where !pair.isEmpty {
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0] == "db", let number = Int(parts[1]), number >= 0 else {
                throw invalid("has a query other than db=N")
            }
            database = number
        }
    }

    /// The URL with its password replaced by `***`, for messages and logs.
    public var redactedDescription: String {
        if isUnixSocket { return "unix://\(host)" + (database == 0 ? "" : "?db=\(database)") }
        let shownHost = host.contains(":") ? "[\(host)]" : host
        var credentials = ""
        if password != nil { credentials = "\(username ?? ""):***@" }
        return "redis://\(credentials)\(shownHost):\(port)" + (database == 0 ? "" : "/\(database)")
    }

    /// The redacted URL: printing options never shows the password.
    public var description: String { redactedDescription }

    /// `url` with whatever stands between `//` and `@` replaced by `***`.
    static func redacted(_ url: String) -> String {
        guard let schemeEnd = url.range(of: "://"), let at = url[schemeEnd.upperBound...].lastIndex(of: "@") else {
            return url
        }
        return String(url[..<schemeEnd.upperBound]) + "***" + String(url[at...])
    }

    /// `text` with `%XX` escapes decoded, or `nil` for a bad escape or bytes that are not UTF-8.
    static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var index = text.utf8.startIndex
        let utf8 = text.utf8
        while index < utf8.endIndex {
            let byte = utf8[index]
            if byte == UInt8(ascii: "%") {
                let first = utf8.index(after: index)
                guard first < utf8.endIndex else { return nil }
                let second = utf8.index(after: first)
                guard second < utf8.endIndex, let high = hexValue(utf8[first]), let low = hexValue(utf8[second]) else {
                    return nil
                }
                bytes.append(high << 4 | low)
                index = utf8.index(after: second)
            } else {
                bytes.append(byte)
                index = utf8.index(after: index)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
