import PushDomain
/// One device push as it goes to APNs: `POST /3/device/<token>` with the `apns-*` headers and the
/// payload's exact bytes (docs/apns-protocol.md §2).
///
/// The payload is kept as the caller's bytes and never re-serialized (docs/stack-notes.md); size limits count
/// those bytes. Check a request with ``APNsNotificationValidator`` before sending it.
public struct APNsRequest: Hashable, Sendable {
    /// The target token; goes into `:path`.
    public var deviceToken: DeviceToken
    /// `apns-topic`: the bundle ID plus the push type's suffix (``APNsPushType/topic(forBundleID:)``).
    public var topic: String
    /// `apns-push-type`; always sent.
    public var pushType: APNsPushType
    /// `apns-priority`; `nil` means the push type's default (5 for background, else 10), which is
    /// still sent explicitly.
    public var priority: APNsPriority?
    /// `apns-expiration`: omitted, `0` or seconds since the epoch.
    public var expiration: APNsExpiration
    /// `apns-collapse-id`, at most 64 UTF-8 bytes.
    public var collapseID: String?
    /// `apns-id`; APNs generates one when absent.
    public var apnsID: APNsID?
    /// The JSON body, byte for byte as sent.
    public var payload: [UInt8]

    /// Creates a request; nothing is checked here (see ``APNsNotificationValidator``).
    public init(
        deviceToken: DeviceToken, topic: String, pushType: APNsPushType, priority: APNsPriority? = nil,
        expiration: APNsExpiration = .omitted, collapseID: String? = nil, apnsID: APNsID? = nil, payload: [UInt8]
    ) {
        self.deviceToken = deviceToken
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.apnsID = apnsID
        self.payload = payload
    }

    /// The priority sent: ``priority`` or the push type's ``APNsPushType/defaultPriority``.
    public var effectivePriority: APNsPriority { priority ?? pushType.defaultPriority }

    /// `:path`, `/3/device/<lowercase hex token>`.
    public var path: String { "/3/device/" + deviceToken.hex }

    /// The token kind the target must be (`.pushToStart` for a Live Activity `event: start`).
    public var requiredTokenKind: APNsTokenKind { pushType.tokenKind(forPayload: payload) }

    /// Headers whose values change with every request; an HPACK encoder should not index them
    /// (docs/apns-protocol.md §1 "HPACK": never index `:path` or `apns-id`).
    public static let headersNotToIndex: Set<String> = [":path", "apns-id", "apns-expiration", "apns-collapse-id"]

    /// The HTTP/2 header list, in this order: `:method POST`, `:path`, `apns-topic`, `apns-push-type`,
    /// `apns-priority` (always, the effective value), `apns-expiration` (only when not omitted),
    /// `apns-collapse-id` and `apns-id` (only when set), `authorization: bearer <JWT>` (token auth only).
    /// `:scheme` and `:authority` belong to the connection and are added by the HTTP/2 client.
    /// - Parameter providerToken: the JWT for token authentication, `nil` for certificate authentication.
    public func headers(providerToken: APNsJWT? = nil) -> [(name: String, value: String)] {
        var headers: [(name: String, value: String)] = [
            (":method", "POST"),
            (":path", path),
            ("apns-topic", topic),
            ("apns-push-type", pushType.rawValue),
            ("apns-priority", effectivePriority.description),
        ]
        if let value = expiration.headerValue { headers.append(("apns-expiration", value)) }
        if let collapseID { headers.append(("apns-collapse-id", collapseID)) }
        if let apnsID { headers.append(("apns-id", apnsID.uuidString)) }
        if let providerToken { headers.append(("authorization", "bearer " + providerToken.token)) }
        return headers
    }
}
