/// Apple's reason string from an APNs error response body `{"reason":"…"}` for device pushes.
///
/// Raw values are Apple's exact strings (docs/apns-protocol.md §3, Apple's *Handling notification
/// responses from APNs*). Any other string is kept as `.unknown(_:)`; it never crashes anything and is
/// handled as a rejection plus an alert.
public enum APNsReason: Hashable, Sendable, RawRepresentable, CustomStringConvertible {
    /// 400: the collapse ID exceeds 64 bytes.
    case badCollapseId
    /// 400: the token is invalid or belongs to the other environment.
    case badDeviceToken
    /// 400: invalid `apns-expiration`.
    case badExpirationDate
    /// 400: invalid `apns-id`.
    case badMessageId
    /// 400: invalid `apns-priority`.
    case badPriority
    /// 400: invalid `apns-topic`.
    case badTopic
    /// 400: the token does not match the topic.
    case deviceTokenNotForTopic
    /// 400: a header was repeated.
    case duplicateHeaders
    /// 400: idle timeout (Apple gives no detail).
    case idleTimeout
    /// 400: invalid `apns-push-type`.
    case invalidPushType
    /// 400: no device token in `:path`.
    case missingDeviceToken
    /// 400: `apns-topic` required but missing.
    case missingTopic
    /// 400: empty body.
    case payloadEmpty
    /// 400: pushing to this topic is not allowed.
    case topicDisallowed
    /// 403: invalid certificate.
    case badCertificate
    /// 403: certificate for the other environment.
    case badCertificateEnvironment
    /// 403: the JWT's `iat` is more than one hour old.
    case expiredProviderToken
    /// 403: action not allowed.
    case forbidden
    /// 403: JWT invalid or its signature not verifiable.
    case invalidProviderToken
    /// 403: neither a certificate nor an `authorization` header.
    case missingProviderToken
    /// 403: key ID unrelated to the key of this connection's first push.
    case unrelatedKeyIdInToken
    /// 403: the key is restricted to the other environment.
    case badEnvironmentKeyIdInToken
    /// 403: the same as ``badEnvironmentKeyIdInToken`` in the spelling field reports also show
    /// (`BadEnvironmentKeyInToken`); kept apart so logs and metrics say what APNs said, with the same
    /// status, action and alert (see ``isWrongEnvironmentKey``).
    case badEnvironmentKeyInToken
    /// 404: invalid `:path`.
    case badPath
    /// 405: `:method` is not POST.
    case methodNotAllowed
    /// 410: the device token has expired.
    case expiredToken
    /// 410: the token is no longer active for the topic.
    case unregistered
    /// 413: body too large.
    case payloadTooLarge
    /// 429: the JWT changed more than once per 20 minutes on one connection.
    case tooManyProviderTokenUpdates
    /// 429: too many requests in a row to the same device token.
    case tooManyRequests
    /// 500: internal server error.
    case internalServerError
    /// 503: service unavailable.
    case serviceUnavailable
    /// 503: the server is shutting down.
    case shutdown
    /// 400 (channel management, broadcast): no `apns-channel-id` header.
    case missingChannelId
    /// 400 (channel management, broadcast): the `apns-channel-id` is not a channel id (not base64).
    case badChannelId
    /// 400 (channel management, broadcast): the channel does not exist for this app in this
    /// environment (never created, or deleted).
    case channelNotRegistered
    /// 400 (channel management, broadcast): broadcast is not enabled for the app.
    case featureNotEnabled
    /// 400 (channel management): the app has as many channels as Apple allows (10,000 per environment).
    case cannotCreateChannelConfig
    /// 400 (channel management): the body is not a valid channel configuration.
    case badRequestPayload
    /// 400 (broadcast): no `apns-push-type` header.
    case missingPushType
    /// A reason string this code does not know.
    case unknown(String)

    /// Every reason Apple documents for device pushes, in Apple's table order.
    public static let documented: [APNsReason] = [
        .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
        .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken,
        .missingTopic, .payloadEmpty, .topicDisallowed, .badCertificate, .badCertificateEnvironment,
        .expiredProviderToken, .forbidden, .invalidProviderToken, .missingProviderToken,
        .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .badPath, .methodNotAllowed, .expiredToken,
        .unregistered, .payloadTooLarge, .tooManyProviderTokenUpdates, .tooManyRequests,
        .internalServerError, .serviceUnavailable, .shutdown,
    ]

    /// Reasons APNs is reported to send that Apple's table spells otherwise: `BadEnvironmentKeyInToken`.
    public static let fieldSpellings: [APNsReason] = [.badEnvironmentKeyInToken]

    /// The reasons only the broadcast-channel APIs answer (channel management and broadcast,
    /// docs/apns-protocol.md §8; Apple's "Handling error responses from APNs"). They use the device
    /// push reasons too.
    public static let channelReasons: [APNsReason] = [
        .missingChannelId, .badChannelId, .channelNotRegistered, .featureNotEnabled, .cannotCreateChannelConfig,
        .badRequestPayload, .missingPushType,
    ]

    private static let byName: [String: APNsReason] = Dictionary(
        uniqueKeysWithValues: (documented + fieldSpellings + channelReasons).map { ($0.rawValue, $0) })

    /// 403 `BadEnvironmentKeyIdInToken` in either spelling: the key is restricted to the other environment.
    public var isWrongEnvironmentKey: Bool { self == .badEnvironmentKeyIdInToken || self == .badEnvironmentKeyInToken }

