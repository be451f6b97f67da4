import ProtobufCodec

/// The `apns-push-type` header: what a notification does, which topic suffix and token kind it needs.
///
/// Source: docs/apns-protocol.md §2 "Push types, topics and priority" (Apple, *Sending notification
/// requests to APNs*); token kinds from docs/semantics.md "Device tokens: format and kinds".
public enum APNsPushType: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Shows an alert, plays a sound or badges the icon. Topic: the bundle ID.
    case alert
    /// Silent update (`content-available: 1`); priority 5 only. Topic: the bundle ID.
    case background
    /// PushKit VoIP call. Topic `<bundleID>.voip`; payload up to 5120 bytes.
    case voip
    /// watchOS complication update. Topic `<bundleID>.complication`.
    case complication
    /// File Provider change. Topic `<bundleID>.pushkit.fileprovider`.
    case fileprovider
    /// MDM check-in request. Topic: the UID of the MDM push certificate's subject; certificate auth.
    case mdm
    /// Location query. Topic `<bundleID>.location-query`; token auth only.
    case location
    /// Live Activity start/update/end. Topic `<bundleID>.push-type.liveactivity`.
    case liveactivity
    /// Push to Talk. Topic `<bundleID>.voip-ptt` (not `.push-type.pushtotalk`).
    case pushtotalk
    /// WidgetKit reload. Topic `<bundleID>.push-type.widgets`; payload `{"aps":{"content-changed":true}}`.
    case widgets
    /// Controls reload (WidgetKit). Topic `<bundleID>.push-type.controls`.
    case controls

    /// The header value, e.g. `liveactivity`.
    public var description: String { rawValue }

    /// What this type appends to the bundle ID to form `apns-topic`; empty for `alert`, `background`
    /// and `mdm` (whose topic is the certificate's UID).
    public var topicSuffix: String {
        switch self {
        case .alert, .background, .mdm: ""
        case .voip: ".voip"
        case .complication: ".complication"
        case .fileprovider: ".pushkit.fileprovider"
        case .location: ".location-query"
        case .liveactivity: ".push-type.liveactivity"
        case .pushtotalk: ".voip-ptt"
        case .widgets: ".push-type.widgets"
        case .controls: ".push-type.controls"
        }
    }

    /// The `apns-topic` for an app: `bundleID` plus `topicSuffix`.
    /// - Parameter bundleID: the app's bundle ID; for `.mdm` pass the MDM certificate's UID
    ///   (the APNs client's `APNsCertificateCredentials.subjectUserID`), which is returned unchanged.
    public func topic(forBundleID bundleID: String) -> String { bundleID + topicSuffix }

    /// The token kind this type needs, ignoring the payload (a `liveactivity` push is assumed to be an
    /// update; use ``tokenKind(forPayload:)`` to recognize `event: start`).
    public var tokenKind: APNsTokenKind {
        switch self {
        case .alert, .background, .controls: .standard
        case .mdm: .mdm
        case .voip: .voip
        case .pushtotalk: .pushToTalk
        case .liveactivity: .liveActivity
        case .location: .location
        case .widgets: .widget
        case .complication: .complication
        case .fileprovider: .fileProvider
        }
    }

    /// The token kind a notification of this type with `payload` needs: `.pushToStart` for a
    /// `liveactivity` push whose `aps.event` is `"start"`, else ``tokenKind``.
    /// - Parameter payload: the exact body bytes (parsed only to look; never re-serialized).
    public func tokenKind(forPayload payload: [UInt8]) -> APNsTokenKind {
        guard self == .liveactivity,
              case .object(let root)? = try? JSONValue(parsing: payload),
              case .object(let aps)? = root["aps"],
              case .string("start")? = aps["event"]
        else { return tokenKind }
        return .pushToStart
    }

    /// The largest body in bytes: 5120 for `voip`, 4096 for every other type (docs/apns-protocol.md §2
    /// "Body limits"). Measured on the exact UTF-8 bytes of the body.
    public var maximumPayloadBytes: Int { self == .voip ? 5120 : 4096 }

    /// True when APNs accepts this type only over token (JWT) authentication: `location`.
    public var requiresTokenAuthentication: Bool { self == .location }

    /// True when APNs accepts this type only over certificate authentication: `mdm`.
    public var requiresCertificateAuthentication: Bool { self == .mdm }
}
