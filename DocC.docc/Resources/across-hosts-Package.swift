// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "Jobs",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../TypedNotifications")
    ],
    targets: [
        .executableTarget(
            name: "Jobs",
            dependencies: [
                .product(name: "TypedNotifications", package: "TypedNotifications"),
                .product(name: "TypedNotificationsRedis", package: "TypedNotifications"),
            ]
        )
    ]
)
