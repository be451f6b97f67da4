internal import COpenSSL

/// An EC P-256 public key for verifying ES256 signatures (RFC 7518 §3.4): the simulator's side of
/// APNs token auth, and the registration service's check of its callers' JWTs.
public struct ES256PublicKey: Sendable {
    let key: OpenSSLKey

    /// The public half of `key` (an EC P-256 key).
    package init(key: OpenSSLKey) { self.key = key }

    /// Loads a SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    /// - Throws: `ES256Error` when it cannot be decoded or is not EC P-256.
    public init(pem: String) throws(ES256Error) {
        ERR_clear_error()
        let loaded: OpaquePointer? = OpenSSL.withMemoryBIO(Array(pem.utf8)) { bio in
            PEM_read_bio_PUBKEY(bio, nil, nil, nil)
        }
        guard let loaded else {
            throw ES256Error("cannot read the public key PEM: \(OpenSSL.drainErrors())")
        }
        key = OpenSSLKey(taking: loaded)
        if let what = key.describeIfNotP256() {
            throw ES256Error("the public key is \(what); ES256 needs EC P-256")
        }
    }

    /// The SubjectPublicKeyInfo PEM.
    public var pem: String { key.publicKeyPEM }
}
