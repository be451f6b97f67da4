internal import COpenSSL
import ES256
import Foundation
import ServiceCore

/// A provider certificate and its private key, for certificate-based (mutual TLS) APNs connections
/// (docs/apns-protocol.md §5).
///
/// Loads PEM (certificate, optionally followed by its chain, plus a private key) or PKCS#12 (`.p12`).
/// Exposes the subject (whose UID is the topic of an MDM push certificate), the topics listed in
/// Apple's extension 1.2.840.113635.100.6.3.6, and the expiry. Immutable; safe to share.
public final class APNsCertificateCredentials: Sendable {
    private let certificate: X509Handle
    private let chain: [X509Handle]
    private let key: OpenSSLKey

    /// The subject distinguished name in RFC 2253 form, e.g. `UID=com.example.app,CN=Apple Push Services: com.example.app,…`.
    public let subject: String
    /// The subject's UID attribute (OID 0.9.2342.19200300.100.1.1): the bundle ID of an APNs
    /// certificate, and the topic of an MDM push certificate; `nil` when absent.
    public let subjectUserID: String?
    /// Topics from Apple's extension 1.2.840.113635.100.6.3.6 (e.g. the bundle ID, `<id>.voip`,
    /// `<id>.complication`); empty when the certificate has no such extension.
    public let topics: [String]
    /// The end of the validity period (`notAfter`), in seconds since the epoch.
    public let notAfter: Int64
    /// The start of the validity period (`notBefore`), in seconds since the epoch.
    public let notBefore: Int64

    /// Loads PEM text.
    /// - Parameters:
    ///   - certificatePEM: one or more `CERTIFICATE` blocks; the first is the leaf, the rest its chain.
    ///   - privateKeyPEM: the leaf's private key (PKCS#8, traditional RSA/EC, or encrypted).
    ///   - privateKeyPassword: the password of an encrypted key.
    /// - Throws: `APNsError` `.invalidCertificate` when either cannot be read or they do not match.
    public convenience init(certificatePEM: String, privateKeyPEM: String, privateKeyPassword: String? = nil) throws(APNsError) {
        _ = shim_openssl_prepare()  // no exit handler (COpenSSL's shim.h)
        ERR_clear_error()
        let certificates: [X509Handle] = OpenSSL.withMemoryBIO(Array(certificatePEM.utf8)) { bio in
            var result: [X509Handle] = []
            while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) { result.append(X509Handle(taking: certificate)) }
            return result
        } ?? []
        ERR_clear_error()  // the loop ends on a "no start line" error
        guard let leaf = certificates.first else {
            throw APNsError(code: .invalidCertificate, message: "no PEM CERTIFICATE block could be read")
        }
        let loaded: OpaquePointer? = OpenSSL.withMemoryBIO(Array(privateKeyPEM.utf8)) { bio in
            if let privateKeyPassword {
                return privateKeyPassword.withCString { password in
                    PEM_read_bio_PrivateKey(bio, nil, nil, UnsafeMutableRawPointer(mutating: password))
                }
            }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let loaded else {
            throw APNsError(code: .invalidCertificate, message: "cannot read the private key PEM (wrong password or not a key): \(OpenSSL.drainErrors())")
        }
        try self.init(certificate: leaf, chain: Array(certificates.dropFirst()), key: OpenSSLKey(taking: loaded))
    }

    /// Loads PKCS#12 (`.p12`) bytes. Files exported by macOS Keychain often use RC2/3DES, which
    /// OpenSSL 3 keeps in its `legacy` provider: when decoding fails, the `legacy` and `default`
    /// providers are loaded (once, process-wide) and decoding is tried again.
    /// - Parameters:
    ///   - pkcs12: the file's bytes (DER).
    ///   - password: the export password (may be empty).
    /// - Throws: `APNsError` `.invalidPKCS12` (wrong password, corrupt, unsupported cipher) or
    ///   `.invalidCertificate` (no certificate or key inside, or they do not match).
    public convenience init(pkcs12: [UInt8], password: String) throws(APNsError) {
        var parsed = Self.parsePKCS12(pkcs12, password: password)
        if case .failure = parsed, LegacyProvider.loaded {
            parsed = Self.parsePKCS12(pkcs12, password: password)
        }
        let (certificate, key, chain) = try parsed.get()
        try self.init(certificate: certificate, chain: chain, key: key)
    }

