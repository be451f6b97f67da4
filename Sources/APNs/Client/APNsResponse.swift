import HTTP2

/// APNs's answer to one device push (apns-reference.md §3).
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

    /// Whether APNs accepted the notification.
    public var isSuccess: Bool { status == 200 }

    /// What DESIGN.md's retry rules say to do with this answer.
    public var action: APNsReasonAction { APNsReason.action(forStatus: status, reason: reason) }

    /// Builds the response from the HTTP/2 answer; an error body that is not Apple's JSON keeps
    /// `reason` nil (an unknown shape is never a crash).
    public init(status: Int, headers: [HTTP2Header], body: [UInt8]) {
        self.status = status
        self.apnsID = headers.first("apns-id")
        self.apnsUniqueID = headers.first("apns-unique-id")
        if status != 200, !body.isEmpty {
            let error = APNsErrorResponse(parsing: body)
            self.reason = error.reason
            self.timestampMilliseconds = error.timestampMilliseconds
        }
    }
}
