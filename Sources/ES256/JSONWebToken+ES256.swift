import ProtobufCodec

/// How an ES256 signature is encoded.
public enum ES256SignatureEncoding: Hashable, Sendable {
    /// 64-byte R‖S, as JWS specifies (RFC 7518 §3.4).
    case raw
    /// ASN.1 DER `ECDSA-Sig-Value`, which APNs also accepts.
    case der
}

extension JSONWebToken {
    /// The encoding of the signature as an ES256 signature; nil when it is neither 64-byte R‖S nor DER.
    public var es256SignatureEncoding: ES256SignatureEncoding? {
        if signature.count == 64, OpenSSLKey.derSignature(fromRaw: signature) != nil { return .raw }
        if signature.first == 0x30, OpenSSLKey.rawSignature(fromDER: signature) != nil { return .der }
        return nil
    }

    /// Whether the signature is a valid ES256 signature (ECDSA P-256 + SHA-256, RFC 7518 §3.4) by
    /// `key`, as 64-byte raw R‖S (what JWS specifies) or, when `acceptDER`, ASN.1 DER.
    public func verifiesES256(with key: ES256PublicKey, acceptDER: Bool = false) -> Bool {
        let der: [UInt8]
        switch es256SignatureEncoding {
        case .raw?: guard let converted = OpenSSLKey.derSignature(fromRaw: signature) else { return false }; der = converted
        case .der? where acceptDER: der = signature
        default: return false
        }
        return key.key.verifyES256(signingInput, derSignature: der)
    }
}
