internal import COpenSSL

/// An EC P-256 public key for verifying ES256 signatures (the simulator's side of token auth).
public struct APNsPublicKey: Sendable {
    let key: OpenSSLKey

    init(key: OpenSSLKey) { self.key = key }

    /// Loads a SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    /// - Throws: `APNsError` `.invalidPublicKey` when it cannot be decoded or is not EC P-256.
    public init(pem: String) throws(APNsError) {
        ERR_clear_error()
        let loaded: OpaquePointer? = try OpenSSL.withMemoryBIO(Array(pem.utf8)) { bio in
            PEM_read_bio_PUBKEY(bio, nil, nil, nil)
        }
        guard let loaded else {
            throw APNsError(code: .invalidPublicKey, message: "cannot read the public key PEM: \(OpenSSL.drainErrors())")
        }
        key = OpenSSLKey(taking: loaded)
        if let what = key.describeIfNotP256() {
            throw APNsError(code: .invalidPublicKey, message: "the public key is \(what); ES256 needs EC P-256")
        }
    }

    /// The SubjectPublicKeyInfo PEM.
    public var pem: String { key.publicKeyPEM }
}
