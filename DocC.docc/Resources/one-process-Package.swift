// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "Downloads",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../TypedNotifications")
    ],
    targets: [
        .executableTarget(
            name: "Downloads",
            dependencies: [.product(name: "TypedNotifications", package: "TypedNotifications")]
        )
    ]
)
