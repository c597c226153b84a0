import CTypedNotificationsChecksum
import Testing

@testable import TypedNotifications
@testable import TypedNotificationsCore
@testable import TypedNotificationsFile
@testable import TypedNotificationsFoundation
@testable import TypedNotificationsSocket

/// Every way the checksum can be computed: what `CRC32C` uses (chosen at load
/// time), and each path on its own.
private typealias Update = @Sendable (UInt32, UnsafeRawBufferPointer) -> UInt32

private let paths: [(name: String, update: Update)] = {
    var paths: [(name: String, update: Update)] = [
        (
            "chosen",
            { running, bytes in
                var crc = CRC32C(running: running)
                crc.update(bytes)
                return crc.state
            }
        ),
        ("software", { ctc_crc32c_software($0, $1.baseAddress, $1.count) }),
    ]
    if ctc_crc32c_hardware_available() == 1 {
        paths.append(("hardware, three streams", { ctc_crc32c_hardware($0, $1.baseAddress, $1.count) }))
        paths.append(("hardware, one stream", { ctc_crc32c_hardware_serial($0, $1.baseAddress, $1.count) }))
    }
    return paths
}()

@Suite("CRC-32C")
struct CRC32CTests {
    /// A bit-at-a-time reference implementation, on the running value.
    static func reference(_ running: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var crc = running
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
        }
        return crc
    }

    private static func checksum(_ bytes: [UInt8], _ update: Update) -> UInt32 {
        bytes.withUnsafeBytes { update(0xFFFF_FFFF, $0) } ^ 0xFFFF_FFFF
    }

    static var blockSizes: (long: Int, short: Int) {
        var long = 0
        var short = 0
        ctc_crc32c_block_sizes(&long, &short)
        return (long, short)
    }

    #if arch(x86_64) || arch(arm64)
        @Test("the processor's instruction is found and chosen on x86-64 and ARM64")
        func hardwareChosen() {
            #expect(ctc_crc32c_hardware_available() == 1)
            #expect(paths.count == 4)
        }
    #endif

    @Test("known answers on every path: the check value and the RFC 3720 vectors")
    func knownAnswers() {
        for path in paths {
            #expect(Self.checksum(Array("123456789".utf8), path.update) == 0xE306_9283, "\(path.name)")
            #expect(Self.checksum([UInt8](repeating: 0, count: 32), path.update) == 0x8A91_36AA, "\(path.name)")
            #expect(Self.checksum([UInt8](repeating: 0xFF, count: 32), path.update) == 0x62A8_AB43, "\(path.name)")
            #expect(Self.checksum(Array(0..<32), path.update) == 0x46DD_794E, "\(path.name)")
            #expect(Self.checksum(Array((0..<32).reversed()), path.update) == 0x113F_DB5C, "\(path.name)")
            #expect(Self.checksum([], path.update) == 0, "\(path.name)")
        }
    }

    @Test("every path matches the reference at every length around each block boundary, at every alignment")
    func boundaries() {
        let (long, short) = Self.blockSizes
        var random = SplitMix64(state: 0xB10C)
        let buffer = (0..<(3 * long + 64)).map { _ in UInt8.random(in: 0...255, using: &random) }
        var lengths = Array(0...40)
        for boundary in [short, 3 * short, 6 * short, long, 3 * long] {
            lengths += (boundary - 9)...(boundary + 9)
        }
        buffer.withUnsafeBytes { all in
            for length in lengths {
                for alignment in 0..<8 {
                    let bytes = UnsafeRawBufferPointer(rebasing: all[alignment..<(alignment + length)])
                    let running = UInt32(truncatingIfNeeded: length &* 2_654_435_761)
                    let expected = Self.reference(running, bytes)
                    for path in paths {
                        #expect(
                            path.update(running, bytes) == expected, "\(path.name), \(length) bytes at +\(alignment)")
                    }
                }
            }
        }
    }

    @Test("every path matches the reference in one piece and in two, over random lengths up to 80 KiB")
    func matchesReference() {
        var random = SplitMix64(state: 0xC4C3_2C)
        for round in 0..<300 {
            let limit = round % 10 == 0 ? 80 * 1024 : 2_000
            let bytes = (0..<Int.random(in: 0...limit, using: &random)).map { _ in
                UInt8.random(in: 0...255, using: &random)
            }
            let split = Int.random(in: 0...bytes.count, using: &random)
            bytes.withUnsafeBytes { all in
                let expected = Self.reference(0xFFFF_FFFF, all)
                for path in paths {
                    #expect(path.update(0xFFFF_FFFF, all) == expected, "\(path.name), \(bytes.count) bytes")
                    let first = path.update(0xFFFF_FFFF, UnsafeRawBufferPointer(rebasing: all[..<split]))
                    let second = path.update(first, UnsafeRawBufferPointer(rebasing: all[split...]))
                    #expect(second == expected, "\(path.name), \(bytes.count) bytes split at \(split)")
                }
            }
        }
    }
}
