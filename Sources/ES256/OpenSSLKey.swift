internal import COpenSSL

/// Helpers shared by the OpenSSL adapters of this module and of the APNs client's credentials. OpenSSL's
/// error queue is per thread: every operation clears it first and reads it on the same thread with no
/// suspension in between (docs/stack-notes.md).
package enum OpenSSL {
    /// Drains the thread's error queue into one line, e.g. `error:1E08010C:DECODER routines::unsupported`.
    package static func drainErrors() -> String {
        var lines: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            lines.append(String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return lines.isEmpty ? "no OpenSSL error reported" : lines.joined(separator: "; ")
    }

    /// Runs `body` with a read-only memory BIO over `bytes`; nil when the BIO cannot be made (out of
    /// memory: the caller reports it with `drainErrors()` as it reports a `nil` from `body`).
    package static func withMemoryBIO<T>(_ bytes: [UInt8], _ body: (OpaquePointer) -> T?) -> T? {
        _ = shim_openssl_prepare()  // no exit handler (COpenSSL's shim.h)
        guard let bio = BIO_new(BIO_s_mem()) else { return nil }
        defer { BIO_free(bio) }
        guard bytes.isEmpty || BIO_write(bio, bytes, Int32(bytes.count)) == Int32(bytes.count) else { return nil }
        return body(bio)
    }

    /// Writes through `write` into a memory BIO and returns its contents as text (PEM).
    package static func pem(_ write: (OpaquePointer) -> Int32) -> String? {
        _ = shim_openssl_prepare()
        guard let bio = BIO_new(BIO_s_mem()) else { return nil }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else { return nil }
        var pointer: UnsafeMutablePointer<CChar>?
        let length = shim_BIO_get_mem_data(bio, &pointer)
        guard let pointer, length > 0 else { return nil }
        return String(decoding: UnsafeRawBufferPointer(start: pointer, count: Int(length)), as: UTF8.self)
    }

}

/// Owns one `EVP_PKEY` (an EC P-256 key of ES256, or the private key of an APNs client certificate).
///
/// `@unchecked Sendable`: after construction the key is only read (signing, verifying, encoding);
/// OpenSSL 3 allows concurrent read-only use of an `EVP_PKEY` from several threads
/// (openssl-threads(7): "objects … may be used concurrently for read operations").
package final class OpenSSLKey: @unchecked Sendable {
    package let pointer: OpaquePointer

    /// Takes ownership of `pointer`.
    package init(taking pointer: OpaquePointer) { self.pointer = pointer }

    deinit { EVP_PKEY_free(pointer) }

    /// True for an EC key on P-256 (prime256v1); otherwise a description of what it is.
    package func describeIfNotP256() -> String? {
        guard EVP_PKEY_get_base_id(pointer) == shim_EVP_PKEY_EC() else {
            let name = EVP_PKEY_get0_type_name(pointer).map { String(cString: $0) } ?? "unknown"
            return "a \(name) key, not EC"
        }
        var buffer = [CChar](repeating: 0, count: 80)
        var length = 0
        guard EVP_PKEY_get_group_name(pointer, &buffer, buffer.count, &length) == 1 else { return "an EC key on an unknown curve" }
        let group = String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return group == "prime256v1" || group == "P-256" ? nil : "an EC key on curve \(group), not P-256"
    }

    /// The SubjectPublicKeyInfo as PEM (`-----BEGIN PUBLIC KEY-----`).
    package var publicKeyPEM: String { OpenSSL.pem { PEM_write_bio_PUBKEY($0, pointer) } ?? "" }

    /// The private key as unencrypted PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`). A secret.
    package var privateKeyPEM: String {
        OpenSSL.pem { PEM_write_bio_PrivateKey($0, pointer, nil, nil, 0, nil, nil) } ?? ""
    }

    /// ECDSA-SHA256 signature of `message` as 64-byte raw R‖S (RFC 7518 §3.4).
    /// - Throws: `ES256Error` when OpenSSL cannot sign.
    package func signES256(_ message: [UInt8]) throws(ES256Error) -> [UInt8] {
        ERR_clear_error()
        guard let context = EVP_MD_CTX_new() else {
            throw ES256Error("EVP_MD_CTX_new failed: \(OpenSSL.drainErrors())")
        }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, pointer) == 1 else {
            throw ES256Error("EVP_DigestSignInit failed: \(OpenSSL.drainErrors())")
        }
        var length = 0
        guard EVP_DigestSign(context, nil, &length, message, message.count) == 1 else {
            throw ES256Error("EVP_DigestSign (size) failed: \(OpenSSL.drainErrors())")
        }
        var der = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &der, &length, message, message.count) == 1 else {
            throw ES256Error("EVP_DigestSign failed: \(OpenSSL.drainErrors())")
        }
        // EVP_DigestSign yields DER (SEQUENCE of two INTEGERs); JWS needs each half left-padded to
        // 32 bytes, or about 1 signature in 128 comes out short (docs/stack-notes.md).
        guard let raw = Self.rawSignature(fromDER: Array(der.prefix(length))) else {
            throw ES256Error("could not decode the DER ECDSA signature: \(OpenSSL.drainErrors())")
        }
        return raw
    }

    /// Verifies an ECDSA-SHA256 `signature` (DER) over `message`.
    package func verifyES256(_ message: [UInt8], derSignature: [UInt8]) -> Bool {
        ERR_clear_error()
        defer { ERR_clear_error() }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, pointer) == 1 else { return false }
        return EVP_DigestVerify(context, derSignature, derSignature.count, message, message.count) == 1
    }

    /// DER `ECDSA-Sig-Value` → 64-byte R‖S; `nil` when malformed or a half exceeds 32 bytes.
    package static func rawSignature(fromDER der: [UInt8]) -> [UInt8]? {
        _ = shim_openssl_prepare()
        return der.withUnsafeBufferPointer { buffer -> [UInt8]? in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let signature = d2i_ECDSA_SIG(nil, &cursor, buffer.count) else { return nil }
            defer { ECDSA_SIG_free(signature) }
            var r: OpaquePointer?
            var s: OpaquePointer?
            ECDSA_SIG_get0(signature, &r, &s)
            var raw = [UInt8](repeating: 0, count: 64)
            let written = raw.withUnsafeMutableBufferPointer { out in
                (BN_bn2binpad(r, out.baseAddress, 32), BN_bn2binpad(s, out.baseAddress! + 32, 32))
            }
            return written == (32, 32) ? raw : nil
        }
    }

    /// 64-byte R‖S → DER `ECDSA-Sig-Value`; `nil` on failure.
    package static func derSignature(fromRaw raw: [UInt8]) -> [UInt8]? {
        _ = shim_openssl_prepare()
        guard raw.count == 64, let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, 32, nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        guard let r, let s, ECDSA_SIG_set0(signature, r, s) == 1 else {
            BN_free(r)
            BN_free(s)
            return nil
        }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        return written == length ? der : nil
    }
}
