import ServiceCore

/// What one `HTTP2Server` lets any peer make it hold: header-list and body bytes, connections, and
/// time. Each limit, its default, what the peer sees and why: docs/http2-server-limits.md.
///
/// The flow-control windows and SETTINGS_MAX_CONCURRENT_STREAMS are SETTINGS and live in
/// `HTTP2Settings` (`HTTP2Settings.server` holds the server defaults); `apply(environment:to:)` reads
/// both from the environment.
public struct HTTP2ServerLimits: Sendable, Equatable {
    /// Largest decoded header list of one header block (request headers, or trailers), in bytes,
    /// counted as name + value + 32 per field (RFC 9113 §6.5.2). Past it the server stops storing
    /// fields and answers 431 (gRPC: RESOURCE_EXHAUSTED). Also announced as
    /// SETTINGS_MAX_HEADER_LIST_SIZE unless `HTTP2Settings.maxHeaderListSize` is smaller.
    /// Default 16,384 (`PUSH_HTTP2_MAX_HEADER_LIST_BYTES`).
    public var maxHeaderListBytes: Int = 16 << 10
    /// Largest request body accepted, in bytes; a larger one is answered 413 (gRPC:
    /// RESOURCE_EXHAUSTED) as soon as it passes the limit, what arrived is dropped, the rest is read
    /// and dropped for up to `requestBodyTimeout`, then the stream is reset with NO_ERROR. The
    /// connection window opened is at least this plus 16 KiB, so that a body over the limit can
    /// always arrive far enough to be refused (with a window of exactly the limit it would stall).
    /// Default 1 MiB.
    public var maxRequestBodyBytes: Int = 1 << 20
    /// Connections held at once, handshaking included. At the limit a new connection closes the
    /// longest-idle one (GOAWAY NO_ERROR); when none is idle, the new one is closed at once.
    /// Default 1,024 (`PUSH_HTTP2_MAX_CONNECTIONS`).
    public var maxConnections: Int = 1_024
    /// How long the TLS handshake may take from accept; then the socket is closed.
    /// Default 10 seconds (`PUSH_HTTP2_HANDSHAKE_TIMEOUT_MS`).
    public var handshakeTimeout: Duration = .seconds(10)
    /// How long a connection may stay without open streams; then GOAWAY NO_ERROR and close.
    /// Default 120 seconds (`PUSH_HTTP2_IDLE_TIMEOUT_MS`).
    public var idleTimeout: Duration = .seconds(120)
    /// How long a request body may go without advancing by `requestBodyMinimumProgressBytes` (or
    /// ending), counted from its HEADERS; then 408 (gRPC: DEADLINE_EXCEEDED) and RST_STREAM NO_ERROR.
    /// Default 10 seconds (`PUSH_HTTP2_REQUEST_BODY_TIMEOUT_MS`).
    public var requestBodyTimeout: Duration = .seconds(10)
    /// Bytes a request body must gain within `requestBodyTimeout` to count as progress.
    /// Default 1,024 (`PUSH_HTTP2_REQUEST_BODY_MIN_PROGRESS_BYTES`).
    public var requestBodyMinimumProgressBytes: Int = 1_024

    /// The defaults listed on each property.
    public init() {}

    /// Checks the limits against each other and against `settings`.
    /// - Throws: `HTTP2Error` `.invalidConfiguration` naming the value that is out of range.
    public func validate(settings: HTTP2Settings) throws(HTTP2Error) {
        func require(_ condition: Bool, _ message: @autoclosure () -> String) throws(HTTP2Error) {
            if !condition { throw HTTP2Error(.invalidConfiguration, message()) }
        }
        try require(maxHeaderListBytes >= 1_024 && maxHeaderListBytes <= Int(UInt32.max), "maxHeaderListBytes must be between 1024 and 2^32-1, got \(maxHeaderListBytes)")
        try require(maxConnections >= 1, "maxConnections must be at least 1, got \(maxConnections)")
        try require(handshakeTimeout > .zero, "handshakeTimeout must be positive, got \(handshakeTimeout)")
        try require(idleTimeout > .zero, "idleTimeout must be positive, got \(idleTimeout)")
        try require(requestBodyTimeout > .zero, "requestBodyTimeout must be positive, got \(requestBodyTimeout)")
        try require(requestBodyMinimumProgressBytes >= 1, "requestBodyMinimumProgressBytes must be at least 1, got \(requestBodyMinimumProgressBytes)")
        try require(maxRequestBodyBytes >= 0, "maxRequestBodyBytes must not be negative, got \(maxRequestBodyBytes)")
        try require(settings.maxConcurrentStreams >= 1, "SETTINGS_MAX_CONCURRENT_STREAMS must be at least 1")
        try require(settings.initialWindowSize <= HTTP2Settings.maxWindowSize, "SETTINGS_INITIAL_WINDOW_SIZE must be at most 2^31-1 (RFC 9113 §6.5.2), got \(settings.initialWindowSize)")
        try require(settings.connectionWindowSize <= HTTP2Settings.maxWindowSize, "the connection window must be at most 2^31-1, got \(settings.connectionWindowSize)")
        try require(settings.maxFrameSize >= 16_384 && settings.maxFrameSize <= 16_777_215, "SETTINGS_MAX_FRAME_SIZE must be 16384...16777215 (RFC 9113 §6.5.2), got \(settings.maxFrameSize)")
        try require(maxRequestBodyBytes <= Int(HTTP2Settings.maxWindowSize) - Self.refusalMargin,
                    "maxRequestBodyBytes must be at most 2^31-1 - 16384, got \(maxRequestBodyBytes)")
    }

