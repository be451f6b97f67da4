import ServiceCore
import Synchronization

/// Holds the one provider token (JWT) of one (team, key) pair and renews it on time.
///
/// Apple: "Refresh your token no more than once every 20 minutes and no less than once every 60
/// minutes"; an `iat` older than an hour gets 403 `ExpiredProviderToken`, and switching tokens more
/// than once per 20 minutes on a connection gets 429 `TooManyProviderTokenUpdates` (docs/apns-protocol.md
/// §4). So: the token is minted when first asked for, replaced once it reaches ``refreshAge`` (default
/// and most 40 min, least 20 min), and two distinct tokens are never issued less than 20 minutes apart,
/// even after ``invalidate(_:)``. A token handed out therefore always has at least 20 minutes of life
/// left at the moment of use: a connection that first uses it after an idle spell can keep it the 20
/// minutes Apple requires before the next change (a 46-minute-old token would have to be replaced 14
/// minutes later, exactly the change APNs refuses with `TooManyProviderTokenUpdates`). Time comes from the injected `WallClock`. Share one cache across all
/// connections; a connection enforces its own 20-minute rule by comparing ``APNsJWT/issuedAt``.
public final class APNsProviderTokenCache: Sendable {
    /// Shortest time between two distinct tokens: 20 minutes.
    public static let minimumRefreshInterval: Duration = .seconds(20 * 60)
    /// Age at which APNs refuses a token: 60 minutes.
    public static let maximumTokenAge: Duration = .seconds(60 * 60)
    /// The oldest token handed out: 40 minutes, so that it has the 20 minutes a connection must keep
    /// it still to live (``maximumTokenAge`` − ``minimumRefreshInterval``).
    public static let maximumRefreshAge: Duration = maximumTokenAge - minimumRefreshInterval

    /// The Key ID (`kid`).
    public let keyID: String
    /// The Team ID (`iss`).
    public let teamID: String
    /// The age at which the token is replaced, clamped to 20…40 minutes (``maximumRefreshAge``).
    public let refreshAge: Duration

    private let signingKey: APNsSigningKey
    private let clock: any WallClock
    private let refreshAgeSeconds: Int64
    private let state = Mutex(State())
    private let mints: Counter

    private struct State {
        var current: APNsJWT?
        var invalidated = false
        /// The current token was minted by ``renew(replacing:)`` (after APNs refused its predecessor).
        var renewed = false
        var mints = 0
        var lastRefusal: (atSeconds: Int64, reason: String)?
    }

    /// Creates an empty cache; nothing is signed until ``currentToken()``.
    /// - Parameters:
    ///   - signingKey: the team's `.p8` key.
    ///   - keyID: its 10-character Key ID.
    ///   - teamID: the 10-character Team ID.
    ///   - refreshAge: replace the token at this age; default 40 minutes, clamped to 20…40 minutes.
    ///   - clock: the time source (`SystemWallClock` in production, `ManualWallClock` in tests).
    ///   - metrics: counts `push_apns_jwt_mints_total`; default the process's registry.
    public init(
        signingKey: APNsSigningKey, keyID: String, teamID: String,
        refreshAge: Duration = APNsProviderTokenCache.maximumRefreshAge, clock: any WallClock = SystemWallClock(), metrics: MetricsRegistry = .shared
    ) {
        self.mints = metrics.counter("push_apns_jwt_mints_total", help: "Provider tokens (JWT) signed")
        self.signingKey = signingKey
        self.keyID = keyID
        self.teamID = teamID
        self.clock = clock
        let seconds = min(max(refreshAge.components.seconds, Self.minimumRefreshInterval.components.seconds),
                          Self.maximumRefreshAge.components.seconds)
        self.refreshAgeSeconds = seconds
        self.refreshAge = .seconds(seconds)
    }

    /// The token to send now: the cached one, or a new one when there is none, when the cached one
    /// reached ``refreshAge``, or when it was invalidated at least 20 minutes after it was issued.
    /// If the wall clock stepped back more than 5 minutes before the token's `iat`, a new token is made.
    /// - Throws: `APNsError` `.signingFailed` when signing fails (the old token, if any, is kept).
    public func currentToken() throws(APNsError) -> APNsJWT {
        try token(replacingAtAgeSeconds: refreshAgeSeconds)
    }

