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
default:
    print("usage: Jobs post JOB…")
}
