/// A complete request (HEADERS, DATA, optional trailers, END_STREAM) received by an `HTTP2Server`.
public struct HTTP2ServerRequest: Sendable {
    /// The `:method` pseudo-header.
    public var method: String
    /// The `:path` pseudo-header (path and query).
    public var path: String
    /// The `:authority` pseudo-header, if sent.
    public var authority: String?
    /// The `:scheme` pseudo-header, if sent.
    public var scheme: String?
    /// Regular header fields in the order received, duplicates preserved (no pseudo-headers).
    public var headers: [HTTP2Header]
    /// The concatenated DATA payload (bytes).
    public var body: [UInt8]
    /// Fields of a trailing HEADERS frame, empty when there was none.
    public var trailers: [HTTP2Header]
    /// The client-initiated stream id (odd).
    public var streamID: Int32
    /// The connection the request arrived on: id, peer certificate, and controls (GOAWAY, drop, SETTINGS).
    public var connection: HTTP2ServerConnection
}

/// A response for `HTTP2Responder.respond(_:)`.
public struct HTTP2ServerResponse: Sendable {
    /// The `:status` (for example 200).
    public var status: Int
    /// Header fields in order (lowercase names; uppercase ASCII is lowercased).
    public var headers: [HTTP2Header]
    /// The body (bytes); empty sends no DATA frame unless `trailers` is set.
    public var body: [UInt8]
    /// Trailer fields sent in a final HEADERS frame with END_STREAM (`nghttp2_submit_trailer`);
    /// `nil` ends the stream with the last DATA (or with the HEADERS when the body is empty).
    public var trailers: [HTTP2Header]?

    /// Creates a response.
    public init(status: Int, headers: [HTTP2Header] = [], body: [UInt8] = [], trailers: [HTTP2Header]? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.trailers = trailers
    }
}

/// Completes one request stream. Call `respond` (or `reset`) at most once; later calls are ignored, as
/// are calls after the stream or connection closed. Not answering at all leaves the stream open
/// (until the client resets it or the connection closes); nothing is sent automatically.
///
/// Thread-safety: callable from any thread or task. Called on the connection's own thread (inside the
/// `HTTP2Server.Handler`), the response is submitted immediately with no thread hop; from elsewhere it
/// is handed to the connection's thread through its queue.
public struct HTTP2Responder: Sendable {
    let core: ServerCore
    let stream: ServerStream

    /// Sends `response` on the stream.
    public func respond(_ response: HTTP2ServerResponse) {
        if core.loop.inLoop {
            core.respond(stream, response)
        } else {
            let core = self.core
            let stream = self.stream
            core.loop.execute { core.respond(stream, response) }
        }
    }

    /// Sends a response built from its parts.
    public func respond(status: Int, headers: [HTTP2Header] = [], body: [UInt8] = [], trailers: [HTTP2Header]? = nil) {
        respond(HTTP2ServerResponse(status: status, headers: headers, body: body, trailers: trailers))
    }

    /// Starts a streaming response (for example a gRPC server-streaming call): sends the HEADERS
    /// now; the body follows with `send(_:)` and ends with `finish(trailers:)`. Use instead of
    /// `respond`, at most once.
    public func startStreaming(status: Int, headers: [HTTP2Header]) {
        onLoop { core, stream in core.startStreaming(stream, status: status, headers: headers) }
    }

    /// Sends `bytes` as DATA on a stream started with `startStreaming` (ignored after the stream closed).
    public func send(_ bytes: [UInt8]) {
        onLoop { core, stream in core.sendData(stream, bytes) }
    }

    /// Ends a stream started with `startStreaming` with `trailers` (END_STREAM).
    public func finish(trailers: [HTTP2Header]) {
        onLoop { core, stream in core.finishStreaming(stream, trailers: trailers) }
    }

    /// Calls `callback` once, on the connection's thread, when the stream closes for any reason
    /// (the response ended, the client reset it, the connection closed); at once if it already has.
    /// Long-lived responses use it to stop their producer when the client goes away.
    public func onClose(_ callback: @escaping @Sendable () -> Void) {
        onLoop { core, stream in core.onClose(stream, callback) }
    }

    private func onLoop(_ body: @escaping @Sendable (ServerCore, ServerStream) -> Void) {
        let core = self.core
        let stream = self.stream
        if core.loop.inLoop { body(core, stream) } else { core.loop.execute { body(core, stream) } }
    }

    /// Resets the stream with RST_STREAM carrying `code` (RFC 9113 §6.4) instead of answering.
    public func reset(_ code: HTTP2ErrorCode = .cancel) {
        let core = self.core
        let stream = self.stream
        if core.loop.inLoop { core.reset(stream, code) } else { core.loop.execute { core.reset(stream, code) } }
    }
}
