import Foundation
import ServiceCore
import Synchronization

/// Authenticates registration calls from their `authorization: Bearer <credential>` metadata:
/// API keys (`pk_<id>_<secret>`: looked up by id, SHA-256 compared in constant time, rate-limited per
/// key) and user-bound registration JWTs (`RegistrationTokenVerifier`). The credentials can be
/// replaced at any time (`reload()`: SIGHUP or a changed key file); calls in progress keep the set
/// they started with. Credentials are never logged; only key ids are.
public final class RegistrationAuthenticator: Sendable {
    /// Where the credentials come from and the rate-limit defaults.
    public struct Configuration: Sendable {
        /// Authentication off: every call is allowed (development only; logged at start).
        public var disabled = false
        /// The key file (JSON, see `RegistrationCredentials`), re-read on `reload()`.
        public var keysFile: String?
        /// The same JSON inline (`PUSH_AUTH_KEYS`), used when there is no file.
        public var keysJSON: String?
        /// The `aud` registration JWTs must carry. Default `push.v1.TokenRegistry`.
        public var audience = "push.v1.TokenRegistry"
        /// Items per second per API key, and per registration-JWT `kid`, when its entry sets none
        /// (a batch call counts each item). Default 1,000.
        public var defaultRatePerSecond: Double = 1_000
        /// Burst per API key and per `kid` when its entry sets none. Default 2,000.
        public var defaultBurst: Double = 2_000
        /// Registrations per second per JWT subject (one user of one bundle id) when the `kid`'s
        /// entry sets none. Default 0.1 (one every 10 s once the burst is spent).
        public var defaultSubjectRatePerSecond: Double = 0.1
        /// Burst per JWT subject when the `kid`'s entry sets none. Default 10.
        public var defaultSubjectBurst: Double = 10
        /// Subjects whose buckets are remembered; beyond, the least recently used is forgotten (and
        /// starts again with a full bucket). Default 100,000.
        public var maximumSubjectBuckets = 100_000

        /// Creates a configuration with the defaults above.
        public init() {}
    }

    private struct State {
        var credentials: RegistrationCredentials
        /// By API key id.
        var keyBuckets: [String: TokenBucket] = [:]
        /// By registration-JWT `kid`.
        var kidBuckets: [String: TokenBucket] = [:]
        /// By JWT subject: `<bundle id> NUL <sub>`.
        var subjectBuckets: LeastRecentlyUsedCache<String, TokenBucket>
    }

    /// How many items of a call may go ahead now (`admit(_:items:)`).
    public struct RateAdmission: Sendable, Equatable {
        /// Items allowed, 1…the items asked for; the first ones of a batch.
        public var admitted: Int
        /// When fewer than asked were admitted: how long until the next item may go.
        public var retryAfter: Duration?
        /// What limited the call (`API key backend-1`, `kid app-1`, `subject of kid app-1`), for messages.
        public var limitedBy: String?

        /// Every item (authentication disabled, or the bucket held enough).
        public static func all(_ items: Int) -> RateAdmission { RateAdmission(admitted: items, retryAfter: nil, limitedBy: nil) }
    }

    /// The configuration.
    public let configuration: Configuration
    private let state: Mutex<State>
    private let verifier: RegistrationTokenVerifier
    private let wallClock: any WallClock
    private let monotonicSeconds: @Sendable () -> Double
    private let logger: Logger

    /// Loads the credentials once.
    /// - Parameters:
    ///   - configuration: where the keys are and the defaults.
    ///   - wallClock: for JWT times.
    ///   - monotonicSeconds: for the rate limiter (tests inject a clock).
    /// - Throws: `RegistrationCredentials.FormatError` when the keys cannot be read or parsed, or
    ///   when authentication is on and neither a file nor inline keys are configured.
    public init(
        configuration: Configuration, wallClock: any WallClock = SystemWallClock(),
        monotonicSeconds: (@Sendable () -> Double)? = nil, logger: Logger = Logger(label: "registration.auth")
    ) throws {
        self.configuration = configuration
        self.verifier = RegistrationTokenVerifier(audience: configuration.audience)
        self.wallClock = wallClock
        let start = ContinuousClock.now
        self.monotonicSeconds = monotonicSeconds ?? {
            let elapsed = ContinuousClock.now - start
            return elapsed.inSeconds
        }
        self.logger = logger
        let credentials = configuration.disabled ? RegistrationCredentials() : try Self.load(configuration)
        self.state = Mutex(State(
            credentials: credentials, subjectBuckets: LeastRecentlyUsedCache(capacity: max(1, configuration.maximumSubjectBuckets))))
        if configuration.disabled {
            logger.warning("authentication is DISABLED (PUSH_AUTH_DISABLED=true): anyone can register or remove any token; development only")
        } else {
            logger.info("authentication on", Self.summary(credentials))
        }
    }

