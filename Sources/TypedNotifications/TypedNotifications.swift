// The umbrella: one `import TypedNotifications` gives an app the core (names,
// payloads, the envelope, the center, the transport protocol and the
// in-process transport), the socket and file transports and the Foundation
// bridge. Each is also a module and a product of its own. The SPIs are
// re-exported too, so `@_spi(TransportAuthoring) import TypedNotifications`
// reaches the authoring API as it did before the split.
@_spi(CenterAuthoring) @_spi(Checksums) @_spi(TransportAuthoring) @_exported import TypedNotificationsCore
@_spi(TransportAuthoring) @_exported import TypedNotificationsFile
@_exported import TypedNotificationsFoundation
@_spi(TransportAuthoring) @_exported import TypedNotificationsSocket
