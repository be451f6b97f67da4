/// A request sent by `HTTP2Connection.send(_:timeout:)`.
public struct HTTP2Request: Sendable {
    /// The `:method` pseudo-header, such as `GET` or `POST`.
    public var method: String
    /// The `:path` pseudo-header, such as `/3/device/<token>`.
    public var path: String
    /// The `:authority` pseudo-header; `nil` means the connection's `host[:port]`.
    public var authority: String?
    /// Regular header fields in order (no pseudo-headers).
    public var headers: [HTTP2Header]
    /// The request body (bytes); empty means no DATA frames.
    public var body: [UInt8]

    /// Creates a request.
    public init(method: String = "GET", path: String, authority: String? = nil, headers: [HTTP2Header] = [], body: [UInt8] = []) {
        self.method = method
        self.path = path
        self.authority = authority
        self.headers = headers
        self.body = body
    }
}

/// A complete response received by `HTTP2Connection.send(_:timeout:)`.
public struct HTTP2Response: Sendable {
    /// The `:status` pseudo-header (for example 200).
    public var status: Int
    /// Header fields of the response HEADERS in order, duplicates kept, without `:status`.
    public var headers: [HTTP2Header]
    /// The concatenated DATA payload (bytes).
    public var body: [UInt8]
    /// Fields of a trailing HEADERS frame (RFC 9113 §8.1), empty when there was none.
    public var trailers: [HTTP2Header]
    /// The stream the exchange used (odd, client-initiated).
    public var streamID: Int32

    /// Creates a response (tests, fakes).
    public init(status: Int, headers: [HTTP2Header] = [], body: [UInt8] = [], trailers: [HTTP2Header] = [], streamID: Int32 = 0) {
        self.status = status
        self.headers = headers
        self.body = body
        self.trailers = trailers
        self.streamID = streamID
    }
}
