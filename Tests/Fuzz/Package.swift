// swift-tools-version: 6.0
// The fuzz targets, in a package of their own so the main package never links
// libFuzzer. Build and run them with `Tests/Fuzz/run`.
import PackageDescription

let package = Package(
    name: "TypedNotificationsFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "TypedNotifications", path: "../..")],
    targets: [
        .executableTarget(
            name: "FuzzEnvelope",
            dependencies: [.product(name: "TypedNotifications", package: "TypedNotifications")],
            path: "FuzzEnvelope"
        ),
        .executableTarget(
            name: "FuzzSequenceGaps",
            dependencies: [.product(name: "TypedNotifications", package: "TypedNotifications")],
            path: "FuzzSequenceGaps"
        ),
    ],
    swiftLanguageModes: [.v6]
)
