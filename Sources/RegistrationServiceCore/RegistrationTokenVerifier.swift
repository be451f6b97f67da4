import ES256
import ProtobufCodec

/// Checks user-bound registration JWTs (docs/registration-auth.md): the app's backend signs a
/// short-lived token for one user and bundle id, and the app presents it to register its own device.
///
/// Rules: the header's `kid` names a configured key, whose algorithm is pinned (`alg` must equal it:
/// `none`, and HS256 presented for an EC key, are refused before any signature check); ES256 needs a
/// 64-byte R‖S signature (RFC 7518 §3.4), HS256 an HMAC compared in constant time; claims `aud` holds
/// the service's audience; `iat` and `exp` are integers with `exp − iat` ≤ 1 hour; the token is not
/// expired and not issued in the future, with `leeway` either way (`nbf` too when present); `sub` is
/// the user id (non-empty) and `bundle_id` equals the key's bundle id.
public struct RegistrationTokenVerifier: Sendable {
    /// The most `exp − iat` may be.
    public static let maximumLifetimeSeconds: Int64 = 3600
    /// Clock skew allowed on `exp`, `iat` and `nbf`.
    public static let leewaySeconds: Int64 = 60

    /// The `aud` tokens must carry.
    public let audience: String

    /// - Parameter audience: the service's audience (`PUSH_AUTH_AUDIENCE`).
    public init(audience: String) {
        self.audience = audience
    }

    /// Verifies `token` against `keys` at `nowSeconds` (seconds since the epoch).
    /// - Returns: the user principal the token binds.
    /// - Throws: `RegistrationError` `.unauthenticated` with a reason (`jwt_malformed`,
    ///   `jwt_unknown_kid`, `jwt_algorithm`, `jwt_signature`, `jwt_audience`, `jwt_expired`,
    ///   `jwt_lifetime`, `jwt_claims`).
    public func verify(_ token: String, keys: [String: RegistrationCredentials.JWTKey], nowSeconds: Int64) throws(RegistrationError) -> RegistrationPrincipal {
        let jwt: JSONWebToken
        do {
            jwt = try JSONWebToken(parsing: token)
        } catch {
            throw .unauthenticated("jwt_malformed", "the bearer credential is neither an API key nor a valid JWT: \(error.message)")
        }
        guard let algorithm = jwt.algorithm, algorithm.lowercased() != "none" else {
            throw .unauthenticated("jwt_algorithm", "unsigned JWTs (alg none) are refused")
        }
        guard let keyID = jwt.keyID, let key = keys[keyID] else {
            throw .unauthenticated("jwt_unknown_kid", "no registration key is configured for the JWT's kid")
        }
        guard algorithm == key.verification.algorithm else {
            throw .unauthenticated("jwt_algorithm", "kid \(keyID) accepts \(key.verification.algorithm) only, not \(algorithm)")
        }
        let valid: Bool
        switch key.verification {
        case .es256(let publicKey): valid = jwt.verifiesES256(with: publicKey)
        case .hs256(let secret): valid = jwt.verifiesHS256(secret: secret)
        }
        guard valid else { throw .unauthenticated("jwt_signature", "the JWT signature does not verify with kid \(keyID)") }
        guard jwt.stringsClaim("aud").contains(audience) else {
            throw .unauthenticated("jwt_audience", "the JWT's aud must be \(audience)")
        }
        guard let issuedAt = jwt.integerClaim("iat"), let expires = jwt.integerClaim("exp") else {
            throw .unauthenticated("jwt_claims", "the JWT needs integer iat and exp claims")
        }
        // The claims are the caller's numbers (any Int64): every sum and difference is checked, so
        // iat, exp or nbf near Int64.min or Int64.max are refused, never an arithmetic overflow.
        let (lifetime, lifetimeOverflows) = expires.subtractingReportingOverflow(issuedAt)
        guard expires > issuedAt, !lifetimeOverflows, lifetime <= Self.maximumLifetimeSeconds else {
            throw .unauthenticated("jwt_lifetime", "the JWT's exp − iat must be between 1 s and \(Self.maximumLifetimeSeconds) s")
        }
        let earliest = Self.saturatingSum(nowSeconds, -Self.leewaySeconds)
        let latest = Self.saturatingSum(nowSeconds, Self.leewaySeconds)
        guard expires >= earliest else { throw .unauthenticated("jwt_expired", "the JWT expired") }
        guard issuedAt <= latest else { throw .unauthenticated("jwt_claims", "the JWT's iat is in the future") }
        if jwt.hasClaim("nbf") {
            guard let notBefore = jwt.integerClaim("nbf"), notBefore <= latest else {
                throw .unauthenticated("jwt_claims", "the JWT is not valid yet (nbf)")
            }
        }
        guard let user = jwt.stringClaim("sub"), !user.isEmpty else {
            throw .unauthenticated("jwt_claims", "the JWT's sub (the user id) is required")
        }
        guard jwt.stringClaim("bundle_id") == key.bundleID else {
            throw .unauthenticated("jwt_claims", "the JWT's bundle_id claim must be the bundle id of kid \(keyID)")
        }
        return .user(userID: user, bundleID: key.bundleID, keyID: keyID)
    }

    /// `a + b`, clamped to `Int64.min...Int64.max` instead of overflowing.
    static func saturatingSum(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflows) = a.addingReportingOverflow(b)
        guard overflows else { return sum }
        return b > 0 ? .max : .min
    }
}
