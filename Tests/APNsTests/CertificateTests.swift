import Foundation
import ServiceCore
import Testing
@testable import APNs

@Suite(.timeLimit(.minutes(1))) struct CertificateTests {
    /// DER of Apple's topic extension: SEQUENCE { "com.example.app", SEQ{"app"}, "com.example.app.voip", SEQ{"voip"},
    /// "com.example.app.complication", SEQ{"complication"} }.
    static func topicExtensionHex() -> String {
        func utf8(_ s: String) -> [UInt8] { [0x0C, UInt8(s.utf8.count)] + Array(s.utf8) }
        func seq(_ content: [UInt8]) -> [UInt8] { [0x30, UInt8(content.count)] + content }
        let body = utf8("com.example.app") + seq(utf8("app")) + utf8("com.example.app.voip") + seq(utf8("voip"))
            + utf8("com.example.app.complication") + seq(utf8("complication"))
        return seq(body).map { String(format: "%02X", $0) }.joined()
    }

    func makeCertificate(in directory: TemporaryDirectory, days: Int = 365, subject: String? = nil) async throws {
        _ = try await Tool.check("openssl", [
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out", "cert.pem", "-days", "\(days)",
            "-subj", subject ?? "/UID=com.example.app/CN=Apple Push Services: com.example.app/OU=ABCDE12345/O=Example Inc./C=US",
            "-addext", "1.2.840.113635.100.6.3.6=DER:\(Self.topicExtensionHex())",
        ], in: directory)
    }

    func expectedNotAfter(_ directory: TemporaryDirectory) async throws -> Int64 {
        let text = try await Tool.check("openssl", ["x509", "-in", "cert.pem", "-noout", "-enddate", "-dateopt", "iso_8601"], in: directory).text
        let value = text.trimmingCharacters(in: .whitespacesAndNewlines).replacingOccurrences(of: "notAfter=", with: "")
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withFullDate, .withTime, .withSpaceBetweenDateAndTime, .withColonSeparatorInTime]
        let date = try #require(formatter.date(from: value.replacingOccurrences(of: "Z", with: "")) ?? ISO8601DateFormatter().date(from: value.replacingOccurrences(of: " ", with: "T")))
        return Int64(date.timeIntervalSince1970)
    }

    @Test func pemCertificateAndKey() async throws {
        let directory = try TemporaryDirectory()
        try await makeCertificate(in: directory)
        let credentials = try APNsCertificateCredentials(certificatePEM: try directory.read("cert.pem"), privateKeyPEM: try directory.read("key.pem"))
        #expect(credentials.subjectUserID == "com.example.app")
        #expect(credentials.subject.contains("CN=Apple Push Services: com.example.app"))
        #expect(credentials.subject.contains("UID=com.example.app"))
        #expect(credentials.topics == ["com.example.app", "com.example.app.voip", "com.example.app.complication"])
        #expect(credentials.notAfter == (try await expectedNotAfter(directory)))
        #expect(credentials.notAfter - credentials.notBefore == 365 * 86_400)
        let now = ManualWallClock(milliseconds: credentials.notBefore * 1000)
        #expect(!credentials.expiresWithin(days: 30, clock: now))
        now.advance(by: .seconds(336 * 86_400))
        #expect(credentials.expiresWithin(days: 30, clock: now))
        #expect(credentials.certificateChainPEM.hasPrefix("-----BEGIN CERTIFICATE-----"))
        // The exported key is the same key: openssl agrees on its public half.
        try directory.write("exported.pem", credentials.privateKeyPEM)
        let a = try await Tool.check("openssl", ["pkey", "-in", "key.pem", "-pubout"], in: directory).text
        let b = try await Tool.check("openssl", ["pkey", "-in", "exported.pem", "-pubout"], in: directory).text
        #expect(a == b)
    }

    @Test func mismatchedKeyAndBadPEMAreRefused() async throws {
        let directory = try TemporaryDirectory()
        try await makeCertificate(in: directory)
        _ = try await directory.makeP8("other.p8")
        #expect(throws: APNsError.self) {
            try APNsCertificateCredentials(certificatePEM: try directory.read("cert.pem"), privateKeyPEM: try directory.read("other.p8"))
        }
        let keyPEM = try directory.read("key.pem")
        do {
            _ = try APNsCertificateCredentials(certificatePEM: "nothing", privateKeyPEM: keyPEM)
            Issue.record("accepted a missing certificate")
        } catch { #expect(error.code == .invalidCertificate) }
        // An encrypted key with its password.
        _ = try await Tool.check("openssl", ["pkey", "-in", "key.pem", "-aes256", "-passout", "pass:secret", "-out", "enc.pem"], in: directory)
        let encrypted = try directory.read("enc.pem")
        #expect(try APNsCertificateCredentials(certificatePEM: try directory.read("cert.pem"), privateKeyPEM: encrypted, privateKeyPassword: "secret").subjectUserID == "com.example.app")
        #expect(throws: APNsError.self) {
            try APNsCertificateCredentials(certificatePEM: try directory.read("cert.pem"), privateKeyPEM: encrypted, privateKeyPassword: "wrong")
        }
    }

    @Test func pkcs12ModernAndLegacy() async throws {
        let directory = try TemporaryDirectory()
        try await makeCertificate(in: directory, subject: "/UID=com.apple.mgmt.External.1234/CN=APSP:1234/C=US")
        _ = try await Tool.check("openssl", ["pkcs12", "-export", "-in", "cert.pem", "-inkey", "key.pem", "-passout", "pass:pw", "-out", "modern.p12"], in: directory)
        _ = try await Tool.check("openssl", ["pkcs12", "-export", "-legacy", "-in", "cert.pem", "-inkey", "key.pem", "-passout", "pass:pw", "-out", "legacy.p12"], in: directory)
        for name in ["modern.p12", "legacy.p12"] {
            let credentials = try APNsCertificateCredentials(pkcs12File: directory.path(name), password: "pw")
            #expect(credentials.subjectUserID == "com.apple.mgmt.External.1234", "\(name)")
            #expect(credentials.topics.count == 3)
            let bytes = try directory.readBytes(name)
            do {
                _ = try APNsCertificateCredentials(pkcs12: bytes, password: "wrong")
                Issue.record("wrong password accepted for \(name)")
            } catch { #expect(error.code == .invalidPKCS12) }
        }
        do {
            _ = try APNsCertificateCredentials(pkcs12: Array("not pkcs12".utf8), password: "")
            Issue.record("garbage accepted")
        } catch { #expect(error.code == .invalidPKCS12) }
    }

    @Test func certificateWithoutAppleExtension() async throws {
        let directory = try TemporaryDirectory()
        _ = try await Tool.check("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                             "-keyout", "key.pem", "-out", "cert.pem", "-days", "2", "-subj", "/CN=plain"], in: directory)
        let credentials = try APNsCertificateCredentials(certificatePEM: try directory.read("cert.pem"), privateKeyPEM: try directory.read("key.pem"))
        #expect(credentials.topics.isEmpty)
        #expect(credentials.subjectUserID == nil)
        #expect(credentials.subject == "CN=plain")
        #expect(credentials.expiresWithin(days: 3))
        #expect(!credentials.expiresWithin(days: 1))
    }
}
