import PushMessages

extension TokenInvalidated {
    /// The announcement of a `device_tokens` row the dispatcher deactivated: the row's identity. The
    /// caller adds why (`outcomeReason`, or Apple's `apnsReason` and timestamp) and the request id.
    init(deviceToken: String, bundleID: String, environment: Environment, userID: String, installationID: String) {
        self.init()
        self.deviceToken = deviceToken
        self.bundleID = bundleID
        self.environment = environment
        self.userID = userID
        self.installationID = installationID
    }
}
