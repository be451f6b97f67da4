import ProtobufCodec
import ServiceCore

/// A JWS in compact serialization (RFC 7515 §7.1) carrying JWT claims (RFC 7519): the parsing and
/// signature checks that APNs provider tokens (``APNsJWTVerifier``) and the registration service's
/// user-bound tokens share. Policy (which `alg` and key, which claims) stays with the caller.
public struct JSONWebToken: Sendable {
    /// Why a token could not be parsed.
    public struct ParseError: Error, Sendable, CustomStringConvertible {
        /// What is wrong, never the token itself.
        public let message: String
        public var description: String { message }
    }

    /// The header's `alg`, nil when absent or not a string.
    public let algorithm: String?
    /// The header's `kid`, nil when absent or not a string.
    public let keyID: String?
    /// The exact bytes the signature covers: `BASE64URL(header) || '.' || BASE64URL(claims)`.
    public let signingInput: [UInt8]
    /// The decoded signature bytes.
    public let signature: [UInt8]
    /// The decoded header JSON text.
    public let headerJSON: String
    /// The decoded claims JSON text.
    public let claimsJSON: String

    let header: [String: JSONValue]
    let claims: [String: JSONValue]

    /// Parses `token` (no `Bearer ` prefix).
    /// - Throws: `ParseError` when it is not three base64url parts whose first two are JSON objects.
    public init(parsing token: String) throws(ParseError) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw ParseError(message: "a JWT has 3 dot-separated parts, this one has \(parts.count)") }
        guard let headerBytes = Base64.decode(parts[0], alphabet: .url), let claimsBytes = Base64.decode(parts[1], alphabet: .url) else {
            throw ParseError(message: "the JWT header or claims are not base64url")
        }
        guard case .object(let header)? = try? JSONValue.parse(headerBytes) else { throw ParseError(message: "the JWT header is not a JSON object") }
        guard case .object(let claims)? = try? JSONValue.parse(claimsBytes) else { throw ParseError(message: "the JWT claims are not a JSON object") }
        guard let signature = Base64.decode(parts[2], alphabet: .url) else { throw ParseError(message: "the JWT signature is not base64url") }
        self.header = header
        self.claims = claims
        if case .string(let algorithm)? = header["alg"] { self.algorithm = algorithm } else { self.algorithm = nil }
        if case .string(let keyID)? = header["kid"] { self.keyID = keyID } else { self.keyID = nil }
        self.signingInput = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        self.signature = signature
        self.headerJSON = String(decoding: headerBytes, as: UTF8.self)
        self.claimsJSON = String(decoding: claimsBytes, as: UTF8.self)
    }

    /// A string claim (`sub`, `iss`, `aud` when a string); nil when absent or of another type.
    public func stringClaim(_ name: String) -> String? {
        if case .string(let value)? = claims[name] { return value }
        return nil
    }

    /// The strings of a claim that is a string or an array of strings (`aud`, RFC 7519 §4.1.3).
    public func stringsClaim(_ name: String) -> [String] {
        switch claims[name] {
        case .string(let value)?: return [value]
        case .array(let values)?: return values.compactMap { if case .string(let value) = $0 { value } else { nil } }
        default: return []
        }
    }

    /// An integer claim (`iat`, `exp`, `nbf`: NumericDate seconds); nil when absent, fractional or not a number.
    public func integerClaim(_ name: String) -> Int64? { claims[name]?.integerValue }

    /// Whether the claims have `name` at all.
    public func hasClaim(_ name: String) -> Bool { claims[name] != nil }

    /// Whether the signature is a valid ES256 signature (ECDSA P-256 + SHA-256, RFC 7518 §3.4) by
    /// `key`, as 64-byte raw R‖S (what JWS specifies) or, when `acceptDER`, ASN.1 DER.
    public func verifiesES256(with key: APNsPublicKey, acceptDER: Bool = false) -> Bool {
        let der: [UInt8]
        if signature.count == 64, let converted = OpenSSLKey.derSignature(fromRaw: signature) {
            der = converted
        } else if acceptDER, signature.first == 0x30, OpenSSLKey.rawSignature(fromDER: signature) != nil {
            der = signature
        } else {
            return false
        }
        return key.key.verifyES256(signingInput, derSignature: der)
    }

    /// Whether the signature is the HMAC-SHA-256 of the signing input under `secret` (HS256,
    /// RFC 7518 §3.2), compared in constant time.
    public func verifiesHS256(secret: [UInt8]) -> Bool {
        Digest.constantTimeEquals(Digest.hmacSHA256(key: secret, signingInput), signature)
    }

    /// Signs `claimsJSON` with HS256 (tests and development tools; the service only verifies).
    /// - Parameters:
    ///   - headerJSON: the header object's JSON text, with `"alg":"HS256"`.
    ///   - claimsJSON: the claims object's JSON text.
    ///   - secret: the shared secret.
    public static func signHS256(headerJSON: String, claimsJSON: String, secret: [UInt8]) -> String {
        let input = Base64.encodeURL(Array(headerJSON.utf8)) + "." + Base64.encodeURL(Array(claimsJSON.utf8))
        return input + "." + Base64.encodeURL(Digest.hmacSHA256(key: secret, Array(input.utf8)))
    }

    /// Signs `claimsJSON` with ES256 (raw R‖S) under `key`.
    /// - Throws: `APNsError` `.signingFailed` when OpenSSL cannot sign.
    public static func signES256(headerJSON: String, claimsJSON: String, key: APNsSigningKey) throws(APNsError) -> String {
        let input = Base64.encodeURL(Array(headerJSON.utf8)) + "." + Base64.encodeURL(Array(claimsJSON.utf8))
        return input + "." + Base64.encodeURL(try key.sign(Array(input.utf8)))
    }
}
