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

    /// The number of events that changed the table.
    public var changed = 0
    /// The rows forgotten, in no particular order.
    public var forgotten: [ForgottenToken] = []
}