    /// Loads a PKCS#12 file.
    /// - Throws: `APNsError` as ``init(pkcs12:password:)``, or `.invalidPKCS12` when it cannot be read.
    public convenience init(pkcs12File path: String, password: String) throws(APNsError) {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw APNsError(code: .invalidPKCS12, message: "cannot read the PKCS#12 file \(path)")
        }
        try self.init(pkcs12: Array(data), password: password)
    }

    private init(certificate: X509Handle, chain: [X509Handle], key: OpenSSLKey) throws(APNsError) {
        ERR_clear_error()
        guard X509_check_private_key(certificate.pointer, key.pointer) == 1 else {
            throw APNsError(code: .invalidCertificate, message: "the private key does not match the certificate: \(OpenSSL.drainErrors())")
        }
        self.certificate = certificate
        self.chain = chain
        self.key = key
        let name = X509_get_subject_name(certificate.pointer)
        subject = OpenSSL.pem { X509_NAME_print_ex($0, name, 0, shim_XN_FLAG_RFC2253()) >= 0 ? 1 : 0 } ?? ""
        subjectUserID = Self.userID(name)
        topics = Self.appleTopics(certificate.pointer)
        notAfter = Self.seconds(X509_get0_notAfter(certificate.pointer))
        notBefore = Self.seconds(X509_get0_notBefore(certificate.pointer))
    }

    /// True when the certificate expires within `days` days of now (or already has). Apple's
    /// certificates last one year; renew before expiry.
    /// - Parameters:
    ///   - days: the warning window in days.
    ///   - clock: the time source.
    public func expiresWithin(days: Int, clock: any WallClock = SystemWallClock()) -> Bool {
        notAfter - clock.nowSeconds() <= Int64(days) * 86_400
    }

    /// The leaf certificate followed by its chain, as PEM, for configuring TLS.
    public var certificateChainPEM: String {
        ([certificate] + chain).map { handle in OpenSSL.pem { PEM_write_bio_X509($0, handle.pointer) } ?? "" }.joined()
    }

    /// The private key as unencrypted PKCS#8 PEM, for configuring TLS. A secret: never log it.
    public var privateKeyPEM: String { key.privateKeyPEM }

    private static func parsePKCS12(_ bytes: [UInt8], password: String) -> Result<(X509Handle, OpenSSLKey, [X509Handle]), APNsError> {
        _ = shim_openssl_prepare()  // no exit handler (COpenSSL's shim.h)
        ERR_clear_error()
        let p12: OpaquePointer? = bytes.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PKCS12(nil, &cursor, buffer.count)
        }
        guard let p12 else {
            return .failure(APNsError(code: .invalidPKCS12, message: "the data is not PKCS#12: \(OpenSSL.drainErrors())"))
        }
        defer { PKCS12_free(p12) }
        var key: OpaquePointer?
        var certificate: OpaquePointer?
        var authorities: OpaquePointer?
        guard PKCS12_parse(p12, password, &key, &certificate, &authorities) == 1 else {
            return .failure(APNsError(code: .invalidPKCS12, message: "cannot decode the PKCS#12 (wrong password or unsupported cipher): \(OpenSSL.drainErrors())"))
        }
        var chain: [X509Handle] = []
        if let authorities {
            for index in 0..<OPENSSL_sk_num(authorities) {
                if let item = OPENSSL_sk_value(authorities, index) {
                    chain.append(X509Handle(taking: OpaquePointer(item)))
                }
            }
            OPENSSL_sk_free(authorities)
        }
        guard let certificate, let key else {
            if let certificate { X509_free(certificate) }
            if let key { EVP_PKEY_free(key) }
            return .failure(APNsError(code: .invalidCertificate, message: "the PKCS#12 holds no certificate with a private key"))
        }
        return .success((X509Handle(taking: certificate), OpenSSLKey(taking: key), chain))
    }

    private static func seconds(_ time: UnsafePointer<ASN1_TIME>?) -> Int64 {
        guard let time else { return 0 }
        var parts = tm()
        guard ASN1_TIME_to_tm(time, &parts) == 1 else { return 0 }
        return Int64(timegm(&parts))
    }

    private static func userID(_ name: OpaquePointer?) -> String? {
        guard let name else { return nil }
        let index = X509_NAME_get_index_by_NID(name, shim_NID_userId(), -1)
        guard index >= 0, let entry = X509_NAME_get_entry(name, index),
              let data = X509_NAME_ENTRY_get_data(entry) else { return nil }
        var out: UnsafeMutablePointer<UInt8>?
        let length = ASN1_STRING_to_UTF8(&out, data)
        guard length >= 0, let out else { return nil }
        defer { shim_OPENSSL_free(out) }
        return String(decoding: UnsafeBufferPointer(start: out, count: Int(length)), as: UTF8.self)
    }

    /// The topics a DER-encoded certificate lists in Apple's extension 1.2.840.113635.100.6.3.6
    /// (docs/apns-protocol.md §5); `[]` when the certificate has none or cannot be parsed. The APNs
    /// simulator uses it on the certificates clients present.
    public static func topics(inCertificateDER der: [UInt8]) -> [String] {
        _ = shim_openssl_prepare()
        return der.withUnsafeBufferPointer { buffer -> [String] in
            guard let base = buffer.baseAddress else { return [] }
            var cursor: UnsafePointer<UInt8>? = base
            guard let certificate = d2i_X509(nil, &cursor, buffer.count) else {
                ERR_clear_error()
                return []
            }
            defer { X509_free(certificate) }
            return appleTopics(certificate)
        }
    }

    /// Topics from extension 1.2.840.113635.100.6.3.6: a DER SEQUENCE alternating UTF8String topics
    /// and SEQUENCEs of their push kinds; the top-level UTF8Strings are the topics.
    private static func appleTopics(_ certificate: OpaquePointer) -> [String] {
        guard let object = OBJ_txt2obj("1.2.840.113635.100.6.3.6", 1) else { return [] }
        defer { ASN1_OBJECT_free(object) }
        let index = X509_get_ext_by_OBJ(certificate, object, -1)
        guard index >= 0, let extensionItem = X509_get_ext(certificate, index),
              let data = X509_EXTENSION_get_data(extensionItem),
              let bytes = ASN1_STRING_get0_data(data) else { return [] }
        let der = Array(UnsafeBufferPointer(start: bytes, count: Int(ASN1_STRING_length(data))))
        return DERReader.topLevelUTF8Strings(inSequence: der)
    }
}

