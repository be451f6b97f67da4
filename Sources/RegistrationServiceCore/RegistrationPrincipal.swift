/// Who a call acts for, once its credential checked out.
public enum RegistrationPrincipal: Sendable {
    /// An app backend's API key (its entry: bundle ids, operations).
    case apiKey(RegistrationCredentials.APIKeyEntry)
    /// An app with a user-bound registration JWT: may register tokens of this user and bundle id only.
    case user(userID: String, bundleID: String, keyID: String)
    /// Authentication is off (`PUSH_AUTH_DISABLED=true`, development only).
    case anonymous

    /// Checks that the principal may perform `operation` on `bundleID` (and, for a registration,
    /// for `userID`).
    /// - Throws: `RegistrationError` `.permissionDenied` with the reason `bundle_id`, `operation` or `user_id`.
    public func authorize(_ operation: RegistrationOperation, bundleID: String, userID: String? = nil) throws(RegistrationError) {
        switch self {
        case .anonymous:
            return
        case .apiKey(let entry):
            guard entry.operations.contains(operation) else {
                throw .denied("operation", "API key \(entry.id) may not \(operation.rawValue)")
            }
            guard entry.allows(bundleID: bundleID) else {
                throw .denied("bundle_id", "API key \(entry.id) is not allowed for bundle id \(bundleID)")
            }
        case .user(let user, let bundle, let keyID):
            guard operation == .register else {
                throw .denied("operation", "a registration token (kid \(keyID)) may only register; \(operation.rawValue) needs an API key")
            }
            guard bundleID == bundle else {
                throw .denied("bundle_id", "the registration token is for bundle id \(bundle), not \(bundleID)")
            }
            guard userID == user else {
                throw .denied("user_id", "the registration token binds another user id than device.user_id")
            }
        }
    }

    /// Checks that the principal may call a batch method (`BatchRegisterTokens`): batches are for
    /// app backends, so a registration JWT (one user's app) is refused.
    /// - Throws: `RegistrationError` `.permissionDenied` with the reason `operation`.
    public func authorizeBatch() throws(RegistrationError) {
        if case .user(_, _, let keyID) = self {
            throw .denied("operation", "a registration token (kid \(keyID)) may not call batch methods; BatchRegisterTokens needs an API key")
        }
    }

    /// The API key's id, or nil.
    public var keyID: String? {
        if case .apiKey(let entry) = self { return entry.id }
        return nil
    }
}
