internal import CTypedNotificationsChecksum

/// CRC-32C (Castagnoli): polynomial 0x1EDC6F41, reflected (0x82F63B78),
/// initial value 0xFFFFFFFF, final XOR 0xFFFFFFFF. The check value of the
/// ASCII bytes "123456789" is 0xE3069283.
///
/// Computed by the processor's CRC-32C instruction where it has one (SSE4.2,
/// ARMv8's CRC extension; chosen once, at load time), three streams at a time
/// for long inputs, and by slicing by 8 elsewhere: all in the `CTypedNotificationsChecksum`
/// target. The running value can be carried from one call to the next, so a
/// record can be checksummed in pieces as it is written.
package struct CRC32C {
    /// The running value, before the final XOR.
    private(set) var state: UInt32

    /// A checksum that starts from the running value `running`.
    init(running: UInt32 = 0xFFFF_FFFF) { state = running }

    /// The checksum of everything fed so far.
    var value: UInt32 { state ^ 0xFFFF_FFFF }

    /// Feeds more bytes.
    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        state = ctc_crc32c(state, base, bytes.count)
    }

    /// The checksum of `bytes` on their own.
    package static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var crc = CRC32C()
        crc.update(bytes)
        return crc.value
    }
}

/// The CRC-32C of `bytes` by every implementation this processor can run:
/// the one chosen at load time, the software path, and, where the processor
/// has the instruction, the hardware path with three streams and with one.
/// Each is also computed in two pieces split at `split` (clamped to the
/// bytes). For the fuzzers, which check that every result is the same.
@_spi(Checksums) public func crc32cByEveryPath(_ bytes: UnsafeRawBufferPointer, split: Int) -> [UInt32] {
    let cut = min(max(split, 0), bytes.count)
    let head = UnsafeRawBufferPointer(rebasing: bytes[..<cut])
    let tail = UnsafeRawBufferPointer(rebasing: bytes[cut...])
    var updates: [(UInt32, UnsafeRawPointer?, Int) -> UInt32] = [ctc_crc32c, ctc_crc32c_software]
    if ctc_crc32c_hardware_available() == 1 {
        updates += [ctc_crc32c_hardware, ctc_crc32c_hardware_serial]
    }
    var results: [UInt32] = []
    for update in updates {
        results.append(update(0xFFFF_FFFF, bytes.baseAddress, bytes.count) ^ 0xFFFF_FFFF)
        let first = update(0xFFFF_FFFF, head.baseAddress, head.count)
        results.append(update(first, tail.baseAddress, tail.count) ^ 0xFFFF_FFFF)
    }
    return results
}
