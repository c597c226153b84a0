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

let arguments = CommandLine.arguments.dropFirst()
switch arguments.first {
case "post":
    // A post returns once Redis has stored it in the name's stream.
    let center = try NotificationHub(endpoint: "worker", transport: RedisStreamsTransport(url: url))
    for jobID in arguments.dropFirst() {
        try center.post(JobFinished(jobID: jobID, succeeded: true))
    }
    center.close()
case "watch":
    // A durable identity: a consumer group that remembers what this
    // dashboard handled, across restarts and crashes.
    let transport = try RedisStreamsTransport(url: url, identity: "dashboard")
    let center = try NotificationHub(endpoint: "dashboard", transport: transport)
    print("watching; run `swift run Jobs post 1 2 3` on another host")
    for await finished in try center.deliveries(.of(JobFinished.self)) {
        let again = finished.delivery.isRedelivery ? " (again: not handled before a crash)" : ""
        print("job \(finished.notification.jobID) finished\(again)")
    }
default:
    print("usage: Jobs post JOB… | Jobs watch")
}
