import APNs
import PushDomain

/// One row of `device_tokens`, as the dispatcher needs it to send.
public struct StoredToken: Sendable, Hashable {
    /// Lowercase hex.
    public var deviceToken: String
    public var bundleID: String
    public var environment: APNsEnvironment
    /// `APNsTokenKind` raw value.
    public var tokenKind: String
    /// Empty when none.
    public var userID: String
    public var installationID: String
    public var isActive: Bool

    public init(deviceToken: String, bundleID: String, environment: APNsEnvironment, tokenKind: String,
                userID: String = "", installationID: String = "", isActive: Bool = true) {
        self.deviceToken = deviceToken
        self.bundleID = bundleID
        self.environment = environment
        self.tokenKind = tokenKind
        self.userID = userID
        self.installationID = installationID
        self.isActive = isActive
    }
}
