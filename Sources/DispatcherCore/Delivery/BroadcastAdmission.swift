import APNs
import ProtobufCodec
import PushDomain
import PushMessages

/// Whether a broadcast (`SendRequest.channel_id`) may go to Apple, as a value tested without I/O
/// (docs/live-activities.md "Never broadcast twice"). Checked before the intent row is written; a
/// refusal is a `BroadcastReport` `REJECTED` with its reason and no Apple request. In order:
///
/// 1. the bundle's credential (the credentials registry): `OUTCOME_REASON_NO_CREDENTIAL`;
/// 2. the channel row: an active channel of the app in the environment, else
///    `OUTCOME_REASON_CHANNEL_NOT_REGISTERED`;
/// 3. push type `liveactivity` or unspecified; priority 10, 5 or 1 (unset: 10); `apns-expiration` 0
///    on a No-Message-Stored channel (unset: 0); `apns_id` a UUID; a payload of at most 5,120 bytes
///    that is a JSON object with `aps.timestamp` a number (devices drop an update older than the one
///    they show, which makes a crash-window duplicate harmless): else `OUTCOME_REASON_INVALID_REQUEST`.
struct BroadcastAdmission: Sendable {
    /// What the dispatcher knows of the channel (its `channels` row).
    enum Channel: Sendable, Hashable {
        /// No row, or a row that is not active (deleted, failed, still creating).
        case notRegistered
        /// An active channel with Apple's storage policy; `name` is the caller's name for it.
        case active(policy: APNsMessageStoragePolicy, name: String)
    }

    /// The decision.
    enum Decision: Sendable, Hashable {
        /// Send this request to Apple.
        case send(APNsBroadcastRequest)
        /// Refuse with `reason`; `error` says what is wrong, for logs.
        case reject(OutcomeReason, error: String)
    }

    /// Decides for a broadcast of `notification` to `channelID`.
    /// - Parameters:
    ///   - credentialRefusal: why the credentials registry has no key for the bundle ID in the
    ///     environment; nil when it has one (or no registry decides).
    static func decide(channelID: String, notification: Notification, credentialRefusal: String?, channel: Channel) -> Decision {
        if let credentialRefusal { return .reject(.noCredential, error: credentialRefusal) }
        let policy: APNsMessageStoragePolicy
        switch channel {
        case .notRegistered:
            return .reject(.channelNotRegistered, error: "channel_id: \(channelID) is not an active channel of \(notification.bundleID)")
        case .active(let known, _): policy = known
        }
        guard notification.pushType == .unspecified || notification.pushType == .liveactivity else {
            return .reject(.invalidRequest, error: "notification.push_type: a broadcast is PUSH_TYPE_LIVEACTIVITY, not \(notification.pushType)")
        }
        let priority = notification.priority == 0 ? APNsPriority.immediately : APNsPriority(rawValue: Int(notification.priority))
        guard priority.isValid else { return .reject(.invalidRequest, error: "notification.priority: \(notification.priority) is not 10, 5 or 1") }
        let expiration: APNsExpiration
        switch notification.expiration {
        case nil, 0?: expiration = .immediately
        case let seconds? where seconds > 0: expiration = .at(secondsSinceEpoch: seconds)
        case let seconds?: return .reject(.invalidRequest, error: "notification.expiration: \(seconds) is negative")
        }
        if policy == .noMessageStored, expiration != .immediately {
            return .reject(.invalidRequest, error: "notification.expiration: a No-Message-Stored channel takes only 0")
        }
        var apnsID: APNsID?
        if !notification.apnsID.isEmpty {
            guard let valid = try? APNsID(validating: notification.apnsID) else {
                return .reject(.invalidRequest, error: "notification.apns_id: \(notification.apnsID) is not a UUID")
            }
            apnsID = valid
        }
        let payload = Array(notification.payload.utf8)
        guard payload.count <= APNsBroadcastRequest.maximumPayloadBytes else {
            return .reject(.invalidRequest, error: "notification.payload: \(payload.count) bytes, a broadcast takes at most 5120")
        }
        guard case .object(let object)? = try? JSONValue(parsing: payload), case .object(let aps)? = object["aps"],
              case .number? = aps["timestamp"]
        else { return .reject(.invalidRequest, error: "notification.payload: a broadcast needs aps.timestamp (a number)") }
        return .send(APNsBroadcastRequest(
            bundleID: notification.bundleID, channelID: channelID, priority: priority, expiration: expiration, apnsRequestID: apnsID,
            payload: payload))
    }
}
