import APNs
import Foundation
import ProtobufCodec
import PushMessages
import PushTestSupport
import ServiceCore
import Synchronization
import Testing

@testable import RegistrationServiceCore

/// Authentication and authorization decisions without I/O: API keys, the key file, user-bound JWTs,
/// the token bucket. (The Python e2e tests drive the same rules through gRPC and JSON.)
@Suite struct RegistrationAuthTests {
    static let audience = "push.v1.TokenRegistry"
    static let hsSecret = Array("0123456789abcdef0123456789abcdef".utf8)

    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    /// A key file with `keys` (id, key, bundles, operations, rate) and the JWT keys given.
    static func keyFile(_ keys: [(APIKey, [String], [String], Double?)], jwt: [String] = []) -> String {
        let entries = keys.map { key, bundles, operations, rate in
            let extra = rate.map { ", \"rate_per_second\": \($0), \"burst\": \($0)" } ?? ""
            return """
                {"id": "\(key.id)", "sha256": "\(hex(key.sha256))", "bundle_ids": [\(bundles.map { "\"\($0)\"" }.joined(separator: ","))],
                 "operations": [\(operations.map { "\"\($0)\"" }.joined(separator: ","))]\(extra)}
                """
        }
        return "{\"api_keys\": [\(entries.joined(separator: ","))], \"registration_jwt_keys\": [\(jwt.joined(separator: ","))]}"
    }

    static func hsKeyEntry(kid: String = "hs-1", bundle: String = "com.example.app") -> String {
        "{\"kid\": \"\(kid)\", \"bundle_id\": \"\(bundle)\", \"alg\": \"HS256\", \"secret\": \"\(Base64.encodeURL(hsSecret))\"}"
    }

    static func authenticator(_ json: String, clock: any WallClock = SystemWallClock(), now: @escaping @Sendable () -> Double = { 0 }) throws -> RegistrationAuthenticator {
        var configuration = RegistrationAuthenticator.Configuration()
        configuration.keysJSON = json
        return try RegistrationAuthenticator(configuration: configuration, wallClock: clock, monotonicSeconds: now, logger: Logger(label: "t", logLevel: .error))
    }

    static func claims(sub: String = "user-1", bundle: String = "com.example.app", aud: String = audience, iat: Int64, exp: Int64) -> String {
        "{\"sub\":\"\(sub)\",\"bundle_id\":\"\(bundle)\",\"aud\":\"\(aud)\",\"iat\":\(iat),\"exp\":\(exp)}"
    }

    func code(_ body: () throws -> Void) -> (RegistrationError.Code, String?)? {
        do {
            try body()
            return nil
        } catch let error as RegistrationError {
            return (error.code, error.reason)
        } catch {
            return (.internalError, "\(error)")
        }
    }

    @Test func apiKeyShapeIsChecked() throws {
        let key = try #require(APIKey.generate(id: "backend-1"))
        #expect(key.text.hasPrefix("pk_backend-1_"))
        #expect(key.text.count == "pk_backend-1_".count + 43)
        #expect(APIKey(key.text)?.id == "backend-1")
        #expect(APIKey("pk_backend-1_short") == nil)
        #expect(APIKey("pk__" + String(repeating: "A", count: 43)) == nil)
        #expect(APIKey("sk_x_" + String(repeating: "A", count: 43)) == nil)
        #expect(!key.description.contains(key.text.suffix(43)))  // never the secret
    }

    @Test func apiKeysAuthenticateByIDAndDigest() throws {
        let key = try #require(APIKey.generate(id: "backend"))
        let other = try #require(APIKey.generate(id: "backend"))  // same id, another secret
        let unknown = try #require(APIKey.generate(id: "stranger"))
        let auth = try Self.authenticator(Self.keyFile([(key, ["com.example.app"], ["register"], nil)]))
        let principal = try auth.authenticate(authorization: "Bearer \(key.text)")
        #expect(principal.keyID == "backend")
        #expect(try auth.authenticate(authorization: "bearer \(key.text)").keyID == "backend")
        #expect(code { _ = try auth.authenticate(authorization: nil) }! == (.unauthenticated, "missing"))
        #expect(code { _ = try auth.authenticate(authorization: key.text) }! == (.unauthenticated, "malformed"))
        #expect(code { _ = try auth.authenticate(authorization: "Bearer pk_backend_nope") }! == (.unauthenticated, "malformed"))
        #expect(code { _ = try auth.authenticate(authorization: "Bearer \(other.text)") }! == (.unauthenticated, "wrong_key"))
        #expect(code { _ = try auth.authenticate(authorization: "Bearer \(unknown.text)") }! == (.unauthenticated, "unknown_key"))
    }

