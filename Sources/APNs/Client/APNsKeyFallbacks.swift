/// The rotation rule of `APNsClient`, as a value (docs/apns-client.md "Key rotation"): while a key
/// is being rotated in, the caller passes it as ``APNsSendOptions/credentials`` and the key before it
/// as ``APNsSendOptions/fallbackCredentials``. A send the new key gets refused for a reason that blames
/// the key (``fallsBack(status:reason:)``) is sent again on the fallback's pool, so the new key never
/// makes a notification fail nor a device token look invalid. The refusal is remembered per (key,
/// bundle ID): sends go straight to the fallback until ``retryDelay`` has passed, then the new key is
/// tried again (accepted: forgotten; refused: remembered for another ``retryDelay``).
///
/// Keys are told apart by an identity the caller chooses (the client uses the credentials object's);
/// no I/O and no clock: times are passed in, in milliseconds.
public struct APNsKeyFallbacks: Sendable {
    /// A key refused for one bundle ID, for logs and readiness detail (never the key itself).
    public struct Refusal: Sendable, Hashable {
        /// The refused key's Key ID (`kid`) and Team ID, or a certificate's label.
        public let keyID: String
        /// The team of the refused key (empty for a certificate).
        public let teamID: String
        /// The bundle ID whose sends were refused.
        public let bundleID: String
        /// The key sent on instead.
        public let fallbackKeyID: String
        /// Apple's reason for the last refusal.
        public internal(set) var reason: APNsReason
        /// When the key was first refused (ms since the UNIX epoch).
        public let since: Int64
        /// When the key is tried again (ms since the UNIX epoch).
        public internal(set) var retryAt: Int64
        /// Refusals so far (the first, plus one per failed retry).
        public internal(set) var refusals: Int
    }

    private struct Key: Hashable {
        let key: ObjectIdentifier
        let bundleID: String
    }

    /// How long a refused key is left out before it is tried again.
    public let retryDelay: Duration
    private var refused: [Key: Refusal] = [:]

    /// Creates the empty rule.
    /// - Parameter retryDelay: how long sends go straight to the fallback after a refusal.
    public init(retryDelay: Duration) {
        self.retryDelay = retryDelay
    }

    /// Whether Apple's answer blames the key, so that the fallback key may succeed where it failed
    /// (docs/apns-client.md "Key rotation"): 403 `InvalidProviderToken` (the JWT does not verify:
    /// a wrong or revoked key, a wrong team), `ExpiredProviderToken` that renewing did not cure (the
    /// retry machine's provider fault), `BadEnvironmentKeyIdInToken` in either spelling (a key scoped
    /// to the other environment), `UnrelatedKeyIdInToken` and `MissingProviderToken` (the key's
    /// connection, not the device), and 400 `TopicDisallowed` (a key scoped to other topics). Never a
    /// device token's reason, a payload's, or a transient one.
    public static func fallsBack(status: Int, reason: APNsReason?) -> Bool {
        switch reason {
        case .invalidProviderToken?, .expiredProviderToken?, .badEnvironmentKeyIdInToken?, .badEnvironmentKeyInToken?,
             .unrelatedKeyIdInToken?, .missingProviderToken?:
            status == 403
        case .topicDisallowed?:
            status == 400
        default:
            false
        }
    }

    /// Whether a send of `bundleID` on `key` goes straight to the fallback at `now`: the key was
    /// refused for it and its retry time has not come.
    public func sendsToFallback(key: ObjectIdentifier, bundleID: String, now: Int64) -> Bool {
        guard let refusal = refused[Key(key: key, bundleID: bundleID)] else { return false }
        return now < refusal.retryAt
    }

    /// Records that `key` (labelled `keyID`/`teamID`) was refused for `bundleID` with `reason` at
    /// `now`, the send going on with `fallbackKeyID`. Returns the refusal when it is news (the first,
    /// or the first after a retry), nil when the key was already left out (a send that was under way
    /// when the first refusal came): one log line per refusal, not per notification.
    @discardableResult
    public mutating func refuse(
        key: ObjectIdentifier, keyID: String, teamID: String, bundleID: String, fallbackKeyID: String, reason: APNsReason, now: Int64
    ) -> Refusal? {
        let id = Key(key: key, bundleID: bundleID)
        if let known = refused[id], now < known.retryAt { return nil }
        let (seconds, attoseconds) = retryDelay.components
        let retryAt = now + seconds * 1000 + attoseconds / 1_000_000_000_000_000
        var refusal = refused[id] ?? Refusal(
            keyID: keyID, teamID: teamID, bundleID: bundleID, fallbackKeyID: fallbackKeyID, reason: reason, since: now, retryAt: retryAt, refusals: 0)
        refusal.reason = reason
        refusal.retryAt = retryAt
        refusal.refusals += 1
        refused[id] = refusal
        return refusal
    }

    /// `key` was accepted for `bundleID` (an answer that is not a key refusal): it serves again.
    /// Returns the refusal it ends, if any.
    @discardableResult
    public mutating func accept(key: ObjectIdentifier, bundleID: String) -> Refusal? {
        refused.removeValue(forKey: Key(key: key, bundleID: bundleID))
    }

    /// The keys currently refused, oldest first (readiness detail).
    public var refusals: [Refusal] {
        refused.values.sorted { ($0.since, $0.keyID, $0.bundleID) < ($1.since, $1.keyID, $1.bundleID) }
    }

    /// Whether any key is remembered as refused (a cheap check before the lock's work).
    public var isEmpty: Bool { refused.isEmpty }
}
