internal import COpenSSL

/// One-shot message digests through OpenSSL: SHA-1 and SHA-256 on a context on the stack
/// (`SHA1_Init`/`SHA256_Init`, OpenSSL 3.0 manual page SHA256_Init(3), through the module's C shim),
/// HMAC through `HMAC`.
///
/// Used for deterministic ids (`UUID.v5`, SHA-1 as RFC 9562 §5.5 requires, one per notification) and
/// content digests (SHA-256). Not for passwords or keys. OpenSSL's EVP interface (`EVP_Digest`) gives
/// the same digests but allocates and frees two contexts per call, which cost several times the
/// hashing of the short messages hashed here.
public enum Digest {
    /// SHA-1 (FIPS 180-4) of `bytes`.
    /// - Parameter bytes: the message.
    /// - Returns: the 20-byte digest.
    public static func sha1(_ bytes: [UInt8]) -> [UInt8] {
        bytes.withUnsafeBytes { digest($0, length: 20, name: "SHA-1", shim_sha1) }
    }

    /// SHA-256 (FIPS 180-4) of `bytes`.
    /// - Parameter bytes: the message.
    /// - Returns: the 32-byte digest.
    public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        bytes.withUnsafeBytes { digest($0, length: 32, name: "SHA-256", shim_sha256) }
    }

    /// SHA-256 of bytes held elsewhere (a C library's buffer), without copying them.
    /// - Returns: the 32-byte digest.
    public static func sha256(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        digest(bytes, length: 32, name: "SHA-256", shim_sha256)
    }

    /// HMAC-SHA-256 (RFC 2104, FIPS 180-4) of `message` under `key`, through OpenSSL's one-shot `HMAC`.
    /// - Parameters:
    ///   - key: the secret, any length.
    ///   - message: the message.
    /// - Returns: the 32-byte MAC.
    public static func hmacSHA256(key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let result = key.withUnsafeBytes { keyBytes in
            message.withUnsafeBytes { input in
                output.withUnsafeMutableBufferPointer { out in
                    HMAC(EVP_sha256(), keyBytes.baseAddress, Int32(keyBytes.count), input.baseAddress?.assumingMemoryBound(to: UInt8.self),
                         input.count, out.baseAddress, &length)
                }
            }
        }
        precondition(result != nil, "OpenSSL HMAC(SHA-256) failed")
        return Array(output.prefix(Int(length)))
    }

    /// Compares two byte strings in time that depends only on their length (`CRYPTO_memcmp`), for
    /// secrets and MACs: a timing difference must not tell an attacker how many leading bytes matched.
    /// Different lengths compare unequal at once (lengths are not secret here: digests and MACs).
    public static func constantTimeEquals(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        guard !lhs.isEmpty else { return true }
        return lhs.withUnsafeBytes { a in rhs.withUnsafeBytes { b in CRYPTO_memcmp(a.baseAddress, b.baseAddress, a.count) == 0 } }
    }

    /// The low-level functions fail only on a null context or output, which cannot happen here: a
    /// precondition, not an error.
    private static func digest(
        _ bytes: UnsafeRawBufferPointer, length: Int, name: String,
        _ function: (UnsafeRawPointer?, Int, UnsafeMutablePointer<UInt8>?) -> Int32
    ) -> [UInt8] {
        _ = shim_openssl_prepare()
        return [UInt8](unsafeUninitializedCapacity: length) { output, count in
            let status = function(bytes.baseAddress, bytes.count, output.baseAddress)
            precondition(status == 1, "OpenSSL \(name) failed")
            count = length
        }
    }
}