    @Test func scopesLimitBundleIDsAndOperations() throws {
        let key = try #require(APIKey.generate(id: "backend"))
        let auth = try Self.authenticator(Self.keyFile([(key, ["com.example.app"], ["register", "unregister"], nil)]))
        let principal = try auth.authenticate(authorization: "Bearer \(key.text)")
        #expect(code { try principal.authorize(.register, bundleID: "com.example.app", userID: "anyone") } == nil)
        #expect(code { try principal.authorize(.register, bundleID: "com.other.app") }! == (.permissionDenied, "bundle_id"))
        #expect(code { try principal.authorize(.admin, bundleID: "com.example.app") }! == (.permissionDenied, "operation"))
        let wildcard = try #require(APIKey.generate(id: "ops"))
        let all = try Self.authenticator(Self.keyFile([(wildcard, ["*"], ["admin"], nil)]))
        #expect(code { try all.authenticate(authorization: "Bearer \(wildcard.text)").authorize(.admin, bundleID: "com.any.app") } == nil)
    }

    @Test func rotationKeepsBothKeysAndReloadSwapsThem() throws {
        let old = try #require(APIKey.generate(id: "old"))
        let new = try #require(APIKey.generate(id: "new"))
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID()).json")
        defer { try? FileManager.default.removeItem(at: file) }
        try Self.keyFile([(old, ["*"], ["register"], nil)]).write(to: file, atomically: true, encoding: .utf8)
        var configuration = RegistrationAuthenticator.Configuration()
        configuration.keysFile = file.path
        let auth = try RegistrationAuthenticator(configuration: configuration, logger: Logger(label: "t", logLevel: .error))
        #expect(code { _ = try auth.authenticate(authorization: "Bearer \(new.text)") }! == (.unauthenticated, "unknown_key"))
        // Rotation: both keys valid at once, then the old one removed.
        try Self.keyFile([(old, ["*"], ["register"], nil), (new, ["*"], ["register"], nil)]).write(to: file, atomically: true, encoding: .utf8)
        #expect(auth.reload())
        #expect(try auth.authenticate(authorization: "Bearer \(old.text)").keyID == "old")
        #expect(try auth.authenticate(authorization: "Bearer \(new.text)").keyID == "new")
        try Self.keyFile([(new, ["*"], ["register"], nil)]).write(to: file, atomically: true, encoding: .utf8)
        #expect(auth.reload())
        #expect(code { _ = try auth.authenticate(authorization: "Bearer \(old.text)") }! == (.unauthenticated, "unknown_key"))
        // A broken file keeps the keys in use.
        try "{\"api_keys\": [{\"id\": \"x\"}]}".write(to: file, atomically: true, encoding: .utf8)
        #expect(!auth.reload())
        #expect(try auth.authenticate(authorization: "Bearer \(new.text)").keyID == "new")
    }

    @Test func keyFileErrorsNameTheField() {
        func message(_ json: String) -> String {
            do {
                _ = try RegistrationCredentials(json: Array(json.utf8))
                return ""
            } catch {
                return error.description
            }
        }
        #expect(message("[]") == "the key file must be a JSON object")
        #expect(message("{\"api_keys\": [{\"id\": \"a\", \"sha256\": \"00\", \"bundle_ids\": [\"*\"], \"operations\": [\"register\"]}]}")
            .hasPrefix("api_keys[0].sha256"))
        #expect(message("{\"api_keys\": [{\"id\": \"a\", \"sha256\": \"\(String(repeating: "0", count: 64))\", \"bundle_ids\": [\"*\"], \"operations\": [\"delete\"]}]}")
            .hasPrefix("api_keys[0].operations: unknown operation delete"))
        #expect(message("{\"registration_jwt_keys\": [{\"kid\": \"k\", \"bundle_id\": \"b\", \"alg\": \"none\"}]}")
            .hasPrefix("registration_jwt_keys[0].alg: none is not supported"))
        #expect(message("{\"registration_jwt_keys\": [{\"kid\": \"k\", \"bundle_id\": \"b\", \"alg\": \"HS256\", \"secret\": \"c2hvcnQ\"}]}")
            .hasPrefix("registration_jwt_keys[0].secret"))
        #expect(message("{\"keys\": []}").hasPrefix("unknown member keys"))
    }

    @Test func authIsOnByDefaultAndRefusesToStartWithoutKeys() {
        #expect(throws: RegistrationCredentials.FormatError.self) {
            _ = try RegistrationAuthenticator(configuration: .init(), logger: Logger(label: "t", logLevel: .error))
        }
        var disabled = RegistrationAuthenticator.Configuration()
        disabled.disabled = true
        let auth = try? RegistrationAuthenticator(configuration: disabled, logger: Logger(label: "t", logLevel: .critical))
        if case .anonymous? = try? auth?.authenticate(authorization: nil) {} else { Issue.record("disabled auth must allow anonymous calls") }
    }

    @Test func userBoundJWTs() async throws {
        let clock = ManualWallClock(milliseconds: 1_800_000_000_000)
        let now = clock.nowSeconds()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("jwt-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let p8 = directory.appendingPathComponent("key.p8").path
        let generated = try await runProgram(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", p8])
        #expect(generated.status == 0)
        let signingKey = try APNsSigningKey(p8: String(contentsOfFile: p8, encoding: .utf8))
        let pem = signingKey.publicKeyPEM.replacingOccurrences(of: "\n", with: "\\n")
        let esEntry = "{\"kid\": \"es-1\", \"bundle_id\": \"com.example.app\", \"alg\": \"ES256\", \"public_key_pem\": \"\(pem)\"}"
        let auth = try Self.authenticator(Self.keyFile([], jwt: [esEntry, Self.hsKeyEntry()]), clock: clock)
        func es(_ claims: String, kid: String = "es-1") throws -> String {
            try JSONWebToken.signES256(headerJSON: "{\"alg\":\"ES256\",\"kid\":\"\(kid)\"}", claimsJSON: claims, key: signingKey)
        }
        func hs(_ claims: String, kid: String = "hs-1") -> String {
            JSONWebToken.signHS256(headerJSON: "{\"alg\":\"HS256\",\"kid\":\"\(kid)\"}", claimsJSON: claims, secret: Self.hsSecret)
        }
        let valid = Self.claims(iat: now - 10, exp: now + 600)
        for token in [try es(valid), hs(valid)] {
            let principal = try auth.authenticate(authorization: "Bearer \(token)")
            #expect(code { try principal.authorize(.register, bundleID: "com.example.app", userID: "user-1") } == nil)
            #expect(code { try principal.authorize(.register, bundleID: "com.example.app", userID: "user-2") }! == (.permissionDenied, "user_id"))
            #expect(code { try principal.authorize(.register, bundleID: "com.example.app", userID: "") }! == (.permissionDenied, "user_id"))
            #expect(code { try principal.authorize(.register, bundleID: "com.other.app", userID: "user-1") }! == (.permissionDenied, "bundle_id"))
            #expect(code { try principal.authorize(.unregister, bundleID: "com.example.app") }! == (.permissionDenied, "operation"))
        }
        func refused(_ token: String) -> String? { code { _ = try auth.authenticate(authorization: "Bearer \(token)") }.flatMap { $0.0 == .unauthenticated ? $0.1 : "not unauthenticated" } }
        #expect(refused(try es(Self.claims(iat: now - 3000, exp: now - 61))) == "jwt_expired")
        #expect(refused(try es(Self.claims(iat: now - 3000, exp: now - 30))) == nil)  // within the 60 s leeway
        #expect(refused(try es(valid, kid: "unknown")) == "jwt_unknown_kid")
        let unsigned = Base64.encodeURL(Array("{\"alg\":\"none\",\"kid\":\"es-1\"}".utf8)) + "." + Base64.encodeURL(Array(valid.utf8)) + "."
        #expect(refused(unsigned) == "jwt_algorithm")
        // HS256 presented for the EC key (the public key used as an HMAC secret: the classic confusion).
        let confused = JSONWebToken.signHS256(headerJSON: "{\"alg\":\"HS256\",\"kid\":\"es-1\"}", claimsJSON: valid, secret: Array(signingKey.publicKeyPEM.utf8))
        #expect(refused(confused) == "jwt_algorithm")
        #expect(refused(try es(Self.claims(aud: "someone-else", iat: now, exp: now + 60))) == "jwt_audience")
        #expect(refused(try es(Self.claims(iat: now, exp: now + 3601))) == "jwt_lifetime")
        #expect(refused(try es(Self.claims(bundle: "com.other.app", iat: now, exp: now + 60))) == "jwt_claims")
        #expect(refused(try es(Self.claims(sub: "", iat: now, exp: now + 60))) == "jwt_claims")
        #expect(refused(try es(Self.claims(iat: now + 120, exp: now + 600))) == "jwt_claims")
        let tampered = hs(valid).dropLast(2) + "AA"
        #expect(refused(String(tampered)) == "jwt_signature")
        #expect(refused("not.a.jwt") == "jwt_malformed")
    }

    @Test func tokenBucketRefillsAtItsRate() {
        var bucket = TokenBucket(ratePerSecond: 10, burst: 2, now: 0)
        #expect(bucket.take(now: 0) == nil)
        #expect(bucket.take(now: 0) == nil)
        let wait = bucket.take(now: 0)
        #expect(wait != nil && abs(wait! - 0.1) < 1e-9)
        #expect(bucket.take(now: 0.05) != nil)
        #expect(bucket.take(now: 0.1) == nil)
        #expect(bucket.take(now: 100) == nil)
        #expect(bucket.take(now: 100) == nil)
        #expect(bucket.take(now: 100) != nil)  // capacity caps the refill
    }

    @Test func rateLimitIsPerKeyWithARetryHint() throws {
        let limited = try #require(APIKey.generate(id: "limited"))
        let other = try #require(APIKey.generate(id: "other"))
        let time = Mutex(0.0)
        let auth = try Self.authenticator(
            Self.keyFile([(limited, ["*"], ["register"], 2), (other, ["*"], ["register"], nil)]), now: { time.withLock { $0 } })
        let principal = try auth.authenticate(authorization: "Bearer \(limited.text)")
        #expect(try auth.admit(principal, items: 1) == .all(1))
        #expect(try auth.admit(principal, items: 1) == .all(1))
        do {
            _ = try auth.admit(principal, items: 1)
            Issue.record("the third call within the burst of 2 must be refused")
        } catch {
            #expect(error.code == .resourceExhausted)
            #expect(error.retryAfter == .milliseconds(500))
        }
        _ = try auth.admit(auth.authenticate(authorization: "Bearer \(other.text)"), items: 1)  // another key's bucket
        time.withLock { $0 = 0.5 }
        #expect(try auth.admit(principal, items: 1) == .all(1))
        // Items, not calls: a batch of 5 on a full bucket of 2 admits its first 2.
        time.withLock { $0 = 10 }
        let admission = try auth.admit(principal, items: 5)
        #expect(admission.admitted == 2)
        #expect(admission.retryAfter == .milliseconds(500))
        #expect(admission.limitedBy == "API key limited")
    }

    @Test func subjectBucketsAreBoundedLeastRecentlyUsedFirst() throws {
        let time = Mutex(0.0)
        var configuration = RegistrationAuthenticator.Configuration()
        configuration.keysJSON = Self.keyFile([], jwt: [Self.hsKeyEntry()])
        configuration.maximumSubjectBuckets = 3
        configuration.defaultSubjectBurst = 1
        let auth = try RegistrationAuthenticator(
            configuration: configuration, monotonicSeconds: { time.withLock { $0 } }, logger: Logger(label: "t", logLevel: .error))
        func user(_ name: String) -> RegistrationPrincipal { .user(userID: name, bundleID: "com.example.app", keyID: "hs-1") }
        for name in ["a", "b", "c"] { #expect(try auth.admit(user(name), items: 1) == .all(1)) }
        #expect(throws: RegistrationError.self) { try auth.admit(user("a"), items: 1) }  // a is now the most recent
        #expect(try auth.admit(user("d"), items: 1) == .all(1))  // evicts b, the least recently used
        #expect(auth.subjectBucketCount == 3)
        #expect(try auth.admit(user("b"), items: 1) == .all(1))  // forgotten, so full again
        #expect(throws: RegistrationError.self) { try auth.admit(user("d"), items: 1) }
        for index in 0..<1_000 { _ = try? auth.admit(user("u\(index)"), items: 1) }
        #expect(auth.subjectBucketCount == 3)
        #expect(RegistrationAuthenticator.Configuration().maximumSubjectBuckets == 100_000)
    }
}

/// The agreed metric names and bounded labels.
@Suite struct RegistrationMetricsTests {
    @Test func outcomesAndReasonsAreCounted() {
        let registry = MetricsRegistry()
        let metrics = RegistrationMetrics(registry: registry)
        metrics.record(bundleID: "com.example.app", operation: .register, error: nil)
        metrics.record(bundleID: "com.stranger.app", operation: .register, error: .unauthenticated("wrong_key", "x"))
        metrics.record(bundleID: "com.example.app", operation: .admin, error: .denied("operation", "x"))
        metrics.record(bundleID: "com.example.app", operation: .register, error: RegistrationError(code: .resourceExhausted, message: "x", reason: "rate_limited"))
        metrics.record(bundleID: "com.example.app", operation: .unregister, error: .invalid("device_token", "x"))
        #expect(registry.value("push_registrations_total", labels: ["com.example.app", "register", "ok"]) == 1)
        // Refused credentials never put the requested bundle id into a label.
        #expect(registry.value("push_registrations_total", labels: ["", "register", "unauthenticated"]) == 1)
        #expect(registry.value("push_registrations_total", labels: ["com.stranger.app", "register", "unauthenticated"]) == nil)
        #expect(registry.value("push_registrations_total", labels: ["", "admin", "permission_denied"]) == 1)
        // Validation runs before authorization: an invalid call does not name its bundle id either.
        #expect(registry.value("push_registrations_total", labels: ["", "unregister", "invalid_argument"]) == 1)
        #expect(registry.value("push_auth_failures_total", labels: ["wrong_key"]) == 1)
        #expect(registry.value("push_auth_failures_total", labels: ["operation"]) == 1)
        #expect(registry.value("push_rate_limited_total") == 1)
    }

    /// A wildcard key could name 2,000 bundle ids, each a series; now 100 and `other`.
    @Test func twoThousandBundleIDsMakeAtMostAHundredSeriesAndOther() {
        let registry = MetricsRegistry()
        let metrics = RegistrationMetrics(registry: registry)
        for index in 0..<2_000 { metrics.record(bundleID: "com.attacker.app\(index)", operation: .register, error: nil) }
        #expect(registry.seriesCount("push_registrations_total") == 101)
        #expect(registry.value("push_registrations_total", labels: ["other", "register", "ok"]) == 1_900)
        #expect(registry.value(MetricsRegistry.labelOverflowMetric, labels: ["push_registrations_total", "bundle_id"]) == 1_900)
    }
}

/// No caller-chosen number crashes the service: JWT times at the Int64 limits and key-file rates
/// outside their range (issue 23: `iat`/`exp` near Int64.max overflowed, a rate of 1e-300 trapped
/// on the first refused call).
@Suite struct RegistrationHostileNumberTests {
    static let secret = RegistrationAuthTests.hsSecret
    static let limits: [Int64] = [.min, -1, 0, .max]

    static func token(_ claims: String) -> String {
        JSONWebToken.signHS256(headerJSON: "{\"alg\":\"HS256\",\"kid\":\"hs-1\"}", claimsJSON: claims, secret: secret)
    }

    static func claims(iat: String, exp: String, nbf: String? = nil) -> String {
        "{\"sub\":\"user-1\",\"bundle_id\":\"com.example.app\",\"aud\":\"push.v1.TokenRegistry\",\"iat\":\(iat),\"exp\":\(exp)"
            + (nbf.map { ",\"nbf\":\($0)" } ?? "") + "}"
    }

    /// The refusal reason of `claims` (nil: accepted).
    static func verdict(_ claims: String, now: Int64 = 1_800_000_000) throws -> String? {
        let auth = try RegistrationAuthTests.authenticator(
            RegistrationAuthTests.keyFile([], jwt: [RegistrationAuthTests.hsKeyEntry()]),
            clock: ManualWallClock(milliseconds: now * 1000))
        do {
            _ = try auth.authenticate(authorization: "Bearer \(token(claims))")
            return nil
        } catch {
            #expect(error.code == .unauthenticated, "\(claims): \(error)")
            return error.reason
        }
    }

    @Test(arguments: limits) func jwtTimesAtTheLimitsAreRefusedNotTrapped(value: Int64) throws {
        let now: Int64 = 1_800_000_000
        // iat alone at the limit: exp − iat overflowed for Int64.min.
        #expect(try Self.verdict(Self.claims(iat: "\(value)", exp: "\(now + 600)")) == "jwt_lifetime")
        // exp alone at the limit.
        #expect(try Self.verdict(Self.claims(iat: "\(now)", exp: "\(value)")) == "jwt_lifetime")
        // A short, well-formed lifetime at the limit: exp + leeway overflowed for Int64.max.
        let (iat, exp) = value == .max ? (value - 600, value) : (value, value + 600)
        #expect(try Self.verdict(Self.claims(iat: "\(iat)", exp: "\(exp)")) == (value == .max ? "jwt_claims" : "jwt_expired"))
        // nbf at the limit: in the past is fine, Int64.max is "not yet".
        #expect(try Self.verdict(Self.claims(iat: "\(now)", exp: "\(now + 600)", nbf: "\(value)")) == (value == .max ? "jwt_claims" : nil))
    }

    @Test(arguments: ["9223372036854775808", "-9223372036854775809", "1e300", "1e-300", "1.5", "\"1800000000\""])
    func jwtTimesThatAreNotInt64AreRefused(text: String) throws {
        #expect(try Self.verdict(Self.claims(iat: text, exp: "1800000600")) == "jwt_claims")
        #expect(try Self.verdict(Self.claims(iat: "1800000000", exp: "1800000600", nbf: text)) == "jwt_claims")
    }

    @Test(arguments: ["rate_per_second", "burst"], ["\"NaN\"", "1e999", "-1e999", "1e-300", "1e300", "-1", "0", "null"])
    func keyFileRatesOutsideTheirRangeAreRefusedAtLoad(field: String, value: String) {
        let json = """
            {"api_keys": [{"id": "backend-1", "sha256": "\(String(repeating: "0", count: 64))", "bundle_ids": ["*"],
                           "operations": ["register"], "\(field)": \(value)}]}
            """
        do {
            _ = try RegistrationCredentials(json: Array(json.utf8))
            Issue.record("\(field) \(value) was accepted")
        } catch {
            #expect(error.description.hasPrefix("api_keys[0].\(field) (API key backend-1): must be a number from"), "\(error)")
        }
    }

    @Test func theSlowestAllowedRateAnswersWithAFiniteRetryHint() throws {
        let key = try #require(APIKey.generate(id: "slow"))
        let json = """
            {"api_keys": [{"id": "slow", "sha256": "\(RegistrationAuthTests.hex(key.sha256))", "bundle_ids": ["*"],
                           "operations": ["register"], "rate_per_second": 0.001, "burst": 1}]}
            """
        let auth = try RegistrationAuthTests.authenticator(json)
        let principal = try auth.authenticate(authorization: "Bearer \(key.text)")
        _ = try auth.admit(principal, items: 1)
        do {
            _ = try auth.admit(principal, items: 1)
            Issue.record("the second call must be refused")
        } catch {
            #expect(error.code == .resourceExhausted)
            #expect(error.retryAfter == .seconds(1000))
        }
        #expect(RegistrationAuthenticator.retryAfter(seconds: .infinity) == .seconds(86_400))
        #expect(RegistrationAuthenticator.retryAfter(seconds: .nan) == .zero)
        #expect(RegistrationAuthenticator.retryAfter(seconds: 1e300) == .seconds(86_400))
    }
}
