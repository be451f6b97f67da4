/// Apps own their tokens (README "Contracts", "Apps own their tokens"): a registration may move a
/// token row to another bundle id only when the row is inactive and has been for
/// `rebindAfterDays`. Moving a token between users of the same app (sign-out and sign-in on a shared
/// device) is always allowed. Registration answers OK once Kafka has the event; a registration this
/// rule refuses is dead-lettered by the dispatcher as `token_owned_by_other_app`.
public struct TokenOwnership: Sendable, Equatable {
    /// The row as the table holds it before the registration.
    public struct Row: Sendable, Equatable {
        /// The app that owns the row now.
        public var bundleID: String
        /// Whether the row is `active`.
        public var isActive: Bool
        /// When it became inactive (ms since the UNIX epoch); its last event when the time is unknown.
        public var inactiveSinceMs: Int64

        public init(bundleID: String, isActive: Bool, inactiveSinceMs: Int64) {
            self.bundleID = bundleID
            self.isActive = isActive
            self.inactiveSinceMs = inactiveSinceMs
        }
    }

    /// Days an inactive row stays with its app (`PUSH_TOKEN_REBIND_AFTER_DAYS`, default 30).
    public var rebindAfterDays: Int

    public init(rebindAfterDays: Int = 30) {
        self.rebindAfterDays = rebindAfterDays
    }

    /// Whether a registration of `row`'s token for `bundleID` at `eventTimeMs` may be applied.
    public func allows(_ row: Row?, bundleID: String, eventTimeMs: Int64) -> Bool {
        guard let row, row.bundleID != bundleID else { return true }
        guard !row.isActive else { return false }
        // eventTimeMs - rebindAfterDays days, saturating: no input makes this trap.
        let (span, spanOverflow) = Int64(clamping: max(0, rebindAfterDays)).multipliedReportingOverflow(by: 86_400_000)
        if spanOverflow { return false }
        let (cutoff, overflow) = eventTimeMs.subtractingReportingOverflow(span)
        if overflow { return false }
        return row.inactiveSinceMs <= cutoff
    }
}
