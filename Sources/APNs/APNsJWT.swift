import ProtobufCodec
/// An APNs provider authentication token: an ES256 JWT (RFC 7519, RFC 7515) as Apple specifies it
/// (docs/apns-protocol.md §4, Apple's *Establishing a token-based connection to APNs*).
///
/// Header `{"alg":"ES256","kid":"<keyID>"}` (the key ID only in the header), claims
/// `{"iss":"<teamID>","iat":<integer seconds>}`, each base64url without padding, signed with ECDSA
/// P-256 + SHA-256 as a 64-byte raw R‖S signature (RFC 7518 §3.4). No `exp`: APNs refuses tokens whose
/// `iat` is more than an hour old; ``APNsProviderTokenCache`` handles renewal.
public struct APNsJWT: Hashable, Sendable, CustomStringConvertible {
    /// The compact serialization `header.claims.signature`, sent as `authorization: bearer <token>`.
    /// A secret: never log it.
    public let token: String
    /// The 10-character Key ID (`kid`).
    public let keyID: String
    /// The 10-character Team ID (`iss`).
    public let teamID: String
    /// `iat`, in seconds since the epoch.
    public let issuedAt: Int64

    /// Signs a new token.
    /// - Parameters:
    ///   - keyID: the Key ID of `signingKey` from the developer portal.
    ///   - teamID: the developer account's Team ID.
    ///   - issuedAt: `iat`, seconds since the epoch (normally the current time).
    ///   - signingKey: the `.p8` key.
    /// - Throws: `APNsError` `.signingFailed` when OpenSSL cannot sign.
    public init(keyID: String, teamID: String, issuedAt: Int64, signingKey: APNsSigningKey) throws(APNsError) {
        let header = "{\"alg\":\"ES256\",\"kid\":\(JSONValue.quote(keyID))}"
        let claims = "{\"iss\":\(JSONValue.quote(teamID)),\"iat\":\(issuedAt)}"
        let signingInput = JSONWebToken.signingInput(headerJSON: header, claimsJSON: claims)
        self.token = JSONWebToken.compact(signingInput: signingInput, signature: try signingKey.sign(Array(signingInput.utf8)))
        self.keyID = keyID
        self.teamID = teamID
        self.issuedAt = issuedAt
    }

    /// Age in seconds at `nowSeconds` (seconds since the epoch).
    public func age(atSeconds nowSeconds: Int64) -> Int64 { nowSeconds - issuedAt }

    /// Key ID, team and `iat` only; never the token itself.
    public var description: String { "APNsJWT(kid: \(keyID), iss: \(teamID), iat: \(issuedAt))" }
}
