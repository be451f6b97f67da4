/// What applying token events did: how many events changed the table, and the rows that
/// `USER_FORGOTTEN` events deactivated (the dispatcher announces each as `TokenInvalidated`).
public struct TokenEventsApplied: Sendable, Equatable {
    /// A row a forgotten user had.
    public struct ForgottenToken: Sendable, Equatable {
        /// Lowercase hex.
        public var deviceToken: String
        /// The app's bundle id.
        public var bundleID: String
        /// The forgotten user.
        public var userID: String
        /// Empty when the row had none.
        public var installationID: String
        /// `sandbox` or `production`.
        public var environment: String
        /// The forget event's time, ms since the UNIX epoch.
        public var eventTimeMs: Int64
    }

    /// A registration not applied because another app owns the token (`TokenOwnership`); the
    /// dispatcher dead-letters it as `token_owned_by_other_app`.
    public struct RefusedRegistration: Sendable, Equatable {
        /// Lowercase hex.
        public var deviceToken: String
        /// The bundle id the registration named.
        public var bundleID: String
        /// The bundle id that owns the row.
        public var ownerBundleID: String
        /// The registration's event time, ms since the UNIX epoch.
        public var eventTimeMs: Int64
    }

    /// The number of events that changed the table.
    public var changed = 0
    /// The rows forgotten, in no particular order.
    public var forgotten: [ForgottenToken] = []
    /// Registrations refused for their token's owner, in the order of the events.
    public var refused: [RefusedRegistration] = []
}
