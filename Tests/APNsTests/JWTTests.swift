import APNsSimulator
import ES256
import Foundation
import ProtobufCodec
import Testing
@testable import APNs

@Suite(.timeLimit(.minutes(1))) struct SigningKeyTests {
    @Test func p8LoadsInEveryFormWithTheSamePublicKey() async throws {
        let directory = try TemporaryDirectory()
        let pem = try await directory.makeP8()
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----\n"))
        let expected = try await Tool.check("openssl", ["pkey", "-in", "key.p8", "-pubout"], in: directory).text

        let crlf = pem.replacingOccurrences(of: "\n", with: "\r\n")
        let escaped = pem.replacingOccurrences(of: "\n", with: "\\n")
        #expect(!escaped.contains("\n"))
        let bodyOnly = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined(separator: "\n")
        let bodyOneLine = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        let forms = [pem, crlf, escaped, "\"\(escaped)\"", bodyOnly, bodyOneLine, "  \n" + pem + "\n\n"]
        for form in forms {
            let key = try APNsSigningKey(p8: form)
            #expect(key.publicKeyPEM == expected)
        }
        #expect(try APNsSigningKey(contentsOfFile: directory.path("key.p8")).publicKeyPEM == expected)
    }

    @Test func truncatedOrWrongKeysAreRefusedWithAClearMessage() async throws {
        let directory = try TemporaryDirectory()
        let pem = try await directory.makeP8()
        let lines = pem.split(separator: "\n")
        func message(_ text: String) -> String {
            do { _ = try APNsSigningKey(p8: text); return "accepted" } catch {
                #expect(error.code == .invalidSigningKey)
                return error.message
            }
        }
        // Cut inside the base64 (not a multiple of 4), at a line boundary (valid base64, short DER), and the END line.
        let cutMiddle = String(pem.prefix(pem.count / 2))
        let cutLine = ([lines[0], lines[1]] + [lines.last!]).joined(separator: "\n")
        let noEnd = lines.dropLast().joined(separator: "\n")
        for text in [cutMiddle, cutLine, noEnd, "", "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----", "hello"] {
            #expect(message(text).hasPrefix("the .p8 key is truncated or not PKCS#8"), "\(text)")
        }
        _ = try await Tool.check("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", "p384.p8"], in: directory)
        #expect(message(try directory.read("p384.p8")).contains("secp384r1, not P-256"))
        _ = try await Tool.check("openssl", ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "rsa.p8"], in: directory)
        #expect(message(try directory.read("rsa.p8")).contains("RSA key, not EC"))
        _ = try await Tool.check("openssl", ["ec", "-in", "key.p8", "-out", "sec1.pem"], in: directory)
        #expect(message(try directory.read("sec1.pem")).contains("SEC1"))
        _ = try await Tool.check("openssl", ["pkcs8", "-topk8", "-in", "key.p8", "-passout", "pass:x", "-out", "enc.p8"], in: directory)
        #expect(message(try directory.read("enc.p8")).contains("encrypted"))
    }

    @Test func signaturesAreAlways64BytesAndPaddedHalvesOccur() async throws {
        let directory = try TemporaryDirectory()
        let key = try APNsSigningKey(p8: try await directory.makeP8())
        let verifier = try APNsJWTVerifier(publicKeyPEM: key.publicKeyPEM)
        var paddedHalves = 0
        for index in 0..<3000 {
            let signature = try key.sign(Array("message \(index)".utf8))
            #expect(signature.count == 64)
            if signature[0] == 0 || signature[32] == 0 { paddedHalves += 1 }
            // Cross-check the raw → DER → verify path on a sample.
            if index % 100 == 0 || signature[0] == 0 || signature[32] == 0 {
                let token = try APNsJWT(keyID: "K", teamID: "T", issuedAt: Int64(index), signingKey: key)
                #expect(try verifier.verify(token.token).issuedAt == Int64(index))
            }
        }
        // About 3000/128 ≈ 23 signatures have a half with a leading zero byte; padding must have been exercised.
        #expect(paddedHalves > 3)
    }
}