/// Owns one `X509`. `@unchecked Sendable`: only read after construction, which OpenSSL 3 allows from
/// several threads (openssl-threads(7)).
final class X509Handle: @unchecked Sendable {
    let pointer: OpaquePointer
    init(taking pointer: OpaquePointer) { self.pointer = pointer }
    deinit { X509_free(pointer) }
}

/// Loads OpenSSL's `legacy` provider (RC2, 3DES-era PKCS#12) together with `default`, once.
private enum LegacyProvider {
    /// True when both providers are loaded. Loading one provider explicitly stops OpenSSL from
    /// loading `default` implicitly, hence both.
    static let loaded: Bool = {
        let legacy = OSSL_PROVIDER_load(nil, "legacy")
        let standard = OSSL_PROVIDER_load(nil, "default")
        ERR_clear_error()
        return legacy != nil && standard != nil
    }()
}

/// A minimal DER walker for the one Apple extension we read.
enum DERReader {
    /// The UTF8String elements directly inside the outer SEQUENCE of `der`; `[]` when malformed.
    static func topLevelUTF8Strings(inSequence der: [UInt8]) -> [String] {
        guard let outer = element(der, at: 0), outer.tag == 0x30 else { return [] }
        var result: [String] = []
        var offset = outer.contentStart
        while offset < outer.end, let item = element(der, at: offset), item.end <= outer.end {
            if item.tag == 0x0C { result.append(String(decoding: der[item.contentStart..<item.end], as: UTF8.self)) }
            offset = item.end
        }
        return result
    }

    private static func element(_ der: [UInt8], at offset: Int) -> (tag: UInt8, contentStart: Int, end: Int)? {
        guard offset + 2 <= der.count else { return nil }
        let tag = der[offset]
        var length = Int(der[offset + 1])
        var start = offset + 2
        if length & 0x80 != 0 {
            let count = length & 0x7F
            guard count >= 1, count <= 4, start + count <= der.count else { return nil }
            length = 0
            for byte in der[start..<start + count] { length = length << 8 | Int(byte) }
            start += count
        }
        guard start + length <= der.count else { return nil }
        return (tag, start, start + length)
    }
}
