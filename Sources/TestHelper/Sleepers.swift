import Foundation
@_spi(TransportAuthoring) import TypedNotifications
@_spi(TransportAuthoring) import TypedNotificationsPlatform

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Two file transports, the first closed but still held, then a third:
/// whether each one's thread sleeps in the read of its change events.
func sleepersAfterClose(directory: String) {
    do {
        let first = try FileSignalTransport(directory: directory)
        let second = try FileSignalTransport(directory: directory)
        let sleptFirst = first.sleepsInRead
        first.close()
        let closed = OneShotEvent()
        first.whenClosed { closed.signal() }
        guard closed.wait(nanoseconds: 10_000_000_000) else { fail("the first transport's close never ended") }
        let third = try FileSignalTransport(directory: directory)
        say("sleeping first=\(sleptFirst) second=\(second.sleepsInRead) third=\(third.sleepsInRead)")
        withExtendedLifetime((first, second, third)) {}
    } catch {
        fail("\(error)")
    }
}

/// As `user`, with all but `free` of the user's inotify instances held,
/// opens three file transports (and their hubs) in a directory of its own.
func sleepersWithScarceInstances(user: String, free: Int32) {
    #if os(Linux)
        guard let entry = getpwnam(user) else { fail("no user \(user)") }
        let (uid, gid) = (entry.pointee.pw_uid, entry.pointee.pw_gid)
        guard setgid(gid) == 0, setuid(uid) == 0 else { fail("cannot switch to \(user): errno \(errno)") }
        var template = Array("/tmp/tn-scarce-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { fail("mkdtemp: errno \(errno)") }
        let directory = String(cString: made)
        var held: [CInt] = []
        while true {
            let descriptor = inotify_init1(CInt(IN_CLOEXEC))
            if descriptor == -1 { break }
            held.append(descriptor)
        }
        guard held.count >= Int(free) else { fail("only \(held.count) instances") }
        for _ in 0..<free { close(held.removeLast()) }
        var hubs: [NotificationHub<FileSignalTransport>] = []
        var sleeping: [Bool] = []
        for index in 0..<3 {
            do {
                let transport = try FileSignalTransport(directory: directory + "/shared")
                sleeping.append(transport.sleepsInRead)
                hubs.append(try NotificationHub(endpoint: "scarce\(index)", transport: transport))
            } catch {
                say("failed \(index): \(error)")
                exit(0)
            }
        }
        say("made 3 sleeping=\(sleeping.map(String.init).joined(separator: ","))")
        for hub in hubs { hub.closeAndWait() }
        for descriptor in held { close(descriptor) }
        _ = try? FileManager.default.removeItem(atPath: directory)
    #else
        say("made 3 sleeping=")
    #endif
}
