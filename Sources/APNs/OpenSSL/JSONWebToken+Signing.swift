import ProtobufCodec

extension JSONWebToken {
    /// Signs `claimsJSON` with ES256 (raw R‖S) under `key`.
    /// - Throws: `APNsError` `.signingFailed` when OpenSSL cannot sign.
    public static func signES256(headerJSON: String, claimsJSON: String, key: APNsSigningKey) throws(APNsError) -> String {
        let input = signingInput(headerJSON: headerJSON, claimsJSON: claimsJSON)
        return compact(signingInput: input, signature: try key.sign(Array(input.utf8)))
    }
}
