// swift-tools-version: 6.2
import PackageDescription

let package = Package(
    name: "TypedNotifications",
    // Swift 6.2 is the oldest toolchain that builds it: `weak let` (SE-0481)
    // holds a handler's actor. Synchronization's Mutex and Atomic need these
    // releases on Apple platforms; nothing newer is called (CI type-checks
    // every target against them, see .ci/check-apple).
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "TypedNotifications", targets: ["TypedNotifications"]),
        // Across hosts, through a Redis (or Valkey) server; still no package dependencies.
        .library(name: "TypedNotificationsRedis", targets: ["TypedNotificationsRedis"]),
        .executable(name: "tnotify", targets: ["tnotify"]),
        // Hubs of one process with every notification carried as its envelope:
        // for tests that a payload type survives the wire format.
        .library(name: "EnvelopeLoopback", targets: ["EnvelopeLoopback"]),
        // For writing a transport of your own: the part of the platform layer
        // a driver runs on (its event loop, lock, clock, stream sockets and
        // errno values), as SPI only: `@_spi(TransportAuthoring) import
        // NotificationPlatform`. Its other system calls stay package-only.
        .library(name: "NotificationPlatform", targets: ["NotificationPlatform"]),
    ],
    targets: [
        // Only what Swift cannot reach: the CMSG_* macros and struct sockaddr_un.
        .target(name: "CTypedNotifications", path: "Sources/CTypedNotifications"),
        // CRC-32C in hardware where the processor can, in software elsewhere.
        .target(name: "CChecksum", path: "Sources/CChecksum"),
        // The only module that calls the operating system.
        .target(name: "NotificationPlatform", dependencies: ["CTypedNotifications"], path: "Sources/Platform"),
        .target(
            name: "TypedNotifications",
            dependencies: ["NotificationPlatform", "CChecksum"],
            path: "Sources/TypedNotifications"
        ),
        // The Redis Streams transport: RESP over the platform layer's TCP and Unix sockets.
        .target(
            name: "TypedNotificationsRedis",
            dependencies: ["TypedNotifications", "NotificationPlatform"],
            path: "Sources/TypedNotificationsRedis"
        ),
        // EnvelopeLoopbackTransport, also the worked example of the *Writing a
        // transport* article: a driver built on the TransportAuthoring SPI
        // alone (CI compiles it as another package would, .ci/check-authoring).
        .target(
            name: "EnvelopeLoopback",
            dependencies: ["TypedNotifications", "NotificationPlatform"],
            path: "Sources/EnvelopeLoopback"
        ),
        // The one list of transports that tnotify, the test helper, the
        // tests and the benchmark read: a new transport is one entry here.
        .target(
            name: "TransportCatalog",
            dependencies: [
                "TypedNotifications", "TypedNotificationsRedis", "EnvelopeLoopback", "NotificationPlatform",
            ],
            path: "Sources/TransportCatalog"
        ),
        .executableTarget(
            name: "tnotify",
            dependencies: [
                "TypedNotifications", "TypedNotificationsRedis", "NotificationPlatform", "TransportCatalog",
            ],
            path: "Sources/tnotify"
        ),
        // Started by the tests as observer and poster processes.
        .executableTarget(
            name: "tnotify-test-helper",
            dependencies: [
                "TypedNotifications", "TypedNotificationsRedis", "NotificationPlatform", "TransportCatalog",
            ],
            path: "Sources/TestHelper"
        ),
        // Counts heap allocations for the benchmark; never linked into the library.
        .target(name: "AllocationCounter", path: "Benchmarks/AllocationCounter"),
        // Starts the benchmark's own processes; never linked into the library.
        .target(name: "CBenchmarkSupport", path: "Benchmarks/CBenchmarkSupport"),
        .executableTarget(
            name: "TypedNotificationsBenchmark",
            dependencies: [
                "TypedNotifications", "TypedNotificationsRedis", "NotificationPlatform", "CTypedNotifications",
                "AllocationCounter", "CBenchmarkSupport", "TransportCatalog",
            ],
            path: "Benchmarks/TypedNotificationsBenchmark"
        ),
        .testTarget(
            name: "TypedNotificationsTests",
            dependencies: [
                "TypedNotifications", "TypedNotificationsRedis", "NotificationPlatform", "CTypedNotifications",
                "CChecksum", "tnotify-test-helper", "tnotify", "TypedNotificationsBenchmark", "TransportCatalog",
                "EnvelopeLoopback",
            ],
            path: "Tests/TypedNotificationsTests",
            // Read at run time through #filePath; generate.py wrote them.
            exclude: ["Envelope/Golden"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