@Suite(.timeLimit(.minutes(1))) struct JWTInteropTests {
    let keyID = "ABC123DEFG"
    let teamID = "DEF123GHIJ"

    @Test func pyJWTVerifiesManyOfOurTokens() async throws {
        let directory = try TemporaryDirectory()
        let key = try APNsSigningKey(p8: try await directory.makeP8())
        try directory.write("public.pem", key.publicKeyPEM)
        var tokens: [String] = []
        for index in 0..<1000 {
            let jwt = try APNsJWT(keyID: keyID, teamID: teamID, issuedAt: 1_700_000_000 + Int64(index), signingKey: key)
            #expect(!jwt.description.contains(jwt.token))
            tokens.append(jwt.token)
        }
        try directory.write("tokens.txt", tokens.joined(separator: "\n"))
        let output = try await Tool.check("python3", [Tool.pythonScript("verify_jwts.py"), "public.pem", "tokens.txt", keyID, teamID], in: directory)
        #expect(output.text.trimmingCharacters(in: .whitespacesAndNewlines) == "verified 1000")
    }

    @Test func pyJWTRejectsATamperedToken() async throws {
        let directory = try TemporaryDirectory()
        let key = try APNsSigningKey(p8: try await directory.makeP8())
        try directory.write("public.pem", key.publicKeyPEM)
        let jwt = try APNsJWT(keyID: keyID, teamID: teamID, issuedAt: 1_700_000_000, signingKey: key)
        let forged = try APNsJWT(keyID: keyID, teamID: teamID, issuedAt: 1_700_000_001, signingKey: key)
        let parts = jwt.token.split(separator: ".")
        let spliced = [parts[0], forged.token.split(separator: ".")[1], parts[2]].joined(separator: ".")
        try directory.write("tokens.txt", spliced)
        let output = try await Tool.run("python3", [Tool.pythonScript("verify_jwts.py"), "public.pem", "tokens.txt", keyID, teamID], in: directory)
        #expect(output.status == 1)
        #expect(output.text.contains("InvalidSignatureError"))
    }

    @Test func verifierAcceptsPyJWTAndDERTokens() async throws {
        let directory = try TemporaryDirectory()
        let key = try APNsSigningKey(p8: try await directory.makeP8())
        let verifier = try APNsJWTVerifier(publicKeyPEM: key.publicKeyPEM)

        let made = try await Tool.check("python3", [Tool.pythonScript("make_jwt.py"), "key.p8", keyID, teamID, "1700000123"], in: directory)
        let pyToken = made.text.trimmingCharacters(in: .whitespacesAndNewlines)
        let fromPy = try verifier.verify(pyToken)
        #expect(fromPy.keyID == keyID && fromPy.issuer == teamID && fromPy.issuedAt == 1_700_000_123)
        #expect(fromPy.signatureEncoding == .raw)

        // Apple's command-line recipe: `openssl dgst -sha256 -sign` makes a DER signature.
        let signingInput = Base64.encodeURL(Array(#"{"alg":"ES256","kid":"ABC123DEFG"}"#.utf8)) + "." +
            Base64.encodeURL(Array(#"{"iss":"DEF123GHIJ","iat":1700000456}"#.utf8))
        for _ in 0..<5 {
            let der = try await Tool.check("openssl", ["dgst", "-sha256", "-sign", "key.p8"], stdin: Array(signingInput.utf8), in: directory).stdout
            #expect(der.first == 0x30 && der.count >= 8 && der.count <= 72)
            let derToken = signingInput + "." + Base64.encodeURL(der)
            let verified = try verifier.verify(derToken)
            #expect(verified.signatureEncoding == .der && verified.issuedAt == 1_700_000_456)
        }
        // Ours verify with openssl too: convert R‖S to DER and check with `openssl dgst -verify`.
        let ours = try APNsJWT(keyID: keyID, teamID: teamID, issuedAt: 1_700_000_789, signingKey: key)
        let raw = try #require(Base64.decode(ours.token.split(separator: ".")[2], alphabet: .url))
        try Data(try #require(OpenSSLKey.derSignature(fromRaw: raw))).write(to: directory.url.appendingPathComponent("sig.der"))
        try directory.write("public.pem", key.publicKeyPEM)
        let input = String(ours.token[..<ours.token.lastIndex(of: ".")!])
        let checked = try await Tool.check("openssl", ["dgst", "-sha256", "-verify", "public.pem", "-signature", "sig.der"], stdin: Array(input.utf8), in: directory)
        #expect(checked.text.contains("Verified OK"))
    }

    @Test func verifierErrorsAreDistinct() async throws {
        let directory = try TemporaryDirectory()
        let key = try APNsSigningKey(p8: try await directory.makeP8())
        let other = try APNsSigningKey(p8: try await directory.makeP8("other.p8"))
        let verifier = try APNsJWTVerifier(publicKeyPEM: key.publicKeyPEM)
        func token(_ header: String, _ claims: String, signer: APNsSigningKey? = nil) throws -> String {
            let input = Base64.encodeURL(Array(header.utf8)) + "." + Base64.encodeURL(Array(claims.utf8))
            return input + "." + Base64.encodeURL(try (signer ?? key).sign(Array(input.utf8)))
        }
        func code(_ text: String) -> APNsError.Code? {
            do { _ = try verifier.verify(text); return nil } catch {
                #expect(error.reason == .invalidProviderToken)
                return error.code
            }
        }
        let good = try token(#"{"alg":"ES256","kid":"K1"}"#, #"{"iss":"T1","iat":1700000000}"#)
        #expect(code(good) == nil)
        #expect(code(try token(#"{"alg":"ES256","kid":"K1"}"#, #"{"iss":"T1","iat":1700000000}"#, signer: other)) == .badSignature)
        let parts = good.split(separator: ".")
        let tampered = [parts[0], Substring(Base64.encodeURL(Array(#"{"iss":"T2","iat":1700000000}"#.utf8))), parts[2]].joined(separator: ".")
        #expect(code(tampered) == .badSignature)
        #expect(code(try token(#"{"alg":"ES256"}"#, #"{"iss":"T1","iat":1700000000}"#)) == .missingKeyID)
        #expect(code(try token(#"{"alg":"ES256","kid":"K1"}"#, #"{"iss":"T1","iat":"1700000000"}"#)) == .nonIntegerIssuedAt)
        #expect(code(try token(#"{"alg":"ES256","kid":"K1"}"#, #"{"iss":"T1","iat":1700000000.5}"#)) == .nonIntegerIssuedAt)
        #expect(code(try token(#"{"alg":"ES256","kid":"K1"}"#, #"{"iss":"T1"}"#)) == .nonIntegerIssuedAt)
        #expect(code(try token(#"{"alg":"ES256","kid":"K1"}"#, #"{"iat":1700000000}"#)) == .missingIssuer)
        #expect(code(try token(#"{"alg":"HS256","kid":"K1"}"#, #"{"iss":"T1","iat":1700000000}"#)) == .unsupportedAlgorithm)
        #expect(code("a.b") == .malformedProviderToken)
        #expect(code("!!.e30.e30") == .malformedProviderToken)
        #expect(code(String(parts[0]) + "." + parts[1] + "." + Base64.encodeURL([1, 2, 3])) == .malformedProviderToken)
        #expect(code(String(parts[0]) + "." + parts[1] + "." + String(parts[2].dropLast(3))) == .malformedProviderToken)

        let byKeyID = APNsJWTVerifier(publicKeysByKeyID: ["K1": key.publicKey])
        #expect(try byKeyID.verify(good).keyID == "K1")
        #expect(throws: APNsError.self) { try byKeyID.verify(try token(#"{"alg":"ES256","kid":"K9"}"#, #"{"iss":"T1","iat":1}"#)) }
    }
}
