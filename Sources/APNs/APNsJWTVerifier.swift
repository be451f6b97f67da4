/// Verifies APNs provider tokens the way APNs does, for the simulator (docs/apns-protocol.md §4).
///
/// Accepts ES256 signatures both as 64-byte raw R‖S (JWS, RFC 7518 §3.4) and as ASN.1 DER, because
/// APNs accepts both (Apple's own `openssl dgst -sha256 -sign` recipe makes DER). Checks the structure
/// and the signature; the one-hour `iat` rule is left to the caller (``APNsVerifiedJWT/age(atSeconds:)``).
public struct APNsJWTVerifier: Sendable {
    private let keysByKeyID: [String: APNsPublicKey]
    private let anyKey: APNsPublicKey?

    /// Verifies every token against one public key, whatever its `kid`.
    /// - Throws: `APNsError` `.invalidPublicKey` when the PEM is not an EC P-256 public key.
    public init(publicKeyPEM: String) throws(APNsError) {
        anyKey = try APNsPublicKey(pem: publicKeyPEM)
        keysByKeyID = [:]
    }

    /// Verifies each token against the key registered for its `kid`; an unknown `kid` fails with
    /// `.badSignature` (APNs answers `InvalidProviderToken`).
    public init(publicKeysByKeyID: [String: APNsPublicKey]) {
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
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw fail(.malformedProviderToken, "a JWT has 3 dot-separated parts, this one has \(parts.count)")
        }
        guard let headerBytes = Base64URL.decode(parts[0]), let claimsBytes = Base64URL.decode(parts[1]) else {
            throw fail(.malformedProviderToken, "the JWT header or claims are not base64url")
        }
        guard case .object(let header)? = try? JSONValue.parse(headerBytes) else {
            throw fail(.malformedProviderToken, "the JWT header is not a JSON object")
        }
        guard case .object(let claims)? = try? JSONValue.parse(claimsBytes) else {
            throw fail(.malformedProviderToken, "the JWT claims are not a JSON object")
        }
        guard case .string(let algorithm)? = header["alg"], algorithm == "ES256" else {
            throw fail(.unsupportedAlgorithm, "the JWT header's alg must be \"ES256\"")
        }
        guard case .string(let keyID)? = header["kid"], !keyID.isEmpty else {
            throw fail(.missingKeyID, "the JWT header has no kid (Key ID)")
        }
        guard case .string(let issuer)? = claims["iss"], !issuer.isEmpty else {
            throw fail(.missingIssuer, "the JWT claims have no iss (Team ID)")
        }
        guard let issuedAt = claims["iat"]?.integerValue else {
            throw fail(.nonIntegerIssuedAt, claims["iat"] == nil
                ? "the JWT claims have no iat"
                : "the JWT claims' iat must be an integer number of seconds")
        }
        guard let signature = Base64URL.decode(parts[2]), !signature.isEmpty else {
            throw fail(.malformedProviderToken, "the JWT signature is not base64url")
        }
        let encoding: APNsVerifiedJWT.SignatureEncoding
        let der: [UInt8]
        if signature.count == 64 {
            guard let converted = OpenSSLKey.derSignature(fromRaw: signature) else {
                throw fail(.malformedProviderToken, "the 64-byte JWT signature cannot be converted")
            }
            encoding = .raw
            der = converted
        } else if signature.first == 0x30, OpenSSLKey.rawSignature(fromDER: signature) != nil {
            encoding = .der
            der = signature
        } else {
            throw fail(.malformedProviderToken, "the JWT signature is \(signature.count) bytes: neither raw R‖S (64 bytes) nor DER")
        }
        guard let key = anyKey ?? keysByKeyID[keyID] else {
            throw fail(.badSignature, "no public key is registered for kid \(keyID)")
        }
        let signingInput = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        guard key.key.verifyES256(signingInput, derSignature: der) else {
            throw fail(.badSignature, "the JWT signature does not verify with the key for kid \(keyID)")
        }
        return APNsVerifiedJWT(
            keyID: keyID, issuer: issuer, issuedAt: issuedAt, signatureEncoding: encoding,
            headerJSON: String(decoding: headerBytes, as: UTF8.self), claimsJSON: String(decoding: claimsBytes, as: UTF8.self))
    }
}
