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
        let signingInput = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(claims.utf8))
        let signature = try signingKey.sign(Array(signingInput.utf8))
        self.token = signingInput + "." + Base64URL.encode(signature)
        self.keyID = keyID
        self.teamID = teamID
        self.issuedAt = issuedAt
    }

    /// Age in seconds at `nowSeconds` (seconds since the epoch).
    public func age(atSeconds nowSeconds: Int64) -> Int64 { nowSeconds - issuedAt }

    /// Key ID, team and `iat` only; never the token itself.
    public var description: String { "APNsJWT(kid: \(keyID), iss: \(teamID), iat: \(issuedAt))" }
}

/// base64url without padding (RFC 4648 §5), as JWS uses it (RFC 7515 §2); the project's one
/// base64url encoder (the dispatcher derives collapse ids with it too).
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The base64url text of `bytes`, without `=` padding: 4 characters per 3 bytes, 2 or 3 for a
    /// final 1 or 2 bytes (16 bytes → 22 characters).
    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= bytes.count {
            let n = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out += [alphabet[Int(n >> 18 & 63)], alphabet[Int(n >> 12 & 63)], alphabet[Int(n >> 6 & 63)], alphabet[Int(n & 63)]]
            index += 3
        }
        let rest = bytes.count - index
        if rest == 1 {
            let n = UInt32(bytes[index]) << 16
            out += [alphabet[Int(n >> 18 & 63)], alphabet[Int(n >> 12 & 63)]]
        } else if rest == 2 {
            let n = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            out += [alphabet[Int(n >> 18 & 63)], alphabet[Int(n >> 12 & 63)], alphabet[Int(n >> 6 & 63)]]
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes unpadded base64url; `nil` on any character outside the alphabet or an impossible length.
    public static func decode(_ text: Substring) -> [UInt8]? { decode(Array(text.utf8), urlSafe: true) }

    /// Decodes standard or URL-safe base64, with or without `=` padding; `nil` when malformed.
    public static func decode(_ input: [UInt8], urlSafe: Bool) -> [UInt8]? {
        var text = input
        while text.last == UInt8(ascii: "=") { text.removeLast() }
        guard text.count % 4 != 1 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(text.count * 3 / 4)
        var buffer: UInt32 = 0
        var bits = 0
        for byte in text {
            let value: UInt32
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = UInt32(byte - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = UInt32(byte - UInt8(ascii: "a") + 26)
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = UInt32(byte - UInt8(ascii: "0") + 52)
            case UInt8(ascii: "-") where urlSafe, UInt8(ascii: "+") where !urlSafe: value = 62
            case UInt8(ascii: "_") where urlSafe, UInt8(ascii: "/") where !urlSafe: value = 63
            default: return nil
            }
            buffer = buffer << 6 | value
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits)))
            }
        }
        return out
    }
}
