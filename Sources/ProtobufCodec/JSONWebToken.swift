/// A JWS in compact serialization (RFC 7515 §7.1) carrying JWT claims (RFC 7519): the project's one
/// JWT encoder and decoder, shared by the APNs client (provider tokens), the simulator and the
/// registration service (its callers' tokens). No cryptography here: signing and verifying live with
/// the keys (the APNs module's ES256 keys, the registration service's HS256 secrets), and policy
/// (which `alg` and key, which claims) stays with the caller.
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
    /// The header object.
    public let header: JSONObject
    /// The claims object.
    public let claims: JSONObject

    /// Parses `token` (no `Bearer ` prefix).
    /// - Throws: `ParseError` when it is not three base64url parts whose first two are JSON objects.
    public init(parsing token: String) throws(ParseError) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw ParseError(message: "a JWT has 3 dot-separated parts, this one has \(parts.count)") }
        guard let headerBytes = Base64.decode(parts[0], alphabet: .url), let claimsBytes = Base64.decode(parts[1], alphabet: .url) else {
            throw ParseError(message: "the JWT header or claims are not base64url")
        }
        guard case .object(let header)? = try? JSONValue(parsing: headerBytes) else { throw ParseError(message: "the JWT header is not a JSON object") }
        guard case .object(let claims)? = try? JSONValue(parsing: claimsBytes) else { throw ParseError(message: "the JWT claims are not a JSON object") }
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

    /// What a signature covers: `BASE64URL(headerJSON) '.' BASE64URL(claimsJSON)` (RFC 7515 §7.1).
    public static func signingInput(headerJSON: String, claimsJSON: String) -> String {
        Base64.encodeURL(Array(headerJSON.utf8)) + "." + Base64.encodeURL(Array(claimsJSON.utf8))
    }

    /// The compact serialization: `signingInput '.' BASE64URL(signature)`.
    public static func compact(signingInput: String, signature: [UInt8]) -> String {
        signingInput + "." + Base64.encodeURL(signature)
    }
}
