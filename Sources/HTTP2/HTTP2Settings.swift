/// Local HTTP/2 SETTINGS this endpoint announces (RFC 9113 §6.5.2), plus the connection-level
/// receive window it opens with WINDOW_UPDATE.
public struct HTTP2Settings: Sendable, Equatable {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: how many streams the peer may open towards us. Default 100.
    public var maxConcurrentStreams: UInt32 = 100
    /// SETTINGS_INITIAL_WINDOW_SIZE in bytes for each stream's receive window. Default 1 MiB.
    public var initialWindowSize: UInt32 = 1 << 20
    /// Receive window of the whole connection in bytes (WINDOW_UPDATE on stream 0). Default 16 MiB.
    public var connectionWindowSize: UInt32 = 16 << 20
    /// SETTINGS_MAX_FRAME_SIZE in bytes (16,384 to 16,777,215). Default 16,384.
    public var maxFrameSize: UInt32 = 16_384
    /// SETTINGS_MAX_HEADER_LIST_SIZE in bytes, or `nil` to not announce one.
    public var maxHeaderListSize: UInt32? = nil
    /// SETTINGS_HEADER_TABLE_SIZE in bytes (HPACK dynamic table). Default 4,096.
    public var headerTableSize: UInt32 = 4_096

    /// The defaults listed on each property (a client's: large windows, no header-list limit).
    public init() {}

    /// A server's defaults (docs/http2-server-limits.md): 100 concurrent streams, a 64 KiB stream
    /// window, a 1 MiB connection window, and a 16 KiB header list, so that the request bytes a peer
    /// can make the server hold stay small.
    public static let server: HTTP2Settings = {
        var settings = HTTP2Settings()
        settings.maxConcurrentStreams = 100
        settings.initialWindowSize = 64 << 10
        settings.connectionWindowSize = 1 << 20
        settings.maxHeaderListSize = 16 << 10
        return settings
    }()

    /// Largest flow-control window (2^31-1 bytes, RFC 9113 §6.9.1).
    public static let maxWindowSize: UInt32 = 0x7FFF_FFFF

    /// The connection's receive window in bytes: `connectionWindowSize`, or the protocol's initial
    /// 65,535 when that is smaller (the window is only ever opened, never shrunk, at start).
    public var effectiveConnectionWindowSize: Int { max(65_535, Int(connectionWindowSize)) }
}

/// One SETTINGS parameter (RFC 9113 §6.5.2), for `HTTP2ServerConnection.submitSettings(_:)` and events.
public struct HTTP2Setting: Sendable, Hashable {
    /// Identifier of a SETTINGS parameter.
    public struct Identifier: RawRepresentable, Sendable, Hashable {
        public var rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        public static let headerTableSize = Identifier(rawValue: 0x1)
        public static let enablePush = Identifier(rawValue: 0x2)
        public static let maxConcurrentStreams = Identifier(rawValue: 0x3)
        public static let initialWindowSize = Identifier(rawValue: 0x4)
        public static let maxFrameSize = Identifier(rawValue: 0x5)
        public static let maxHeaderListSize = Identifier(rawValue: 0x6)
    }
    /// Which parameter.
    public var identifier: Identifier
    /// Its value.
    public var value: UInt32

    public init(_ identifier: Identifier, _ value: UInt32) {
        self.identifier = identifier
        self.value = value
    }
}
