import Testing

@testable import TypedNotificationsRedis

@Suite("Redis read deadlines: the watchdog's heap")
struct ReadDeadlinesTests {
    private final class Owner {}

    @Test("moved, removed and taken in any order, the heap agrees with a plain list: earliest first, one per owner")
    func agreesWithAList() {
        var generator = SystemRandomNumberGenerator()
        let owners = (0..<40).map { _ in Owner() }
        let deadlines = ReadDeadlines()
        var model: [ObjectIdentifier: UInt64] = [:]
        var now: UInt64 = 0
        for _ in 0..<5_000 {
            let owner = ObjectIdentifier(owners[Int.random(in: 0..<owners.count, using: &generator)])
            switch Int.random(in: 0..<10, using: &generator) {
            case 0..<6:
                let deadline = now + UInt64.random(in: 0..<1_000, using: &generator)
                deadlines.set(owner, to: deadline)
                model[owner] = deadline
            case 6..<8:
                deadlines.remove(owner)
                model[owner] = nil
            default:
                now += UInt64.random(in: 0..<300, using: &generator)
                let due = deadlines.takeDue(now: now)
                let expected = model.filter { $0.value <= now }
                #expect(Set(due) == Set(expected.keys))
                #expect(due.count == expected.count)
                #expect(due.map { expected[$0] ?? 0 } == due.map { expected[$0] ?? 0 }.sorted())
                for key in expected.keys { model[key] = nil }
            }
            #expect(deadlines.earliest == model.values.min())
        }
    }
}
