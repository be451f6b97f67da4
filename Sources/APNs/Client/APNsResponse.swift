import HTTP2

/// APNs's answer to one device push (docs/apns-protocol.md §3).
public struct APNsResponse: Sendable, Hashable {
    /// `:status`: 200 on success.
    public var status: Int
    /// The `apns-id` header: the request's or the one APNs generated.
    public var apnsID: String?
    /// The `apns-unique-id` header (sandbox only).
    public var apnsUniqueID: String?
    /// Apple's reason on an error; nil on success.
    public var reason: APNsReason?
    /// For 410: when Apple confirmed the token invalid, ms since the UNIX epoch.
    public var timestampMilliseconds: Int64?
    /// The `date` header (RFC 9110 §6.6.1, IMF-fixdate) in seconds since the UNIX epoch, when present
    /// and well-formed: the server's clock, used to tell clock skew behind provider-token faults.
    public var date: Int64?
    /// How many times `APNsClient` sent the notification to get this answer (1 when the first try
    /// was final). Streams APNs provably did not process (above a GOAWAY's last-stream-id, or
    /// refused) are not attempts; they are counted in ``unprocessedResends``.
    public var attempts: Int = 1
    /// How many times the notification was sent again because APNs did not process it (GOAWAY,
    /// REFUSED_STREAM); never a failure.
    public var unprocessedResends: Int = 0

    /// True when APNs answered with a reason string this code does not know: a rejection plus an
    /// alert, never a retry (docs/apns-protocol.md §3).
    public var hasUnknownReason: Bool {
        if case .unknown? = reason { return true }
        return false
    }

    /// Whether APNs accepted the notification.
    public var isSuccess: Bool { status == 200 }

    /// What docs/semantics.md's retry rules say to do with this answer.
    public var action: APNsReasonAction { APNsReason.action(forStatus: status, reason: reason) }

    /// Builds the response from the HTTP/2 answer; an error body that is not Apple's JSON keeps
    /// `reason` nil (an unknown shape is never a crash).
    public init(status: Int, headers: [HTTP2Header], body: [UInt8]) {
        self.status = status
        self.apnsID = headers.first("apns-id")
        self.apnsUniqueID = headers.first("apns-unique-id")
        if status != 200, let text = headers.first("date") { self.date = HTTPDate.parse(text) }
        if status != 200, !body.isEmpty {
            let error = APNsErrorResponse(parsing: body)
            self.reason = error.reason
            self.timestampMilliseconds = error.timestampMilliseconds
        }
    }
}
