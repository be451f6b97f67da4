internal import COpenSSL
import ES256
import Foundation
import ProtobufCodec

/// An APNs token-signing key: the `.p8` file from the developer portal, an unencrypted PKCS#8 PEM
/// wrapping an EC P-256 private key (docs/apns-protocol.md §4).
///
/// Accepted text forms, all yielding the same key: PEM with LF or CRLF line ends; the PEM on one line
/// with literal `\n` escapes (as environment variables carry it); or only the base64 body without the
/// BEGIN/END lines. Immutable and safe to share across tasks.
public final class APNsSigningKey: Sendable {
    private let key: OpenSSLKey

    /// Loads a `.p8` key from its text.
    /// - Parameter p8: the file's contents in any accepted form.
    /// - Throws: `APNsError` `.invalidSigningKey`; the message starts "the .p8 key is truncated or not
    ///   PKCS#8" when the data cannot be decoded, and says so when the key is encrypted, in SEC1
    ///   (`EC PRIVATE KEY`) form, or not an EC P-256 key.
    public init(p8 text: String) throws(APNsError) {
        let der = try Self.decodeP8(text)
        key = try Self.parsePKCS8(der)
    }

    /// Loads a `.p8` key from a file.
    /// - Throws: `APNsError` `.invalidSigningKey` when the file cannot be read or holds no valid key.
    public convenience init(contentsOfFile path: String) throws(APNsError) {
        guard let text = readTextFile(path) else {
            throw APNsError(code: .invalidSigningKey, message: "cannot read the .p8 key file \(path)")
        }
        try self.init(p8: text)
    }

    /// The matching public key as SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`), the form
    /// PyJWT and the simulator's ``APNsJWTVerifier`` take.
    public var publicKeyPEM: String { key.publicKeyPEM }

    /// The matching public key, for ``APNsJWTVerifier``.
    public var publicKey: ES256PublicKey { ES256PublicKey(key: key) }

    /// ECDSA P-256 / SHA-256 signature of `message` as 64-byte raw R‖S (JWS ES256, RFC 7518 §3.4).
    /// - Throws: `APNsError` `.signingFailed` when OpenSSL fails.
    public func sign(_ message: [UInt8]) throws(APNsError) -> [UInt8] {
        do {
            return try key.signES256(message)
        } catch {
            throw APNsError(code: .signingFailed, message: error.message)
        }
    }

    private static let truncated = "the .p8 key is truncated or not PKCS#8 (expected an unencrypted \"-----BEGIN PRIVATE KEY-----\" PEM with an EC P-256 key, as Apple's developer portal issues)"

    /// Extracts the DER bytes from any accepted text form.
    static func decodeP8(_ input: String) throws(APNsError) -> [UInt8] {
        func fail(_ message: String) -> APNsError { APNsError(code: .invalidSigningKey, message: message) }
        var text = input.replacingAll("\\r", with: "").replacingAll("\\n", with: "\n").replacingAll("\r", with: "")
        text = String(text.drop(while: { $0.isWhitespace || $0 == "\"" || $0 == "'" }))
        while let last = text.last, last.isWhitespace || last == "\"" || last == "'" { text.removeLast() }
        var body = Substring(text)
        if let begin = text.range(of: "-----BEGIN ") {
            let afterBegin = text[begin.upperBound...]
            guard let labelEnd = afterBegin.range(of: "-----") else { throw fail(truncated) }
            let label = afterBegin[..<labelEnd.lowerBound]
            switch label {
            case "PRIVATE KEY": break
            case "ENCRYPTED PRIVATE KEY":
                throw fail("the .p8 key is an encrypted PKCS#8 key; APNs .p8 keys are unencrypted (decrypt it with `openssl pkcs8 -topk8 -nocrypt`)")
            case "EC PRIVATE KEY":
                throw fail("the .p8 key is an SEC1 \"EC PRIVATE KEY\", not PKCS#8 (convert it with `openssl pkcs8 -topk8 -nocrypt`)")
            default:
                throw fail("the .p8 key is a \"\(label)\" PEM block, not PKCS#8 \"PRIVATE KEY\"")
            }
            let rest = afterBegin[labelEnd.upperBound...]
            guard let end = rest.range(of: "-----END PRIVATE KEY-----") else { throw fail(truncated) }
            body = rest[..<end.lowerBound]
        }
        let base64 = Array(body.utf8.filter { !($0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D) })
        guard !base64.isEmpty, base64.count % 4 == 0, let der = Base64.decode(base64, alphabet: .standard), !der.isEmpty else {
            throw fail(truncated)
        }
        return der
    }

    private static func parsePKCS8(_ der: [UInt8]) throws(APNsError) -> OpenSSLKey {
        _ = shim_openssl_prepare()  // no exit handler (COpenSSL's shim.h)
        ERR_clear_error()
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let info = d2i_PKCS8_PRIV_KEY_INFO(nil, &cursor, buffer.count) else { return nil }
            defer { PKCS8_PRIV_KEY_INFO_free(info) }
            guard cursor == buffer.baseAddress! + buffer.count else { return nil }  // trailing garbage
            return EVP_PKCS82PKEY(info)
        }
        guard let parsed else {
            throw APNsError(code: .invalidSigningKey, message: truncated + ": " + OpenSSL.drainErrors())
        }
        let key = OpenSSLKey(taking: parsed)
        if let what = key.describeIfNotP256() {
            throw APNsError(code: .invalidSigningKey, message: "the .p8 key is \(what); APNs needs an EC P-256 (prime256v1) key")
        }
        return key
    }
}

extension String {
    func replacingAll(_ target: String, with replacement: String) -> String {
        guard contains(target) else { return self }
        return components(separatedBy: target).joined(separator: replacement)
    }
}

/// Reads a whole file as UTF-8 text; `nil` when it cannot be read.
func readTextFile(_ path: String) -> String? {
    FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
}
