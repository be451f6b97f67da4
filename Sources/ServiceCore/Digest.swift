internal import COpenSSL

/// One-shot message digests through OpenSSL's EVP API (`EVP_Digest`, OpenSSL 3.0 manual page
/// EVP_DigestInit(3)).
///
/// Used for deterministic ids (`UUID.v5`, SHA-1 as RFC 9562 §5.5 requires) and content digests
/// (SHA-256). Not for passwords or keys.
public enum Digest {
    /// SHA-1 (FIPS 180-4) of `bytes`.
    /// - Parameter bytes: the message.
    /// - Returns: the 20-byte digest.
    public static func sha1(_ bytes: [UInt8]) -> [UInt8] {
        digest(bytes, EVP_sha1(), name: "SHA-1")
    }

    /// SHA-256 (FIPS 180-4) of `bytes`.
    /// - Parameter bytes: the message.
    /// - Returns: the 32-byte digest.
    public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        digest(bytes, EVP_sha256(), name: "SHA-256")
    }

    /// `EVP_Digest` fails only when OpenSSL cannot allocate its context or the algorithm is missing
    /// from the default provider, which no caller can recover from: a precondition, not an error.
    private static func digest(_ bytes: [UInt8], _ algorithm: OpaquePointer?, name: String) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let status = bytes.withUnsafeBytes { input in
            output.withUnsafeMutableBufferPointer { out in
                EVP_Digest(input.baseAddress, input.count, out.baseAddress, &length, algorithm, nil)
            }
        }
        precondition(status == 1, "OpenSSL EVP_Digest(\(name)) failed")
        return Array(output.prefix(Int(length)))
    }
}
