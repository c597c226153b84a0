import Foundation
@_spi(TransportAuthoring) @_spi(Checksums) import TypedNotifications

/// A Codable payload for the JSON path.
struct Probe: Codable, DarwinPayload {
    var id: Int
    var tags: [String]
}

/// libFuzzer's entry point: any bytes in, and the decoder must return a
/// message or throw. A trap, an out-of-bounds read (AddressSanitizer) or an
/// accepted envelope that does not re-encode to the same bytes is a finding.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEnvelope(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    var decoder = EnvelopeDecoder(maximumPayloadSize: 64 * 1024)

    // As one whole record.
    if let message = try? decoder.decode(bytes) {
        checkCanonical(message, bytes)
    }

    // As a stream of records, the way a log is read.
    var offset = 0
    while offset < bytes.count, let (message, end) = try? decoder.decode(bytes, at: offset) {
        guard end > offset, end <= bytes.count else { fatalError("decoder did not advance within bounds") }
        checkCanonical(message, Array(bytes[offset..<end]))
        offset = end
    }
    _ = try? bytes.withUnsafeBytes { try NotificationEnvelope.recordLength(in: $0) }

    // Every checksum path agrees, whole and split (at a point the input picks).
    bytes.withUnsafeBytes { raw in
        let split = raw.count > 0 ? Int(raw[0]) * 16 + Int(raw[raw.count - 1]) : 0
        let results = crc32cByEveryPath(raw, split: split)
        guard results.allSatisfy({ $0 == results[0] }) else { fatalError("CRC-32C paths disagree: \(results)") }
    }
    // Inputs are at most 4 KiB; tiled past 24 KiB they reach the longest blocks too.
    if let first = bytes.first {
        let tiled = Array(repeatElement(bytes, count: 24_700 / bytes.count + 1).joined().prefix(24_576 + Int(first)))
        tiled.withUnsafeBytes { raw in
            let results = crc32cByEveryPath(raw, split: Int(first) * 97)
            guard results.allSatisfy({ $0 == results[0] }) else { fatalError("CRC-32C paths disagree: \(results)") }
        }
    }

    // The bytes as payloads of the built-in types.
    bytes.withUnsafeBytes { raw in
        _ = try? String(payload: raw)
        _ = try? Int(payload: raw)
        _ = try? Int16(payload: raw)
        _ = try? Bool(payload: raw)
        _ = try? RawNotification(payload: raw)
        _ = try? Probe(payload: raw)
    }
    return 0
}

/// An accepted envelope re-encodes to exactly the bytes it came from: the
/// decoder accepts only what the encoder writes.
private func checkCanonical(_ message: TransportMessage, _ bytes: [UInt8]) {
    guard case .encoded(let wire) = message.payload else { fatalError("decoded payload is not encoded") }
    let payload = Array(wire.payload)
    guard
        let again = try? NotificationEnvelope.encode(
            name: message.name,
            sender: message.sender,
            sequence: message.sequence,
            timestamp: message.timestamp,
            writePayload: { $0.append(contentsOf: payload) }
        ),
        Array(again.envelope) == bytes
    else {
        fatalError("an accepted envelope does not re-encode to the same bytes")
    }
}

/// libFuzzer's driver, for programs that bring their own `main`.
@_silgen_name("LLVMFuzzerRunDriver")
private func llvmFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt

/// SwiftPM links an executable target's `main` to this symbol; it hands over
/// to libFuzzer with the command line unchanged.
@_cdecl("FuzzEnvelope_main")
public func fuzzerMain(
    _ argc: CInt,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
) -> CInt {
    var argc = argc
    var argv = argv
    return llvmFuzzerRunDriver(&argc, &argv) { data, size in fuzzEnvelope(data, size) }
}
