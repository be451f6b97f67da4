/// What a credential may do with the registration API (the `operations` of an API key).
public enum RegistrationOperation: String, Sendable, Hashable, CaseIterable {
    /// RegisterToken and BatchRegisterTokens.
    case register
    /// UnregisterToken.
    case unregister
    /// ForgetUser.
    case admin
}
