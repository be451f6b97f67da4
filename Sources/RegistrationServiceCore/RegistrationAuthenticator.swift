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
        /// Calls per second per API key when its entry sets none. Default 1,000.
        public var defaultRatePerSecond: Double = 1_000
        /// Burst per API key when its entry sets none. Default 2,000.
        public var defaultBurst: Double = 2_000

        /// Creates a configuration with the defaults above.
        public init() {}
    }

    private struct State {
        var credentials: RegistrationCredentials
        var buckets: [String: TokenBucket] = [:]
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
        self.state = Mutex(State(credentials: credentials))
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
                state.buckets = state.buckets.filter { credentials.apiKeys[$0.key] != nil }
            }
            logger.notice("authentication keys reloaded", Self.summary(credentials))
            return true
        } catch {
            logger.error("authentication keys NOT reloaded; the previous keys stay in use", ["error": "\(error)"])
            return false
        }
    }

    /// Authenticates one call.
    /// - Parameter authorization: the `authorization` metadata value (`Bearer <credential>`), or nil.
    /// - Returns: the principal.
    /// - Throws: `RegistrationError` `.unauthenticated` (missing or wrong credential; reason
    ///   `missing`, `malformed`, `unknown_key`, `wrong_key`, or a JWT reason), or
    ///   `.resourceExhausted` with `retryAfter` when the API key's bucket is empty (reason `rate_limited`).
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
            let now = monotonicSeconds()
            let outcome = state.withLock { state -> Result<RegistrationCredentials.APIKeyEntry, RegistrationError> in
                guard let entry = state.credentials.apiKeys[key.id] else {
                    return .failure(.unauthenticated("unknown_key", "unknown API key id \(key.id)"))
                }
                guard Digest.constantTimeEquals(entry.sha256, digest) else {
                    return .failure(.unauthenticated("wrong_key", "wrong secret for API key id \(key.id)"))
                }
                var bucket = state.buckets[key.id] ?? TokenBucket(
                    ratePerSecond: entry.ratePerSecond ?? configuration.defaultRatePerSecond,
                    burst: max(1, entry.burst ?? configuration.defaultBurst), now: now)
                let wait = bucket.take(now: now)
                state.buckets[key.id] = bucket
                if let wait {
                    let retryAfter = Duration.milliseconds(Int64((wait * 1000).rounded(.up)))
                    return .failure(RegistrationError(
                        code: .resourceExhausted, message: "API key \(key.id) exceeded its rate limit; retry after \(retryAfter)",
                        retryAfter: retryAfter, reason: "rate_limited"))
                }
                return .success(entry)
            }
            return .apiKey(try outcome.get())
        }
        let keys = state.withLock { $0.credentials.jwtKeys }
        return try verifier.verify(credential, keys: keys, nowSeconds: wallClock.nowMilliseconds() / 1000)
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
