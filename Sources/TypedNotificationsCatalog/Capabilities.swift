import TypedNotifications

// What only some transports can do. A tool asks a hub's transport with
// `as?`; an entry's file declares which of them its transport has.

/// A transport that can wait until its endpoints have read what it posted
/// (`tnotify post --wait`).
package protocol WaitsForReaders: NotificationTransport {
    /// Waits until every endpoint read everything, or `timeout` passes;
    /// returns whether nothing is left unread.
    func flush(timeout: Duration) -> Bool
    /// The endpoints that have not read everything yet.
    var endpointsWithUnreadPosts: [String] { get }
}

/// A transport whose readers can lose their server for a while and say so.
package protocol ReportsReaderErrors: NotificationTransport {
    /// The names whose reader cannot read now, with why.
    var readerErrors: [NotificationName: TypedNotificationError] { get }
    /// ``readerErrors`` now, then each time it changes, until the transport closes.
    func readerErrorUpdates() -> AsyncStream<[NotificationName: TypedNotificationError]>
}

/// A transport whose durable cursors can be found unusable.
package protocol ReportsCursorProblems: NotificationTransport {
    /// Why the cursor of `name` could not be used, if it could not.
    func cursorProblem(for name: NotificationName) -> String?
    /// Why the marker of `namespace` could not be used, if it could not.
    func cursorProblem(in namespace: NotificationNamespace) -> String?
}
