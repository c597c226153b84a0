import Foundation
import TypedNotifications
import TypedNotificationsRedis

/// Posted by a worker when a job ends. Every host compiles this same type.
struct JobFinished: TypedNotification, Codable {
    static let name: NotificationName = "com.example.jobs.finished"
    var jobID: String
    var succeeded: Bool
}

// Every host reaches the same server; the URL may carry a user and password.
let url = ProcessInfo.processInfo.environment["REDIS_URL"] ?? "redis://127.0.0.1:6379"

/// Posts, retrying for a while when the server cannot be reached: a post
/// fails at once then, and nothing is buffered behind your back.
func post(_ finished: JobFinished, on center: NotificationHub<RedisStreamsTransport>) async throws {
    var attempts = 1
    while true {
        do {
            try center.post(finished)
            return
        } catch {
            guard error.code == .unreachable, attempts < 20 else { throw error }
        }
        attempts += 1
        try await Task.sleep(for: .milliseconds(250))
    }
}

let arguments = CommandLine.arguments.dropFirst()
switch arguments.first {
case "post":
    let center = try NotificationHub(endpoint: "worker", transport: RedisStreamsTransport(url: url))
    for jobID in arguments.dropFirst() {
        try await post(JobFinished(jobID: jobID, succeeded: true), on: center)
    }
    center.close()
case "watch":
    // A durable identity: a consumer group that remembers what this
    // dashboard handled, across restarts and crashes. Its first run starts
    // with the newest 10 jobs already finished.
    let transport = try RedisStreamsTransport(url: url, identity: "dashboard", firstRead: .newest(10))
    let center = try NotificationHub(endpoint: "dashboard", transport: transport)
    print("watching; run `swift run Jobs post 1 2 3` on another host")
    for await finished in try center.deliveries(.of(JobFinished.self)) {
        let again = finished.delivery.isRedelivery ? " (again: not handled before a crash)" : ""
        print("job \(finished.notification.jobID) finished\(again)")
    }
    if let failure = center.failure { print("stopped: \(failure)") }
default:
    print("usage: Jobs post JOB… | Jobs watch")
}
