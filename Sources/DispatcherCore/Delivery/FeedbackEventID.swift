import Foundation
import PushMessages
import ServiceCore

/// Deterministic event ids of the feedback topic: the same fact always gets the same id, so a
/// republication (a redelivered send request, a retried publish) can be dropped by `event_id`.
///
/// Each id is a version 5 UUID (RFC 9562 §5.5) under `namespace`, written in lowercase, of a name
/// made of the event's kind and the fields that identify the fact, separated by line feeds
/// (docs/contracts.md "Event ids"; the comment on `FeedbackEvent.event_id` in
/// Protos/push/v1/feedback.proto). In Python: `str(uuid.uuid5(FeedbackEventID.namespace, name))`.
public enum FeedbackEventID {
    /// The project's fixed namespace for feedback event ids, `26a8710c-1894-4fc1-b8dc-e7e709f9240b`.
    /// Never change it: every reader's de-duplication depends on it.
    public static let namespace = UUID(uuidString: "26a8710c-1894-4fc1-b8dc-e7e709f9240b")!

    /// The id of the `DeliveryReport` of `deviceToken` in request `requestID`: name
    /// `"delivery-report\n<request_id>\n<device_token>"`.
    /// - Parameters:
    ///   - requestID: `SendRequest.request_id`.
    ///   - deviceToken: the token as the report carries it (lowercase hex for a valid token).
    /// - Returns: a lowercase UUID string.
    public static func deliveryReport(requestID: String, deviceToken: String) -> String {
        id("delivery-report\n\(requestID)\n\(deviceToken)")
    }

    /// The id of the `TokenInvalidated` announcing that `deviceToken` was deactivated: name
    /// `"token-invalidated\n<device_token>\n<apns_timestamp_ms>\n<request_id>"`.
    /// - Parameters:
    ///   - deviceToken: the token, lowercase hex.
    ///   - apnsTimestampMs: Apple's 410 timestamp, ms since the UNIX epoch; 0 when there was none.
    ///   - requestID: the request whose send found it.
    /// - Returns: a lowercase UUID string.
    public static func tokenInvalidated(deviceToken: String, apnsTimestampMs: Int64, requestID: String) -> String {
        id("token-invalidated\n\(deviceToken)\n\(apnsTimestampMs)\n\(requestID)")
    }

    /// The id of the `RequestCompleted` of request `requestID`: name `"request-completed\n<request_id>"`.
    /// - Parameter requestID: `SendRequest.request_id` (the record's key for a refused request).
    /// - Returns: a lowercase UUID string.
    public static func requestCompleted(requestID: String) -> String {
        id("request-completed\n\(requestID)")
    }

    /// The id of the `BroadcastReport` of the broadcast of request `requestID` to `channelID`: name
    /// `"broadcast-report\n<request_id>\n<channel_id>"`.
    /// - Parameters:
    ///   - requestID: `SendRequest.request_id`.
    ///   - channelID: Apple's `apns-channel-id` as the request named it.
    /// - Returns: a lowercase UUID string.
    public static func broadcastReport(requestID: String, channelID: String) -> String {
        id("broadcast-report\n\(requestID)\n\(channelID)")
    }

    /// The id of a `ChannelEvent`: name
    /// `"channel-event\n<bundle_id>\n<environment>\n<name>\n<kind>"`, with the environment and the
    /// kind as their enum value names (`PRODUCTION`, `CREATED`).
    /// - Parameters:
    ///   - bundleID: `ChannelCommand.bundle_id`.
    ///   - environment: `ChannelCommand.environment`.
    ///   - name: the caller's name for the channel.
    ///   - kind: what happened.
    /// - Returns: a lowercase UUID string.
    public static func channelEvent(bundleID: String, environment: Environment, name: String, kind: ChannelEvent.Kind) -> String {
        id("channel-event\n\(bundleID)\n\(environment.protoName ?? String(environment.rawValue))\n\(name)\n\(kind.protoName ?? String(kind.rawValue))")
    }

    private static func id(_ name: String) -> String {
        UUID.v5(namespace: namespace, name: name).lowercasedString
    }
}