    /// Like ``currentToken()``, but also replaces the cached token when it is older than
    /// `maximumAge` (never younger than 20 minutes). A connection that must keep a token for 20
    /// minutes asks for one with enough life left (see `APNsClient`).
    /// - Throws: `APNsError` `.signingFailed` when signing fails.
    public func currentToken(maximumAge: Duration) throws(APNsError) -> APNsJWT {
        let minimum = Self.minimumRefreshInterval.components.seconds
        return try token(replacingAtAgeSeconds: min(refreshAgeSeconds, max(minimum, maximumAge.components.seconds)))
    }

    /// The clock this cache reads (seconds since the epoch).
    public var nowSeconds: Int64 { clock.nowSeconds() }

    private func token(replacingAtAgeSeconds replaceAge: Int64) throws(APNsError) -> APNsJWT {
        let now = clock.nowSeconds()
        return try state.withLock { state throws(APNsError) -> APNsJWT in
            if let current = state.current {
                let age = current.age(atSeconds: now)
                let minimum = Self.minimumRefreshInterval.components.seconds
                let due = age >= replaceAge
                    || (state.invalidated && age >= minimum) || age < -300
                if !due { return current }
            }
            let token = try APNsJWT(keyID: keyID, teamID: teamID, issuedAt: now, signingKey: signingKey)
            state.current = token
            state.invalidated = false
            state.renewed = false
            state.mints += 1
            mints.increment()
            return token
        }
    }

    /// After APNs answered 403 `ExpiredProviderToken` to `rejected`: the token to retry with on a new
    /// connection (docs/apns-client.md "Provider tokens").
    ///
    /// Single-flight per rejected token: the first caller mints a new token (a new `iat`, later than
    /// `rejected`'s even within the same second); every other caller reporting the same `rejected`
    /// gets that one. The 20-minute rule does not apply: it limits how often one connection changes
    /// its token, and the retry goes out on a new connection. Returns nil, minting nothing, when
    /// `rejected` was itself minted by a renewal: APNs refusing a fresh token as expired means a clock
    /// or key problem that another token would not fix (a provider fault).
    /// - Throws: `APNsError` `.signingFailed` when signing fails.
    public func renew(replacing rejected: APNsJWT) throws(APNsError) -> APNsJWT? {
        let now = clock.nowSeconds()
        return try state.withLock { state throws(APNsError) -> APNsJWT? in
            if let current = state.current, current != rejected {
                // Renewed already (or refreshed on schedule) since `rejected` was handed out.
                return current.issuedAt >= rejected.issuedAt ? current : nil
            }
            if state.renewed { return nil }
            let token = try APNsJWT(keyID: keyID, teamID: teamID, issuedAt: max(now, rejected.issuedAt + 1), signingKey: signingKey)
            state.current = token
            state.invalidated = false
            state.renewed = true
            state.mints += 1
            mints.increment()
            return token
        }
    }

    /// Tokens minted so far (metric `push_apns_jwt_mints_total`).
    public var mintCount: Int { state.withLock { $0.mints } }

    /// Marks `rejected` as refused by APNs with `ExpiredProviderToken`. If it is still the cached
    /// token, the next ``currentToken()`` mints a new one, but not before 20 minutes after `rejected`
    /// was issued. A token already replaced is ignored, so several connections reporting the same
    /// rejection cause one renewal.
    public func invalidate(_ rejected: APNsJWT) {
        state.withLock { state in
            if state.current == rejected { state.invalidated = true }
        }
    }

    /// `iat` of the cached token in seconds since the epoch, or `nil` before the first one: when the
    /// last token was minted (every mint replaces the cached token).
    public var currentIssuedAt: Int64? { state.withLock { $0.current?.issuedAt } }

    /// Records that APNs refused a provider token of this key with `reason` (Apple's reason string) now.
    public func noteRefusal(_ reason: String) {
        let now = clock.nowSeconds()
        state.withLock { $0.lastRefusal = (now, reason) }
    }

    /// APNs's last refusal of this key's provider tokens (seconds since the epoch, Apple's reason), or nil.
    public var lastRefusal: (atSeconds: Int64, reason: String)? { state.withLock { $0.lastRefusal } }
}
