import Testing
@_spi(TransportAuthoring) import TypedNotificationsPlatform

@Suite("Receiving datagrams a batch per call", .timeLimit(.minutes(10)))
struct DatagramBatchTests {
    /// A bound receiver with credentials on.
    private static func receiver(_ directory: String) throws -> FileDescriptor {
        let receiver = try SystemCalls.datagramSocket().get()
        try SystemCalls.bindSocket(receiver, toSocketPath: directory + "/r.sock").get()
        try SystemCalls.enableCredentials(receiver).get()
        // Room for several large datagrams at once.
        try SystemCalls.setBufferSize(receiver, send: false, bytes: 4 << 20).get()
        return receiver
    }

    /// Sends datagram `index` of each length, in order, from a socket
    /// connected to the receiver.
    private static func send(_ lengths: [Int], to directory: String) throws {
        let sender = try SystemCalls.datagramSocket().get()
        try SystemCalls.connectSocket(sender, toSocketPath: directory + "/r.sock").get()
        try SystemCalls.setBufferSize(sender, send: true, bytes: 4 << 20).get()
        for (index, length) in lengths.enumerated() {
            let bytes = datagram(index, length: length)
            _ = try bytes.withUnsafeBytes { try SystemCalls.sendDatagram(sender, $0).get() }
        }
    }

    private static func datagram(_ index: Int, length: Int) -> [UInt8] {
        (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) }
    }

    @Test("each datagram of a batch lands whole in its own slot, with its sender, and a short batch means drained")
    func slotsAndCredentials() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let receiver = try Self.receiver(directory)
        let slotLength = 100_001
        // Sizes around a page and past 64 KiB, so neighbours would show a
        // wrong offset; 9, as a socket queues at most 10 by default.
        let lengths = [1, 4_095, 4_097, 70_000, 100_001, 17, 65_536, 3, 1_000]
        try Self.send(lengths, to: directory)
        let batch = DatagramBatch(slots: 8, slotLength: slotLength)
        var received: [[UInt8]] = []
        var counts: [Int] = []
        while case .success(let count) = batch.receive(receiver) {
            counts.append(count)
            for index in 0..<count {
                let datagram = batch.datagram(index)
                #expect(!datagram.truncated)
                #expect(datagram.senderProcessID == SystemProcess.id)
                #expect(datagram.senderUserID == SystemProcess.userID)
                received.append(Array(batch.bytes(index)))
                batch.shrink(index)
            }
            if DatagramBatch.drainsInOneCall, count < batch.slots { break }
        }
        #expect(received.count == lengths.count)
        for (index, length) in lengths.enumerated() where index < received.count {
            #expect(received[index] == Self.datagram(index, length: length), "datagram \(index)")
        }
        if DatagramBatch.drainsInOneCall {
            // Eight in one call, then the one left: fewer than a batch, so no third call.
            #expect(counts == [8, 1])
        }
        guard case .failure(let error) = batch.receive(receiver) else {
            Issue.record("a receive after the socket was drained took something")
            return
        }
        #expect(error == .wouldBlock)
    }

    @Test("a datagram longer than its slot is marked truncated, and its neighbours are intact")
    func truncation() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeDirectory(directory) }
        let receiver = try Self.receiver(directory)
        try Self.send([10, 5_000, 10], to: directory)
        let batch = DatagramBatch(slots: 4, slotLength: 4_096)
        let count = try batch.receive(receiver).get()
        #expect(count == 3)
        #expect(!batch.datagram(0).truncated)
        #expect(batch.datagram(1).truncated)
        #expect(batch.datagram(1).length == 4_096)
        #expect(!batch.datagram(2).truncated)
        #expect(Array(batch.bytes(2)) == Self.datagram(2, length: 10))
    }
}