    /// Maps Apple's exact (case-sensitive) string; anything else becomes `.unknown(rawValue)`.
    public init(rawValue: String) {
        self = Self.byName[rawValue] ?? .unknown(rawValue)
    }

    /// Apple's exact string, e.g. `BadDeviceToken`.
    public var rawValue: String {
        switch self {
        case .badCollapseId: "BadCollapseId"
        case .badDeviceToken: "BadDeviceToken"
        case .badExpirationDate: "BadExpirationDate"
        case .badMessageId: "BadMessageId"
        case .badPriority: "BadPriority"
        case .badTopic: "BadTopic"
        case .deviceTokenNotForTopic: "DeviceTokenNotForTopic"
        case .duplicateHeaders: "DuplicateHeaders"
        case .idleTimeout: "IdleTimeout"
        case .invalidPushType: "InvalidPushType"
        case .missingDeviceToken: "MissingDeviceToken"
        case .missingTopic: "MissingTopic"
        case .payloadEmpty: "PayloadEmpty"
        case .topicDisallowed: "TopicDisallowed"
        case .badCertificate: "BadCertificate"
        case .badCertificateEnvironment: "BadCertificateEnvironment"
        case .expiredProviderToken: "ExpiredProviderToken"
        case .forbidden: "Forbidden"
        case .invalidProviderToken: "InvalidProviderToken"
        case .missingProviderToken: "MissingProviderToken"
        case .unrelatedKeyIdInToken: "UnrelatedKeyIdInToken"
        case .badEnvironmentKeyIdInToken: "BadEnvironmentKeyIdInToken"
        case .badEnvironmentKeyInToken: "BadEnvironmentKeyInToken"
        case .badPath: "BadPath"
        case .methodNotAllowed: "MethodNotAllowed"
        case .expiredToken: "ExpiredToken"
        case .unregistered: "Unregistered"
        case .payloadTooLarge: "PayloadTooLarge"
        case .tooManyProviderTokenUpdates: "TooManyProviderTokenUpdates"
        case .tooManyRequests: "TooManyRequests"
        case .internalServerError: "InternalServerError"
        case .serviceUnavailable: "ServiceUnavailable"
        case .shutdown: "Shutdown"
        case .missingChannelId: "MissingChannelId"
        case .badChannelId: "BadChannelId"
        case .channelNotRegistered: "ChannelNotRegistered"
        case .featureNotEnabled: "FeatureNotEnabled"
        case .cannotCreateChannelConfig: "CannotCreateChannelConfig"
        case .badRequestPayload: "BadRequestPayload"
        case .missingPushType: "MissingPushType"
        case .unknown(let text): text
        }
    }

    /// The HTTP `:status` Apple pairs with this reason; `nil` for `.unknown`.
    public var httpStatus: Int? {
        switch self {
        case .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
             .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken,
             .missingTopic, .payloadEmpty, .topicDisallowed, .missingChannelId, .badChannelId, .channelNotRegistered,
             .featureNotEnabled, .cannotCreateChannelConfig, .badRequestPayload, .missingPushType:
            400
        case .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden,
             .invalidProviderToken, .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken,
             .badEnvironmentKeyInToken:
            403
        case .badPath: 404
        case .methodNotAllowed: 405
        case .expiredToken, .unregistered: 410
        case .payloadTooLarge: 413
        case .tooManyProviderTokenUpdates, .tooManyRequests: 429
        case .internalServerError: 500
        case .serviceUnavailable, .shutdown: 503
        case .unknown: nil
        }
    }

    /// What the sender does about this reason (docs/semantics.md "Retries follow the reason"; the table in
    /// docs/apns-protocol.md §3 is normative). `BadDeviceToken` deactivates because the dispatcher always
    /// sends a token to its own stored environment; see ``mayMeanWrongEnvironment``.
    public var action: APNsReasonAction {
        switch self {
        case .unregistered, .expiredToken, .badDeviceToken: .deactivateToken
        case .internalServerError, .serviceUnavailable: .retryWithBackoff
        case .shutdown, .idleTimeout: .retryOnNewConnection
        case .expiredProviderToken: .refreshProviderTokenAndRetryOnce
        case .tooManyProviderTokenUpdates: .retryAfterDelayKeepingJWT
        case .tooManyRequests: .backOffDeviceToken
        default: .reject
        }
    }

    /// True for `BadDeviceToken`, which Apple also returns for a token sent to the other environment:
    /// an app may opt in to one try on the other environment before deactivating (docs/semantics.md).
    public var mayMeanWrongEnvironment: Bool { self == .badDeviceToken }

    /// True when this points at our own bug or configuration rather than the device and deserves an
    /// operator alert: `TooManyProviderTokenUpdates`, provider-token and certificate problems, and
    /// unknown reasons (docs/apns-protocol.md §3: "Treat unknown reason strings as FIX plus an alert").
    public var raisesAlert: Bool {
        switch self {
        case .tooManyProviderTokenUpdates, .invalidProviderToken, .missingProviderToken, .unrelatedKeyIdInToken,
             .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken, .badCertificate, .badCertificateEnvironment, .unknown:
            true
        default: false
        }
    }

    /// The action for a response with `status` and an optional reason: the reason's ``action`` when
    /// Apple documents it; otherwise 500 and 503 retry with backoff and everything else is rejected.
    public static func action(forStatus status: Int, reason: APNsReason?) -> APNsReasonAction {
        switch reason {
        case .some(.unknown), .none: status == 500 || status == 503 ? .retryWithBackoff : .reject
        case .some(let known): known.action
        }
    }

    /// Apple's exact string.
    public var description: String { rawValue }
}
