import APNs
import ES256
import ProtobufCodec

/// Verifies APNs provider tokens the way APNs does, for the simulator (docs/apns-protocol.md §4).
///
/// Accepts ES256 signatures both as 64-byte raw R‖S (JWS, RFC 7518 §3.4) and as ASN.1 DER, because
/// APNs accepts both (Apple's own `openssl dgst -sha256 -sign` recipe makes DER). Checks the structure
/// and the signature; the one-hour `iat` rule is left to the caller (``APNsVerifiedJWT/age(atSeconds:)``).
public struct APNsJWTVerifier: Sendable {
    private let keysByKeyID: [String: ES256PublicKey]
    private let anyKey: ES256PublicKey?

    /// Verifies every token against one public key, whatever its `kid`.
    /// - Throws: `APNsError` `.invalidPublicKey` when the PEM is not an EC P-256 public key.
    public init(publicKeyPEM: String) throws(APNsError) {
        do {
            anyKey = try ES256PublicKey(pem: publicKeyPEM)
        } catch {
            throw APNsError(code: .invalidPublicKey, message: error.message)
        }
        keysByKeyID = [:]
    }

    /// Verifies each token against the key registered for its `kid`; an unknown `kid` fails with
    /// `.badSignature` (APNs answers `InvalidProviderToken`).
    public init(publicKeysByKeyID: [String: ES256PublicKey]) {
        anyKey = nil
        keysByKeyID = publicKeysByKeyID
    }

    /// Checks `token` (the JWT compact form, without `bearer `).
    /// - Returns: the decoded header and claims.
    /// - Throws: `APNsError` with code `.malformedProviderToken` (not three base64url parts of JSON
    ///   objects, or a signature neither 64 bytes nor DER), `.unsupportedAlgorithm` (`alg` not `ES256`),
    ///   `.missingKeyID`, `.missingIssuer`, `.nonIntegerIssuedAt` (missing, string or fractional `iat`),
    ///   or `.badSignature`; every one carries reason `InvalidProviderToken`.
    public func verify(_ token: String) throws(APNsError) -> APNsVerifiedJWT {
        func fail(_ code: APNsError.Code, _ message: String) -> APNsError {
            APNsError(code: code, message: message, reason: .invalidProviderToken)
        }
        let jwt: JSONWebToken
        do {
            jwt = try JSONWebToken(parsing: token)
        } catch {
            throw fail(.malformedProviderToken, error.message)
        }
        guard jwt.algorithm == "ES256" else {
            throw fail(.unsupportedAlgorithm, "the JWT header's alg must be \"ES256\"")
        }
        guard let keyID = jwt.keyID, !keyID.isEmpty else {
            throw fail(.missingKeyID, "the JWT header has no kid (Key ID)")
        }
        guard let issuer = jwt.stringClaim("iss"), !issuer.isEmpty else {
            throw fail(.missingIssuer, "the JWT claims have no iss (Team ID)")
        }
        guard let issuedAt = jwt.integerClaim("iat") else {
            throw fail(.nonIntegerIssuedAt, !jwt.hasClaim("iat")
                ? "the JWT claims have no iat"
                : "the JWT claims' iat must be an integer number of seconds")
        }
        let signature = jwt.signature
        guard !signature.isEmpty else {
            throw fail(.malformedProviderToken, "the JWT signature is not base64url")
        }
        guard let encoding = jwt.es256SignatureEncoding else {
            throw fail(.malformedProviderToken, "the JWT signature is \(signature.count) bytes: neither raw R‖S (64 bytes) nor DER")
        }
        guard let key = anyKey ?? keysByKeyID[keyID] else {
            throw fail(.badSignature, "no public key is registered for kid \(keyID)")
        }
        guard jwt.verifiesES256(with: key, acceptDER: true) else {
            throw fail(.badSignature, "the JWT signature does not verify with the key for kid \(keyID)")
        }
        return APNsVerifiedJWT(
            keyID: keyID, issuer: issuer, issuedAt: issuedAt, signatureEncoding: encoding,
            headerJSON: jwt.headerJSON, claimsJSON: jwt.claimsJSON)
    }
}
