// swift-tools-version: 6.2
import PackageDescription

let package = Package(
    name: "TypedNotifications",
    // Swift 6.2 is the oldest toolchain that builds it: `weak let` (SE-0481)
    // holds a handler's actor. Synchronization's Mutex and Atomic need these
    // releases on Apple platforms; nothing newer is called (CI type-checks
    // every target against them, see .ci/check-apple).
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    // Every module a dependent's build can see is named TypedNotifications…
    // or CTypedNotifications…, so none collides with a module of another
    // package in the same graph.
    products: [
        // What an app imports: the umbrella re-exports the four local modules
        // below, so `import TypedNotifications` is all an app writes.
        .library(name: "TypedNotifications", targets: ["TypedNotifications"]),
        // Each layer on its own, for a dependent that wants only part: an
        // extension that posts through the file transport links neither the
        // socket transport nor the Foundation bridge.
        .library(name: "TypedNotificationsCore", targets: ["TypedNotificationsCore"]),
        .library(name: "TypedNotificationsSocket", targets: ["TypedNotificationsSocket"]),
        .library(name: "TypedNotificationsFile", targets: ["TypedNotificationsFile"]),
        .library(name: "TypedNotificationsFoundation", targets: ["TypedNotificationsFoundation"]),
        // Across hosts, through a Redis (or Valkey) server; still no package dependencies.
        .library(name: "TypedNotificationsRedis", targets: ["TypedNotificationsRedis"]),
        .executable(name: "tnotify", targets: ["tnotify"]),
        // Hubs of one process with every notification carried as its envelope:
        // for tests that a payload type survives the wire format.
        .library(name: "TypedNotificationsLoopback", targets: ["TypedNotificationsLoopback"]),
        // For writing a transport of your own: the part of the platform layer
        // a driver runs on (its event loop, lock, clock, stream sockets and
        // errno values), as SPI only: `@_spi(TransportAuthoring) import
        // TypedNotificationsPlatform`. Its other system calls stay package-only.
        .library(name: "TypedNotificationsPlatform", targets: ["TypedNotificationsPlatform"]),
    ],
    targets: [
        // Only what Swift cannot reach: the CMSG_* macros and struct sockaddr_un.
        .target(name: "CTypedNotifications", path: "Sources/CTypedNotifications"),
        // CRC-32C in hardware where the processor can, in software elsewhere.
        .target(name: "CTypedNotificationsChecksum", path: "Sources/CTypedNotificationsChecksum"),
        // The only module that calls the operating system: system calls and
        // their errors, the event loop, locks and clocks, and what more than
        // one transport uses (the path watcher, DirectoryMonitor, ChangeQueue,
        // ChangeSleeper, the shared directory's checks).
        .target(name: "TypedNotificationsPlatform", dependencies: ["CTypedNotifications"], path: "Sources/Platform"),
        // The core, which calls no file or socket itself: names, payloads,
        // the envelope, the center, the transport protocol and its skeleton,
        // and the in-process transport. Transports build on it, never on
        // each other.
        .target(
            name: "TypedNotificationsCore",
            dependencies: ["TypedNotificationsPlatform", "CTypedNotificationsChecksum"],
            path: "Sources/TypedNotificationsCore"
        ),
        // Unix datagram sockets between the processes of one host.
        .target(
            name: "TypedNotificationsSocket",
            dependencies: ["TypedNotificationsCore", "TypedNotificationsPlatform"],
            path: "Sources/TypedNotificationsSocket"
        ),
        // An append-only log per name in a shared directory, and a change signal.
        .target(
            name: "TypedNotificationsFile",
            dependencies: ["TypedNotificationsCore", "TypedNotificationsPlatform"],
            path: "Sources/TypedNotificationsFile"
        ),
        // Foundation's NotificationCenter as a typed center.
        .target(
            name: "TypedNotificationsFoundation",
            dependencies: ["TypedNotificationsCore", "TypedNotificationsPlatform"],
            path: "Sources/TypedNotificationsFoundation"
        ),
        // The umbrella: one import for all of the above, SPIs included.
        .target(
            name: "TypedNotifications",
            dependencies: [
                "TypedNotificationsCore", "TypedNotificationsSocket", "TypedNotificationsFile",
                "TypedNotificationsFoundation",
            ],
            path: "Sources/TypedNotifications"
        ),
        // The Redis Streams transport: RESP over the platform layer's TCP and Unix sockets.
        .target(
            name: "TypedNotificationsRedis",
            dependencies: ["TypedNotifications", "TypedNotificationsPlatform"],
            path: "Sources/TypedNotificationsRedis"
        ),
        // EnvelopeLoopbackTransport, also the worked example of the *Writing a
        // transport* article: a driver built on the TransportAuthoring SPI
        // alone (CI compiles it as another package would, .ci/check-authoring).
        .target(
            name: "TypedNotificationsLoopback",
            dependencies: ["TypedNotifications", "TypedNotificationsPlatform"],
            path: "Sources/TypedNotificationsLoopback"
        ),
        // The one list of transports that tnotify, the test helper, the
        // tests and the benchmark read: a new transport is one entry here.
        .target(
            name: "TypedNotificationsCatalog",
            dependencies: [
                "TypedNotifications", "TypedNotificationsRedis", "TypedNotificationsLoopback",
                "TypedNotificationsPlatform",
            ],
            path: "Sources/TypedNotificationsCatalog"
        ),
        .executableTarget(
            name: "tnotify",
            dependencies: [
                "TypedNotifications", "TypedNotificationsRedis", "TypedNotificationsPlatform",
                "TypedNotificationsCatalog",
            ],
            path: "Sources/tnotify"
        ),
        // Started by the tests as observer and poster processes.
        .executableTarget(
            name: "tnotify-test-helper",
            dependencies: [
                "TypedNotifications", "TypedNotificationsRedis", "TypedNotificationsPlatform",
                "TypedNotificationsCatalog",
            ],
            path: "Sources/TestHelper"
        ),
        // Counts heap allocations for the benchmark; never linked into the library.
        .target(
            name: "CTypedNotificationsAllocationCounter", path: "Benchmarks/CTypedNotificationsAllocationCounter"),
        // Starts the benchmark's own processes; never linked into the library.
        .target(
            name: "CTypedNotificationsBenchmarkSupport", path: "Benchmarks/CTypedNotificationsBenchmarkSupport"),
        .executableTarget(
            name: "TypedNotificationsBenchmark",
            dependencies: [
                "TypedNotifications", "TypedNotificationsRedis", "TypedNotificationsPlatform", "CTypedNotifications",
                "CTypedNotificationsAllocationCounter", "CTypedNotificationsBenchmarkSupport",
                "TypedNotificationsCatalog",
            ],
            path: "Benchmarks/TypedNotificationsBenchmark"
        ),
        .testTarget(
            name: "TypedNotificationsTests",
            dependencies: [
                "TypedNotifications", "TypedNotificationsRedis", "TypedNotificationsPlatform", "CTypedNotifications",
                "CTypedNotificationsChecksum", "tnotify-test-helper", "tnotify", "TypedNotificationsBenchmark",
                "TypedNotificationsCatalog",
                "TypedNotificationsLoopback",
            ],
            path: "Tests/TypedNotificationsTests",
            // Read at run time through #filePath; generate.py wrote them.
            exclude: ["Envelope/Golden"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
