/// Which API an app obtained a device token from; each push type needs one kind
/// (docs/semantics.md "Device tokens: format and kinds"; `push.v1.TokenKind` in Protos/push/v1/common.proto).
public enum APNsTokenKind: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// `registerForRemoteNotifications`: alert, background and controls pushes.
    case standard
    /// The device's MDM enrolment token.
    case mdm
    /// PushKit VoIP token.
    case voip
    /// Push to Talk ephemeral token, one per joined channel.
    case pushToTalk = "push-to-talk"
    /// A Live Activity's own update token (`pushTokenUpdates`).
    case liveActivity = "live-activity"
    /// Live Activity push-to-start token (`pushToStartTokenUpdates`), for `event: start`.
    case pushToStart = "push-to-start"
    /// Location-push service extension token.
    case location
    /// WidgetKit push token.
    case widget
    /// watchOS complication (PushKit) token.
    case complication
    /// File Provider (PushKit) token.
    case fileProvider = "file-provider"

    /// The raw name, e.g. `push-to-start`.
    public var description: String { rawValue }
}
