/// CRC-32C (Castagnoli): polynomial 0x1EDC6F41, reflected (0x82F63B78),
/// initial value 0xFFFFFFFF, final XOR 0xFFFFFFFF. The check value of the
/// ASCII bytes "123456789" is 0xE3069283.
///
/// Computed eight bytes at a time with eight 256-entry tables ("slicing by 8").
/// The running value can be carried from one call to the next, so a record can
/// be checksummed in pieces as it is written.
struct CRC32C {
    /// The running value, before the final XOR.
    private(set) var state: UInt32 = 0xFFFF_FFFF

    /// The checksum of everything fed so far.
    var value: UInt32 { state ^ 0xFFFF_FFFF }

    /// Feeds more bytes.
    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        state = CRC32CTables.shared.update(state, base, bytes.count)
    }

    /// The checksum of `bytes` on their own.
    static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var crc = CRC32C()
        crc.update(bytes)
        return crc.value
    }
}

/// The eight lookup tables, built once.
final class CRC32CTables: Sendable {
    static let shared = CRC32CTables()

    // 8 × 256 entries, table k at [k * 256 ..< (k + 1) * 256].
    private let table: [UInt32]

    private init() {
        var table = [UInt32](repeating: 0, count: 8 * 256)
        for byte in 0..<256 {
            var crc = UInt32(byte)
            for _ in 0..<8 {
                crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1
            }
            table[byte] = crc
        }
        for slice in 1..<8 {
            for byte in 0..<256 {
                let previous = table[(slice - 1) * 256 + byte]
                table[slice * 256 + byte] = (previous >> 8) ^ table[Int(previous & 0xFF)]
            }
        }
        self.table = table
    }

    func update(_ initial: UInt32, _ base: UnsafeRawPointer, _ count: Int) -> UInt32 {
        table.withUnsafeBufferPointer { t in
            var crc = initial
            var offset = 0
            while count - offset >= 8 {
                let low = base.loadUnaligned(fromByteOffset: offset, as: UInt32.self).littleEndian ^ crc
                let high = base.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self).littleEndian
                crc =
                    t[7 * 256 + Int(low & 0xFF)] ^ t[6 * 256 + Int((low >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((low >> 16) & 0xFF)] ^ t[4 * 256 + Int(low >> 24)]
                    ^ t[3 * 256 + Int(high & 0xFF)] ^ t[2 * 256 + Int((high >> 8) & 0xFF)]
                    ^ t[1 * 256 + Int((high >> 16) & 0xFF)] ^ t[Int(high >> 24)]
                offset += 8
            }
            while offset < count {
                let byte = base.load(fromByteOffset: offset, as: UInt8.self)
                crc = (crc >> 8) ^ t[Int((crc ^ UInt32(byte)) & 0xFF)]
                offset += 1
            }
            return crc
        }
    }
}