    /// Re-reads the key file (or inline keys); on failure keeps the current credentials and logs why.
    /// Rate-limit buckets of keys that remain are kept.
    /// - Returns: whether the new credentials are in use.
    @discardableResult
    public func reload() -> Bool {
        guard !configuration.disabled else { return false }
        do {
            let credentials = try Self.load(configuration)
            state.withLock { state in
                state.credentials = credentials
                state.keyBuckets = state.keyBuckets.filter { credentials.apiKeys[$0.key] != nil }
                state.kidBuckets = state.kidBuckets.filter { credentials.jwtKeys[$0.key] != nil }
            }
            logger.notice("authentication keys reloaded", Self.summary(credentials))
            return true
        } catch {
            logger.error("authentication keys NOT reloaded; the previous keys stay in use", ["error": "\(error)"])
            return false
        }
    }

    /// Authenticates one call's credential; rate limits are applied after the request is read
    /// (`admit(_:items:)`), since a batch counts its items.
    /// - Parameter authorization: the `authorization` metadata value (`Bearer <credential>`), or nil.
    /// - Returns: the principal.
    /// - Throws: `RegistrationError` `.unauthenticated` (missing or wrong credential; reason
    ///   `missing`, `malformed`, `unknown_key`, `wrong_key`, or a JWT reason).
    public func authenticate(authorization: String?) throws(RegistrationError) -> RegistrationPrincipal {
        if configuration.disabled { return .anonymous }
        guard let authorization, !authorization.isEmpty else {
            throw .unauthenticated("missing", "authorization: Bearer <API key or registration token> is required")
        }
        guard authorization.utf8.count > 7, authorization.prefix(7).lowercased() == "bearer " else {
            throw .unauthenticated("malformed", "the authorization metadata must be \"Bearer <credential>\"")
        }
        let credential = String(authorization.dropFirst(7)).trimmingCharacters(in: .whitespaces)
        if credential.hasPrefix("pk_") {
            guard let key = APIKey(credential) else {
                throw .unauthenticated("malformed", "the API key is not of the form pk_<id>_<43 base64url characters>")
            }
            let digest = key.sha256
            let outcome = state.withLock { state -> Result<RegistrationCredentials.APIKeyEntry, RegistrationError> in
                guard let entry = state.credentials.apiKeys[key.id] else {
                    return .failure(.unauthenticated("unknown_key", "unknown API key id \(key.id)"))
                }
                guard Digest.constantTimeEquals(entry.sha256, digest) else {
                    return .failure(.unauthenticated("wrong_key", "wrong secret for API key id \(key.id)"))
                }
                return .success(entry)
            }
            return .apiKey(try outcome.get())
        }
        let keys = state.withLock { $0.credentials.jwtKeys }
        return try verifier.verify(credential, keys: keys, nowSeconds: wallClock.nowMilliseconds() / 1000)
    }

