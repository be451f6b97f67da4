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
        digest(bytes, Algorithm.sha1.md, name: "SHA-1")
    }

    /// SHA-256 (FIPS 180-4) of `bytes`.
    /// - Parameter bytes: the message.
    /// - Returns: the 32-byte digest.
    public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        digest(bytes, Algorithm.sha256.md, name: "SHA-256")
    }

    /// SHA-256 of bytes held elsewhere (a C library's buffer), without copying them.
    /// - Returns: the 32-byte digest.
    public static func sha256(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        _ = shim_openssl_prepare()
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let status = output.withUnsafeMutableBufferPointer { out in
            EVP_Digest(bytes.baseAddress, bytes.count, out.baseAddress, &length, Algorithm.sha256.md, nil)
        }
        precondition(status == 1, "OpenSSL EVP_Digest(SHA-256) failed")
        return Array(output.prefix(Int(length)))
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

    /// An algorithm fetched from OpenSSL's default provider once per process (`EVP_MD_fetch`, OpenSSL
    /// 3.0 manual page crypto(7), "Explicit fetching"): `EVP_sha1()` and `EVP_sha256()` would make
    /// OpenSSL look the implementation up again on every digest. Never freed; OpenSSL's methods are
    /// immutable and shared between threads.
    private struct Algorithm: @unchecked Sendable {
        let md: OpaquePointer?
        init(_ name: String) {
            _ = shim_openssl_prepare()
            md = EVP_MD_fetch(nil, name, nil)
            precondition(md != nil, "OpenSSL has no \(name) in its default provider")
        }
        static let sha1 = Algorithm("SHA1")
        static let sha256 = Algorithm("SHA256")
    }

    /// `EVP_Digest` fails only when OpenSSL cannot allocate its context or the algorithm is missing
    /// from the default provider, which no caller can recover from: a precondition, not an error.
    private static func digest(_ bytes: [UInt8], _ algorithm: OpaquePointer?, name: String) -> [UInt8] {
        _ = shim_openssl_prepare()
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
