import PushDomain

/// One broadcast to a Live Activity channel: `POST /4/broadcasts/apps/<bundle id>` (docs/apns-protocol.md
/// §8, Apple's "Sending broadcast push notification requests to APNs"). One request reaches every
/// device subscribed to the channel.
///
/// The client sends what it is given, so that every refusal Apple models can be represented: check it
/// first (the dispatcher's broadcast admission: priority 10, 5 or 1; `apns-expiration` 0 on a
/// No-Message-Stored channel; payload at most 5,120 bytes with `aps.timestamp`).
public struct APNsBroadcastRequest: Sendable, Hashable {
    /// The bare bundle ID (no `.push-type.liveactivity` suffix).
    public var bundleID: String
    /// Apple's `apns-channel-id` (base64); empty sends no header (Apple: `MissingChannelId`).
    public var channelID: String
    /// `apns-push-type`: `liveactivity`; nil sends no header (Apple: `MissingPushType`).
    public var pushType: APNsPushType?
    /// `apns-priority`: 10, 5 or 1.
    public var priority: APNsPriority
    /// `apns-expiration`: Apple requires it; `0` on a No-Message-Stored channel. `.omitted` sends no
    /// header (Apple: `BadExpirationDate`).
    public var expiration: APNsExpiration
    /// `apns-request-id`; nil lets the client make one (a lowercase UUID), returned in the answer.
    public var apnsRequestID: APNsID?
    /// The JSON payload, sent byte for byte (at most 5,120 bytes).
    public var payload: [UInt8]

    /// The largest broadcast payload Apple accepts, in bytes.
    public static let maximumPayloadBytes = 5_120

    /// Creates a broadcast.
    /// - Parameters:
    ///   - bundleID: the app's bare bundle ID.
    ///   - channelID: Apple's channel id.
    ///   - pushType: `liveactivity` unless told (nil omits the header).
    ///   - priority: 10 unless told.
    ///   - expiration: `0` unless told.
    ///   - apnsRequestID: the `apns-request-id`; nil makes one.
    ///   - payload: the JSON bytes.
    public init(bundleID: String, channelID: String, pushType: APNsPushType? = .liveactivity, priority: APNsPriority = .immediately,
                expiration: APNsExpiration = .immediately, apnsRequestID: APNsID? = nil, payload: [UInt8]) {
        self.bundleID = bundleID
        self.channelID = channelID
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.apnsRequestID = apnsRequestID
        self.payload = payload
    }

    /// `:path`: `/4/broadcasts/apps/<bundle id>`.
    public var path: String { "/4/broadcasts/apps/\(bundleID)" }
}
