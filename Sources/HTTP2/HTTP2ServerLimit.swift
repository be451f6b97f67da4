/// One of the limits of `HTTP2ServerLimits`, by the name used as the `limit` label of
/// `push_http2_server_limit_breaches_total` (docs/http2-server-limits.md).
public struct HTTP2ServerLimit: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The label value, such as `header_list_size`.
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// A header block decoded to more than `maxHeaderListBytes`: 431 / RESOURCE_EXHAUSTED.
    public static let headerListSize = HTTP2ServerLimit(rawValue: "header_list_size")
    /// A request body over `maxRequestBodyBytes`: 413 / RESOURCE_EXHAUSTED.
    public static let requestBodySize = HTTP2ServerLimit(rawValue: "request_body_size")
    /// A request body without progress for `requestBodyTimeout`: 408 / DEADLINE_EXCEEDED.
    public static let requestBodyTimeout = HTTP2ServerLimit(rawValue: "request_body_timeout")
    /// A TLS handshake longer than `handshakeTimeout`: the socket is closed.
    public static let handshakeTimeout = HTTP2ServerLimit(rawValue: "handshake_timeout")
    /// A connection without streams for `idleTimeout`: GOAWAY NO_ERROR.
    public static let idleTimeout = HTTP2ServerLimit(rawValue: "idle_timeout")
    /// A connection evicted (GOAWAY NO_ERROR) or refused (closed) at `maxConnections`.
    public static let maxConnections = HTTP2ServerLimit(rawValue: "max_connections")
    /// A stream refused (RST_STREAM REFUSED_STREAM) above SETTINGS_MAX_CONCURRENT_STREAMS.
    public static let maxConcurrentStreams = HTTP2ServerLimit(rawValue: "max_concurrent_streams")
    /// accept(2) failed for lack of file descriptors; accepting pauses briefly.
    public static let fileDescriptors = HTTP2ServerLimit(rawValue: "file_descriptors")

    /// Every limit, in the order above.
    public static let all: [HTTP2ServerLimit] = [
        .headerListSize, .requestBodySize, .requestBodyTimeout, .handshakeTimeout, .idleTimeout, .maxConnections,
        .maxConcurrentStreams, .fileDescriptors,
    ]

    public var description: String { rawValue }
}

/// A request the server answered itself because it passed a per-request limit (header list, body
/// size, body progress); the handler never sees it.
public struct HTTP2ServerLimitBreach: Sendable, Hashable, CustomStringConvertible {
    /// Which limit: `.headerListSize`, `.requestBodySize` or `.requestBodyTimeout`.
    public var limit: HTTP2ServerLimit
    /// What happened, for the peer and the log (no header values, no body bytes).
    public var message: String

    /// Creates a breach.
    public init(limit: HTTP2ServerLimit, message: String) {
        self.limit = limit
        self.message = message
    }

    /// The HTTP status for the limit: 431 (RFC 6585 §5), 413 (RFC 9110 §15.5.14), 408 (RFC 9110 §15.5.9).
    public var httpStatus: Int {
        switch limit {
        case .headerListSize: 431
        case .requestBodySize: 413
        case .requestBodyTimeout: 408
        default: 400
        }
    }

    public var description: String { "\(limit): \(message)" }

    /// The answer of a plain HTTP/2 server: `httpStatus` with the message as `text/plain`.
    /// `HTTP2Server.Configuration.limitResponse` defaults to it; a gRPC server answers gRPC calls its own way.
    public static let defaultResponse: @Sendable (HTTP2ServerLimitBreach, HTTP2ServerRequest) -> HTTP2ServerResponse = { breach, _ in
        HTTP2ServerResponse(
            status: breach.httpStatus, headers: [HTTP2Header("content-type", "text/plain; charset=utf-8")],
            body: Array((breach.message + "\n").utf8))
    }
}
