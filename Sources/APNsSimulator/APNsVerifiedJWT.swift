import APNs
import ES256

/// A provider token whose structure and signature checked out.
public struct APNsVerifiedJWT: Hashable, Sendable {
    /// How the signature was encoded.
    public typealias SignatureEncoding = ES256SignatureEncoding

    /// `kid` from the header.
    public let keyID: String
    /// `iss` (Team ID) from the claims.
    public let issuer: String
    /// `iat`, seconds since the epoch.
    public let issuedAt: Int64
    /// The signature's encoding.
    public let signatureEncoding: SignatureEncoding
    /// The decoded header JSON text.
    public let headerJSON: String
    /// The decoded claims JSON text.
    public let claimsJSON: String

    /// Seconds since `iat` at `nowSeconds`; APNs refuses tokens older than 3600 s with
    /// `ExpiredProviderToken`.
    public func age(atSeconds nowSeconds: Int64) -> Int64 { nowSeconds - issuedAt }
}
