import ProtobufCodec
import ServiceCore

extension JSONWebToken {
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
        let input = signingInput(headerJSON: headerJSON, claimsJSON: claimsJSON)
        return compact(signingInput: input, signature: Digest.hmacSHA256(key: secret, Array(input.utf8)))
    }
}