    /// Takes `items` (a single call: 1; a batch: its item count) from the principal's token buckets:
    /// an API key's bucket; for a registration JWT, its `kid`'s bucket and its subject's (bounded to
    /// `maximumSubjectBuckets`, least recently used forgotten). Items beyond what the buckets hold
    /// are not admitted.
    /// - Returns: how many items, from the first, may go ahead (at least 1).
    /// - Throws: `RegistrationError` `.resourceExhausted` with `retryAfter` (reason `rate_limited`)
    ///   when not even one may.
    public func admit(_ principal: RegistrationPrincipal, items: Int) throws(RegistrationError) -> RateAdmission {
        let items = max(1, items)
        let now = monotonicSeconds()
        let admission: RateAdmission = state.withLock { state in
            switch principal {
            case .anonymous:
                return .all(items)
            case .apiKey(let entry):
                var bucket = state.keyBuckets[entry.id] ?? TokenBucket(
                    ratePerSecond: entry.ratePerSecond ?? configuration.defaultRatePerSecond,
                    burst: max(1, entry.burst ?? configuration.defaultBurst), now: now)
                let (taken, wait) = bucket.take(upTo: items, now: now)
                state.keyBuckets[entry.id] = bucket
                guard taken < items else { return .all(items) }
                return RateAdmission(admitted: taken, retryAfter: wait.map(Self.retryAfter(seconds:)), limitedBy: "API key \(entry.id)")
            case .user(let userID, let bundleID, let keyID):
                let key = state.credentials.jwtKeys[keyID]
                var kid = state.kidBuckets[keyID] ?? TokenBucket(
                    ratePerSecond: key?.ratePerSecond ?? configuration.defaultRatePerSecond,
                    burst: max(1, key?.burst ?? configuration.defaultBurst), now: now)
                let subjectKey = bundleID + "\u{0}" + userID
                var subject = state.subjectBuckets.value(forKey: subjectKey) ?? TokenBucket(
                    ratePerSecond: key?.subjectRatePerSecond ?? configuration.defaultSubjectRatePerSecond,
                    burst: max(1, key?.subjectBurst ?? configuration.defaultSubjectBurst), now: now)
                let allowed = min(items, kid.available(at: now), subject.available(at: now))
                _ = kid.take(upTo: allowed, now: now)
                _ = subject.take(upTo: allowed, now: now)
                let kidWait = kid.wait(at: now)
                let subjectWait = subject.wait(at: now)
                state.kidBuckets[keyID] = kid
                state.subjectBuckets.set(subject, forKey: subjectKey)
                guard allowed < items else { return .all(items) }
                let limitedBy = subjectWait >= kidWait ? "the subject of kid \(keyID)" : "kid \(keyID)"
                return RateAdmission(admitted: allowed, retryAfter: Self.retryAfter(seconds: max(kidWait, subjectWait)), limitedBy: limitedBy)
            }
        }
        guard admission.admitted == 0 else { return admission }
        let retryAfter = admission.retryAfter ?? .seconds(1)
        throw RegistrationError(
            code: .resourceExhausted, message: "\(admission.limitedBy ?? "the caller") exceeded its rate limit; retry after \(retryAfter)",
            retryAfter: retryAfter, reason: "rate_limited")
    }

    /// Subject buckets remembered now (≤ `maximumSubjectBuckets`).
    public var subjectBucketCount: Int { state.withLock { $0.subjectBuckets.count } }

    /// A bucket's wait as a `Duration`, at most a day (key-file rates are bounded, so a longer wait
    /// cannot arise; the bound keeps the conversion total for any Double).
    static func retryAfter(seconds: Double) -> Duration {
        let milliseconds = (seconds * 1000).rounded(.up)
        guard milliseconds.isFinite, milliseconds > 0 else { return .milliseconds(milliseconds > 0 ? 86_400_000 : 0) }
        return .milliseconds(Int64(min(milliseconds, 86_400_000)))
    }

    private static func load(_ configuration: Configuration) throws(RegistrationCredentials.FormatError) -> RegistrationCredentials {
        if let path = configuration.keysFile {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw RegistrationCredentials.FormatError("cannot read the key file \(path)")
            }
            return try RegistrationCredentials(json: Array(data))
        }
        if let json = configuration.keysJSON {
            return try RegistrationCredentials(json: Array(json.utf8))
        }
        throw RegistrationCredentials.FormatError(
            "authentication is on but no keys are configured: set PUSH_AUTH_KEYS_FILE (or PUSH_AUTH_KEYS), or PUSH_AUTH_DISABLED=true for development")
    }

    private static func summary(_ credentials: RegistrationCredentials) -> [String: String] {
        ["api_key_ids": credentials.apiKeys.keys.sorted().joined(separator: ","),
         "registration_jwt_kids": credentials.jwtKeys.keys.sorted().joined(separator: ",")]
    }
}
