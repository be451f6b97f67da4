import HTTP2
import ProtobufCodec

/// Apple's answer to one channel-management or broadcast request (docs/apns-protocol.md §8).
///
/// **An Apple refusal is an answer, never an error**: `status` and ``reason`` say what Apple said
/// (`400 ChannelNotRegistered`, `400 CannotCreateChannelConfig`, `413 PayloadTooLarge`, …), as
/// ``APNsResponse`` does for device pushes. `APNsClient` throws only when no answer came (see its
/// channel methods).
public struct APNsChannelAnswer: Sendable, Hashable {
    /// `:status`: 201 (created), 200 (read, list, broadcast accepted), 204 (deleted), or Apple's
    /// error status.
    public var status: Int
    /// Apple's reason on an error; nil on success.
    public var reason: APNsReason?
    /// The `apns-request-id` Apple echoed (the one sent, or one Apple made).
    public var apnsRequestID: String?
    /// The channel: Apple's new `apns-channel-id` for a create (201), the id read, deleted or
    /// broadcast to otherwise; nil for a list.
    public var channelID: String?
    /// A read's (200) `message-storage-policy`; nil otherwise or when the body did not say.
    public var messageStoragePolicy: APNsMessageStoragePolicy?
    /// A list's (200) channel ids (`{"channels":[…]}`), in Apple's order; empty otherwise.
    public var channelIDs: [String] = []
    /// A broadcast's (200) `apns-unique-id`: quote it in troubleshooting requests to Apple.
    public var apnsUniqueID: String?
    /// The `date` header in seconds since the UNIX epoch, on an error answer.
    public var date: Int64?
    /// How many times the request was sent to get this answer (streams Apple provably did not
    /// process are not counted). A broadcast is sent at most once.
    public var attempts: Int = 1

    /// Whether Apple did what was asked: 200, 201 or 204.
    public var isSuccess: Bool { status == 200 || status == 201 || status == 204 }

    /// Creates an answer from its parts.
    public init(status: Int, reason: APNsReason? = nil, apnsRequestID: String? = nil, channelID: String? = nil) {
        self.status = status
        self.reason = reason
        self.apnsRequestID = apnsRequestID
        self.channelID = channelID
    }

    /// Reads the HTTP/2 answer: `apns-request-id`, `apns-channel-id`, `apns-unique-id`, an error
    /// body's reason, a read's policy and a list's ids. A body that is not Apple's JSON leaves the
    /// fields nil (an unknown shape is never a crash).
    /// - Parameter channelID: the channel the request named, kept when the answer names none.
    public init(status: Int, headers: [HTTP2Header], body: [UInt8], channelID: String?) {
        self.init(status: status, apnsRequestID: headers.first("apns-request-id"), channelID: headers.first("apns-channel-id") ?? channelID)
        apnsUniqueID = headers.first("apns-unique-id")
        guard isSuccess else {
            if let text = headers.first("date") { date = HTTPDate.parse(text) }
            if !body.isEmpty { reason = APNsErrorResponse(parsing: body).reason }
            return
        }
        guard !body.isEmpty, case .object(let object)? = try? JSONValue(parsing: body) else { return }
        if let policy = object["message-storage-policy"]?.integerValue { messageStoragePolicy = APNsMessageStoragePolicy(rawValue: Int(policy)) }
        if case .array(let ids)? = object["channels"] {
            channelIDs = ids.compactMap { if case .string(let id) = $0 { id } else { nil } }
        }
    }
}
