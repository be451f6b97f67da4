import PushDomain

extension APNsError {
    /// The error APNs answers for a value that breaks a push-domain rule: `.invalidDeviceToken` for a
    /// bad device token (reason `BadDeviceToken`), else `.invalidRequest` with the error's reason.
    public init(_ error: PushDomainError) {
        let reason = APNsReason(rawValue: error.apnsReason)
        self.init(code: reason == .badDeviceToken ? .invalidDeviceToken : .invalidRequest, message: error.message, reason: reason)
    }
}
