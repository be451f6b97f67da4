import APNs
import Foundation
import HTTP2
import Kafka
import ProtobufCodec
import PushMessages
import PushTestSupport
import ServiceCore
import Synchronization
import Testing

@testable import GRPC
@testable import RegistrationServiceCore

/// The server's order of checks and its rate limits over real gRPC and JSON calls, against
/// librdkafka's Kafka-protocol broker (issue 23): authentication before parsing, batches only for
/// API keys, rate limits that count items, and a limit for every JWT.
@Suite(.timeLimit(.minutes(1)))
struct RegistrationServerAbuseTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    static let bundle = "com.example.app"

    /// A running server with the key file `keys`, a rate-limit clock the test moves (seconds), and
    /// an HTTP/2 connection to it.
    final class Seconds: Sendable {
        private let value = Mutex(0.0)
        var now: Double { value.withLock { $0 } }
        func set(_ seconds: Double) { value.withLock { $0 = seconds } }
    }

    struct Harness {
        let connection: HTTP2Connection
        let time: Seconds
        let authenticator: RegistrationAuthenticator

        func grpc(_ path: String, _ body: [UInt8], credential: String?) async throws -> (status: Int, message: String, body: [UInt8]) {
            var headers = [HTTP2Header("content-type", "application/grpc"), HTTP2Header("te", "trailers")]
            if let credential { headers.append(HTTP2Header("authorization", "Bearer \(credential)")) }
            let response = try await connection.send(
                HTTP2Request(method: "POST", path: path, headers: headers, body: GRPCWire.frame(body)), timeout: .seconds(20))
            let fields = response.trailers.isEmpty ? response.headers : response.trailers
            let status = Int(fields.first("grpc-status") ?? "") ?? -1
            let messages = try GRPCWire.unframeAll(response.body, maxSize: 1 << 20)
            return (status, fields.first("grpc-message") ?? "", messages.first ?? [])
        }

        func json(_ path: String, _ body: String, credential: String?) async throws -> Int {
            var headers = [HTTP2Header("content-type", "application/json")]
            if let credential { headers.append(HTTP2Header("authorization", "Bearer \(credential)")) }
            return try await connection.send(
                HTTP2Request(method: "POST", path: path, headers: headers, body: Array(body.utf8)), timeout: .seconds(20)).status
        }
    }

    func withServer(keys: String, _ body: (Harness) async throws -> Void) async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let topic = "token-events-\(UUID().uuidString.prefix(8))"
        try cluster.createTopic(topic, partitions: 1)
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: [cluster.bootstrapServers]))
        let time = Seconds()
        var configuration = RegistrationAuthenticator.Configuration()
        configuration.keysJSON = keys
        let authenticator = try RegistrationAuthenticator(
            configuration: configuration, monotonicSeconds: { time.now }, logger: Logger(label: "t", logLevel: .error))
        let service = TokenRegistryService(producer: producer, topic: topic, metrics: RegistrationMetrics(registry: MetricsRegistry()))
        let server = try RegistrationServer.start(
            service: service, authenticator: authenticator, health: GRPCHealthService(services: []),
            configuration: .init(http2: .init(host: "127.0.0.1", port: 0)))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await server.serve() }
            defer { server.close() }  // ends serve() on every path; after a shutdown it does nothing more
            let connection = try await HTTP2Connection.connect(host: "127.0.0.1", port: server.port)
            do {
                try await body(Harness(connection: connection, time: time, authenticator: authenticator))
            } catch {
                await connection.close()
                await server.shutdown(gracePeriod: .seconds(1))
                await producer.shutdown()
                throw error
            }
            await connection.close()
            await server.shutdown(gracePeriod: .seconds(1))
            await producer.shutdown()
        }
    }

    static func keyFile(_ key: APIKey, rate: Double? = nil, burst: Double? = nil, jwt: [String] = []) -> String {
        let limits = (rate.map { ", \"rate_per_second\": \($0)" } ?? "") + (burst.map { ", \"burst\": \($0)" } ?? "")
        return """
            {"api_keys": [{"id": "\(key.id)", "sha256": "\(RegistrationAuthTests.hex(key.sha256))", "bundle_ids": ["*"],
                           "operations": ["register", "unregister", "admin"]\(limits)}],
             "registration_jwt_keys": [\(jwt.joined(separator: ","))]}
            """
    }

    static func device(_ number: Int, user: String = "user-1") -> Device {
        var device = Device()
        device.deviceToken = String(format: "%064x", number)
        device.bundleID = bundle
        device.environment = .production
        device.userID = user
        return device
    }

    static func userJWT(sub: String = "user-1", kid: String = "hs-1") -> String {
        let now = Int64(Date().timeIntervalSince1970)
        return JSONWebToken.signHS256(
            headerJSON: "{\"alg\":\"HS256\",\"kid\":\"\(kid)\"}",
            claimsJSON: RegistrationAuthTests.claims(sub: sub, iat: now - 5, exp: now + 600), secret: RegistrationAuthTests.hsSecret)
    }

    static let paths = [
        TokenRegistry.RegisterToken.path, TokenRegistry.UnregisterToken.path, TokenRegistry.BatchRegisterTokens.path,
        TokenRegistry.ForgetUser.path,
    ]

    /// docs/registration-auth.md: "Authentication comes first (an unauthenticated caller learns
    /// nothing about its request)". Before, a malformed body was answered INVALID_ARGUMENT / 400
    /// whatever the credential.
    @Test func aMalformedBodyFromAnUnauthenticatedCallerGetsUnauthenticated() async throws {
        let key = try #require(APIKey.generate(id: "backend"))
        let stranger = try #require(APIKey.generate(id: "stranger"))
        try await withServer(keys: Self.keyFile(key)) { harness in
            let garbage: [UInt8] = [0x0A, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]
            for path in Self.paths {
                for credential in [nil, stranger.text, "pk_backend_short", "not.a.jwt"] as [String?] {
                    let grpc = try await harness.grpc(path, garbage, credential: credential).status
                    let json = try await harness.json(path, "{\"device\": [", credential: credential)
                    #expect(grpc == 16, "\(path) \(credential ?? "none")")
                    #expect(json == 401, "\(path) \(credential ?? "none")")
                }
                // An authenticated caller learns what is wrong with its request.
                let grpc = try await harness.grpc(path, garbage, credential: key.text).status
                let json = try await harness.json(path, "{\"device\": [", credential: key.text)
                #expect(grpc == 3, "\(path)")
                #expect(json == 400, "\(path)")
            }
        }
    }

    /// docs/registration-auth.md: "A JWT may only register: unregistering, batches and ForgetUser
    /// need an API key". Before, BatchRegisterTokens accepted a JWT.
    @Test func aBatchCallWithAJWTIsRefused() async throws {
        let key = try #require(APIKey.generate(id: "backend"))
        try await withServer(keys: Self.keyFile(key, jwt: [RegistrationAuthTests.hsKeyEntry()])) { harness in
            let batch = BatchRegisterTokensRequest(registrations: [RegisterTokenRequest(device: Self.device(1))])
            let reply = try await harness.grpc(TokenRegistry.BatchRegisterTokens.path, batch.serializedBytes(), credential: Self.userJWT())
            #expect(reply.status == 7, "\(reply.message)")
            #expect(reply.message.contains("needs an API key"))
            let json = String(decoding: batch.jsonUTF8Bytes(), as: UTF8.self)
            let jsonStatus = try await harness.json(TokenRegistry.BatchRegisterTokens.path, json, credential: Self.userJWT())
            #expect(jsonStatus == 403)
            // The same JWT registers its own device one call at a time.
            let single = RegisterTokenRequest(device: Self.device(1))
            let singleStatus = try await harness.grpc(TokenRegistry.RegisterToken.path, single.serializedBytes(), credential: Self.userJWT()).status
            #expect(singleStatus == 0)
        }
    }

    /// Before, JWT callers had no rate limit at all (21,742 registrations in 5 s from one JWT).
    @Test func oneJWTIsLimitedPerSubjectAndPerKid() async throws {
        let key = try #require(APIKey.generate(id: "backend"))
        let kidEntry = "{\"kid\": \"hs-1\", \"bundle_id\": \"\(Self.bundle)\", \"alg\": \"HS256\", \"secret\": \"\(Base64.encodeURL(RegistrationAuthTests.hsSecret))\", \"rate_per_second\": 1, \"burst\": 5, \"subject_burst\": 3}"
        try await withServer(keys: Self.keyFile(key, jwt: [kidEntry])) { harness in
            func register(_ user: String, _ number: Int) async throws -> Int {
                try await harness.grpc(
                    TokenRegistry.RegisterToken.path, RegisterTokenRequest(device: Self.device(number, user: user)).serializedBytes(),
                    credential: Self.userJWT(sub: user)
                ).status
            }
            // One subject: its burst of 3, then RESOURCE_EXHAUSTED.
            var statuses: [Int] = []
            for number in 1...4 { statuses.append(try await register("alice", number)) }
            #expect(statuses == [0, 0, 0, 8])
            // Other subjects of the same kid share the kid's burst of 5: two more, then refused.
            statuses = []
            for (number, user) in zip(5..., ["bob", "carol", "dave"]) { statuses.append(try await register(user, number)) }
            #expect(statuses == [0, 0, 8])
            // Refills at the kid's rate (1/s) and the subject's (0.1/s by default).
            harness.time.set(1)
            statuses = [try await register("dave", 8), try await register("alice", 9)]
            #expect(statuses == [0, 8])
        }
    }

    /// Before, an API key's limit counted calls: a 1/s key registered 500 tokens a second in batches.
    @Test func aOnePerSecondKeyRegistersOneTokenASecond() async throws {
        let key = try #require(APIKey.generate(id: "backend"))
        try await withServer(keys: Self.keyFile(key, rate: 1, burst: 1)) { harness in
            var registered = 0
            var number = 0
            for second in 0..<3 {
                harness.time.set(Double(second))
                var items: [RegisterTokenRequest] = []
                for _ in 0..<50 {
                    number += 1
                    items.append(RegisterTokenRequest(device: Self.device(number)))
                }
                let reply = try await harness.grpc(
                    TokenRegistry.BatchRegisterTokens.path, BatchRegisterTokensRequest(registrations: items).serializedBytes(), credential: key.text)
                #expect(reply.status == 0, "\(reply.message)")
                let results = try BatchRegisterTokensResponse(protobufBytes: reply.body).results
                #expect(results.count == 50)
                #expect(results.first?.code == 0)
                #expect(results.dropFirst().allSatisfy { $0.code == 8 && $0.message.contains("retry after") })
                registered += results.filter { $0.code == 0 }.count
                // Within the same second, the bucket is empty: the whole call is refused, single or batch.
                let single = RegisterTokenRequest(device: Self.device(10_000 + second))
                let singleStatus = try await harness.grpc(TokenRegistry.RegisterToken.path, single.serializedBytes(), credential: key.text).status
                let batchStatus = try await harness.grpc(
                    TokenRegistry.BatchRegisterTokens.path, BatchRegisterTokensRequest(registrations: items).serializedBytes(),
                    credential: key.text
                ).status
                #expect(singleStatus == 8)
                #expect(batchStatus == 8)
            }
            #expect(registered == 3)
        }
    }

    /// One user-id rule for every method: before, ForgetUser acknowledged a NUL user id that
    /// RegisterToken refuses (and the dispatcher then dead-lettered the erasure), and accepted 256
    /// bytes where RegisterToken allows 255.
    @Test func forgetUserRefusesTheUserIDsRegisterTokenRefuses() async throws {
        let key = try #require(APIKey.generate(id: "backend"))
        try await withServer(keys: Self.keyFile(key)) { harness in
            func statuses(_ user: String, _ number: Int) async throws -> [Int] {
                let register = try await harness.grpc(
                    TokenRegistry.RegisterToken.path, RegisterTokenRequest(device: Self.device(number, user: user)).serializedBytes(),
                    credential: key.text)
                let forget = try await harness.grpc(
                    TokenRegistry.ForgetUser.path, ForgetUserRequest(bundleID: Self.bundle, userID: user).serializedBytes(), credential: key.text)
                #expect(forget.status != 3 || forget.message.hasPrefix("user_id:"), "\(forget.message)")
                return [register.status, forget.status]
            }
            for (number, bad) in ["alice\u{0}evil", "tab\there", "del\u{7F}", String(repeating: "a", count: 256)].enumerated() {
                let found = try await statuses(bad, number + 1)
                #expect(found == [3, 3], "\(bad.debugDescription.prefix(40))")
            }
            let longest = try await statuses(String(repeating: "a", count: 255), 100)
            #expect(longest == [0, 0])
            let unicode = try await statuses("zoë@example.com", 101)
            #expect(unicode == [0, 0])
        }
    }
}
