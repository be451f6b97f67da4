/// The one error type of the HTTP2 module.
///
/// `code` says what failed; `isRetryable` says whether sending the same request again (on this or
/// another connection) is sound. Requests that fail with `.streamRefused` were provably not processed
/// by the peer (RFC 9113 §8.7: REFUSED_STREAM, or a stream above a GOAWAY's last-stream-id), so they
/// are safe to retry even when not idempotent.
public struct HTTP2Error: Error, CustomStringConvertible, Sendable {
    /// What failed. New codes may be added; switch with a `default`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Sendable {
            case connectFailed, tlsHandshakeFailed, certificateVerificationFailed, alpnNotNegotiated
            case protocolError, connectionClosed, goingAway, streamRefused, streamReset, timeout
            case cancelled, tooManyQueuedRequests, invalidRequest, bindFailed, invalidConfiguration
            case internalError
        }
        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// TCP connect or name resolution failed.
        public static let connectFailed = Code(.connectFailed)
        /// The TLS handshake failed for a reason other than certificate verification.
        public static let tlsHandshakeFailed = Code(.tlsHandshakeFailed)
        /// The peer's certificate did not verify against the CA, or did not match the host name / IP.
        public static let certificateVerificationFailed = Code(.certificateVerificationFailed)
        /// The server did not select `h2` through ALPN (RFC 9113 §3.2).
        public static let alpnNotNegotiated = Code(.alpnNotNegotiated)
        /// The peer violated HTTP/2, or nghttp2 reported a fatal session error.
        public static let protocolError = Code(.protocolError)
        /// The connection closed (or was dropped) before the request finished. The request may or may
        /// not have been processed.
        public static let connectionClosed = Code(.connectionClosed)
        /// The connection received or sent GOAWAY and starts no new streams; the request was not sent.
        public static let goingAway = Code(.goingAway)
        /// The peer refused the stream without processing it: RST_STREAM(REFUSED_STREAM) or a stream
        /// id above the last-stream-id of a GOAWAY (RFC 9113 §6.8, §8.7). Safe to retry.
        public static let streamRefused = Code(.streamRefused)
        /// The peer reset the stream with RST_STREAM (see `HTTP2Error.http2ErrorCode`).
        public static let streamReset = Code(.streamReset)
        /// The request's timeout elapsed; the stream was reset with CANCEL.
        public static let timeout = Code(.timeout)
        /// The calling task was cancelled; the stream was reset with CANCEL.
        public static let cancelled = Code(.cancelled)
        /// The connection's queue of requests waiting for a stream is full.
        public static let tooManyQueuedRequests = Code(.tooManyQueuedRequests)
        /// The request cannot be sent (bad header, nghttp2 refused to submit it).
        public static let invalidRequest = Code(.invalidRequest)
        /// The server could not bind or listen.
        public static let bindFailed = Code(.bindFailed)
        /// A TLS file could not be loaded or an option is invalid.
        public static let invalidConfiguration = Code(.invalidConfiguration)
        /// A system call failed unexpectedly.
        public static let internalError = Code(.internalError)

        public var description: String { value.rawValue }
    }

    /// What failed.
    public var code: Code
    /// A human-readable explanation; never contains secrets.
    public var message: String
    /// The HTTP/2 error code of a RST_STREAM or GOAWAY involved, if any.
    public var http2ErrorCode: HTTP2ErrorCode?
    /// The underlying error, if any.
    public var cause: (any Error)?

    /// Creates an error.
    public init(_ code: Code, _ message: String, http2ErrorCode: HTTP2ErrorCode? = nil, cause: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.http2ErrorCode = http2ErrorCode
        self.cause = cause
    }

    /// Whether sending the request again is reasonable: `.streamRefused` and `.goingAway` (never
    /// processed), `.connectionClosed`, `.connectFailed` and `.timeout` (may have been processed).
    public var isRetryable: Bool {
        switch code {
        case .streamRefused, .goingAway, .connectionClosed, .connectFailed, .timeout, .tooManyQueuedRequests: true
        case .streamReset: http2ErrorCode == .refusedStream
        default: false
        }
    }

    /// Whether the peer provably did not process the request (RFC 9113 §8.7).
    public var wasNotProcessed: Bool {
        code == .streamRefused || code == .goingAway || code == .tooManyQueuedRequests
    }

    public var description: String {
        var text = "HTTP2Error(\(code)): \(message)"
        if let http2ErrorCode { text += " [\(http2ErrorCode)]" }
        if let cause { text += " (cause: \(cause))" }
        return text
    }
}