    /// Bytes of connection window beyond `maxRequestBodyBytes`: room for the frame that passes the limit.
    static let refusalMargin = 16 << 10

    /// The connection receive window the server opens with `settings`: `connectionWindowSize` (at
    /// least 65,535), raised to `maxRequestBodyBytes` + 16 KiB when that is larger.
    public func connectionWindow(for settings: HTTP2Settings) -> Int {
        max(settings.effectiveConnectionWindowSize, min(Int(HTTP2Settings.maxWindowSize), maxRequestBodyBytes + Self.refusalMargin))
    }

    /// Reads the `PUSH_HTTP2_*` variables into `limits` and `settings` (unset ones keep their value):
    /// `PUSH_HTTP2_MAX_HEADER_LIST_BYTES`, `PUSH_HTTP2_MAX_CONNECTIONS`, `PUSH_HTTP2_HANDSHAKE_TIMEOUT_MS`,
    /// `PUSH_HTTP2_IDLE_TIMEOUT_MS`, `PUSH_HTTP2_REQUEST_BODY_TIMEOUT_MS`,
    /// `PUSH_HTTP2_REQUEST_BODY_MIN_PROGRESS_BYTES`, `PUSH_HTTP2_MAX_CONCURRENT_STREAMS`,
    /// `PUSH_HTTP2_STREAM_WINDOW_BYTES`, `PUSH_HTTP2_CONNECTION_WINDOW_BYTES`. SETTINGS_MAX_HEADER_LIST_SIZE
    /// is set to the header-list limit.
    /// - Throws: `EnvironmentConfig.Error` naming the variable that is not a number in its range.
    public static func apply(environment env: EnvironmentConfig, to limits: inout HTTP2ServerLimits, settings: inout HTTP2Settings) throws {
        let window = Int(HTTP2Settings.maxWindowSize)
        limits.maxHeaderListBytes = try env.int("PUSH_HTTP2_MAX_HEADER_LIST_BYTES", default: limits.maxHeaderListBytes, in: 1_024...Int(UInt32.max))
        limits.maxConnections = try env.int("PUSH_HTTP2_MAX_CONNECTIONS", default: limits.maxConnections, in: 1...Int.max)
        limits.handshakeTimeout = try positiveMilliseconds(env, "PUSH_HTTP2_HANDSHAKE_TIMEOUT_MS", limits.handshakeTimeout)
        limits.idleTimeout = try positiveMilliseconds(env, "PUSH_HTTP2_IDLE_TIMEOUT_MS", limits.idleTimeout)
        limits.requestBodyTimeout = try positiveMilliseconds(env, "PUSH_HTTP2_REQUEST_BODY_TIMEOUT_MS", limits.requestBodyTimeout)
        limits.requestBodyMinimumProgressBytes = try env.int(
            "PUSH_HTTP2_REQUEST_BODY_MIN_PROGRESS_BYTES", default: limits.requestBodyMinimumProgressBytes, in: 1...Int.max)
        settings.maxConcurrentStreams = UInt32(try env.int(
            "PUSH_HTTP2_MAX_CONCURRENT_STREAMS", default: Int(settings.maxConcurrentStreams), in: 1...Int(UInt32.max)))
        settings.initialWindowSize = UInt32(try env.int("PUSH_HTTP2_STREAM_WINDOW_BYTES", default: Int(settings.initialWindowSize), in: 1...window))
        settings.connectionWindowSize = UInt32(try env.int(
            "PUSH_HTTP2_CONNECTION_WINDOW_BYTES", default: Int(settings.connectionWindowSize), in: 65_535...window))
        settings.maxHeaderListSize = UInt32(limits.maxHeaderListBytes)
    }

    private static func positiveMilliseconds(_ env: EnvironmentConfig, _ name: String, _ defaultValue: Duration) throws -> Duration {
        let value = try env.milliseconds(name, default: defaultValue)
        guard value > .zero else {
            try env.fail(name, "expected milliseconds > 0, got 0")
            return defaultValue
        }
        return value
    }
}
