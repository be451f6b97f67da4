import APNs
import APNsKeyRegistry
import APNsSimulator
import Foundation
import Kafka
import ProtobufCodec
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

extension DispatcherEngineSuites {
    /// The credentials registry in the whole engine (`EngineWorld`: the mock Kafka cluster, PostgreSQL,
    /// the APNs simulator over TLS trusting three keys of two more teams, one scoped to production, one
    /// to production and one bundle ID): each app's notifications go out with its own key on
    /// connections of that team only, and a bundle id without a credential, or outside its key's
    /// environment, is refused before sending with `OUTCOME_REASON_NO_CREDENTIAL`.
    @Suite(.testDatabase, .serialized, .timeLimit(.minutes(3)))
    struct CredentialsRoutingTests {
        /// A P-256 key made by openssl in `directory`: `<name>.p8` and its public half's PEM.
        static func makeKey(_ name: String, in directory: URL) async throws -> String {
            let p8 = directory.appendingPathComponent("\(name).p8").path
            let pub = directory.appendingPathComponent("\(name).pub.pem").path
            for command in [["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", p8],
                            ["openssl", "pkey", "-in", p8, "-pubout", "-out", pub]] {
                let made = try await runProgram(command)
                try #require(made.status == 0, "openssl: \(made.output)")
            }
            return try String(contentsOfFile: pub, encoding: .utf8)
        }

        /// The `iss` and `kid` of a request's provider token (`authorization: bearer <JWT>`).
        static func issuerAndKey(_ record: APNsSimulatorRecord) -> (iss: String, kid: String)? {
            guard let authorization = record.headers.first(where: { $0.name == "authorization" })?.value,
                  let jwt = try? JSONWebToken(parsing: String(authorization.dropFirst("bearer ".count))),
                  let kid = jwt.keyID, let iss = jwt.stringClaim("iss")
            else { return nil }
            return (iss, kid)
        }

        static func request(_ requestID: String, bundleID: String, token: String, environment: Environment = .production) -> SendRequest {
            var request = SendRequest(
                requestID: requestID, target: .deviceTokens(DeviceTokens(deviceTokens: [token])),
                notification: PushMessages.Notification(
                    bundleID: bundleID, environment: environment, pushType: .alert, payload: #"{"aps":{"alert":"hi"}}"#))
            request.createdAtMs = SystemWallClock().nowMilliseconds()
            return request
        }

        @Test func twoTeamsAreDeliveredWithTheirOwnKeysAndAnAppWithoutACredentialIsRefused() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("credentials-routing-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let teamA = try await Self.makeKey("team-a", in: directory)
            let teamB = try await Self.makeKey("team-b", in: directory)
            let teamBScoped = try await Self.makeKey("team-b-scoped", in: directory)
            // Apple's view of the keys: KEYB000001 works in production only; KEYB000002 in production
            // and for com.teamb.scoped only (a push for another topic gets TopicDisallowed).
            let world = try await EngineWorld(trustedKeys: [
                APNsSimulator.TrustedKey(keyID: "KEYA000001", teamID: "TEAMA00001", publicKeyPEM: teamA),
                APNsSimulator.TrustedKey(keyID: "KEYB000001", teamID: "TEAMB00001", publicKeyPEM: teamB, environment: .production),
                APNsSimulator.TrustedKey(keyID: "KEYB000002", teamID: "TEAMB00001", publicKeyPEM: teamBScoped, environment: .production,
                                         topics: ["com.teamb.scoped"]),
            ])
            let file = directory.appendingPathComponent("credentials.json")
            try """
                {"apps": [{"bundle_id": "com.teama.*", "keys": [{"team_id": "TEAMA00001", "key_id": "KEYA000001", "p8_file": "team-a.p8"}]},
                          {"bundle_id": "com.teamb.app", "keys": [{"team_id": "TEAMB00001", "key_id": "KEYB000001", "p8_file": "team-b.p8",
                                                                   "environment": "production"}]},
                          {"bundle_id": "com.teamb.scoped", "keys": [{"team_id": "TEAMB00001", "key_id": "KEYB000002",
                                                                      "p8_file": "team-b-scoped.p8", "environment": "production",
                                                                      "topics": ["com.teamb.scoped"]}]}]}
                """.write(to: file, atomically: true, encoding: .utf8)
            let credentials = try CredentialsStore(file: file.path)
            let engine = try world.startEngine { $0.credentials = credentials }

            let sends = [("team-a-1", "com.teama.mail", EngineWorld.token("a1")), ("team-a-2", "com.teama.chat", EngineWorld.token("a2")),
                         ("team-b-1", "com.teamb.app", EngineWorld.token("b1")), ("team-b-2", "com.teamb.scoped", EngineWorld.token("b2")),
                         ("team-c-1", "com.teamc.app", EngineWorld.token("c1"))]
            for (requestID, bundleID, token) in sends { _ = try await world.produceRequest(Self.request(requestID, bundleID: bundleID, token: token)) }
            // com.teamb.app's only key is scoped to production: a sandbox notification has no credential.
            _ = try await world.produceRequest(Self.request("team-b-sandbox", bundleID: "com.teamb.app", token: EngineWorld.token("b3"),
                                                            environment: .sandbox))
            let all = sends.map(\.0) + ["team-b-sandbox"]
            try await eventually("every request completed") { all.allSatisfy { world.feedback.completions($0).count == 1 } }
            try await engine.stop()

            for (requestID, _, _) in sends.prefix(4) {
                #expect(world.feedback.reports(requestID).map(\.outcome) == [.delivered], "\(requestID)")
            }
            for requestID in ["team-c-1", "team-b-sandbox"] {
                let refused = world.feedback.reports(requestID)
                #expect(refused.map(\.outcome) == [.rejected] && refused.map(\.outcomeReason) == [.noCredential], "\(requestID)")
                #expect(refused.first?.httpStatus == 0 && refused.first?.apnsReason == "")
            }
            // Never a token deactivation for a missing credential.
            #expect(!world.feedback.all.contains { if case .tokenInvalidated? = $0.event { true } else { false } })

            let records = world.simulator.receivedRequests()
            for unsent in ["c1", "b3"] {
                #expect(!records.contains { $0.path == "/3/device/\(EngineWorld.token(unsent))" }, "no request without a credential")
            }
            var teamsByTopic: [String: Set<String>] = [:]
            var teamsByConnection: [String: Set<String>] = [:]
            for record in records {
                let topic = record.headers.first { $0.name == "apns-topic" }?.value ?? ""
                let issuer = Self.issuerAndKey(record).map { "\($0.iss)/\($0.kid)" } ?? "none"
                teamsByTopic[topic, default: []].insert(issuer)
                teamsByConnection["\(record.environment)-\(record.connectionID)", default: []].insert(Self.issuerAndKey(record)?.iss ?? "none")
            }
            #expect(teamsByTopic == ["com.teama.mail": ["TEAMA00001/KEYA000001"], "com.teama.chat": ["TEAMA00001/KEYA000001"],
                                     "com.teamb.app": ["TEAMB00001/KEYB000001"], "com.teamb.scoped": ["TEAMB00001/KEYB000002"]])
            #expect(teamsByConnection.count >= 2 && teamsByConnection.values.allSatisfy { $0.count == 1 }, "\(teamsByConnection)")
            await world.close()
        }

        /// Key rotation mid-request (issue 29): a key added to the file while a request of 3,000 tokens
        /// runs serves from the reload on, the old key staying as the fallback; nothing FAILED, no token
        /// accepted twice. Then a bad new key (one Apple does not know: 403 InvalidProviderToken): the
        /// app's sends go to the key before it, every notification is delivered, and the refusal is
        /// counted by key and listed for readiness.
        @Test func aKeyRotatedMidRequestServesAfterTheReloadAndABadNewKeyFallsBack() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("credentials-rotation-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let old = try await Self.makeKey("old", in: directory)
            let new = try await Self.makeKey("new", in: directory)
            _ = try await Self.makeKey("bad", in: directory)
            let world = try await EngineWorld(trustedKeys: [
                APNsSimulator.TrustedKey(keyID: "KEYR000001", teamID: "TEAMR00001", publicKeyPEM: old),
                APNsSimulator.TrustedKey(keyID: "KEYR000002", teamID: "TEAMR00001", publicKeyPEM: new),
            ])
            let file = directory.appendingPathComponent("credentials.json")
            func write(_ keys: [String]) throws {
                let entries = keys.map { #"{"team_id": "TEAMR00001", "key_id": "\#($0.uppercased() == "OLD" ? "KEYR000001" : $0.uppercased() == "NEW" ? "KEYR000002" : "KEYR000003")", "p8_file": "\#($0).p8"}"# }
                try #"{"apps": [{"bundle_id": "com.rotate.app", "keys": [\#(entries.joined(separator: ", "))]}]}"#
                    .write(to: file, atomically: true, encoding: .utf8)
            }
            try write(["old"])
            let credentials = try CredentialsStore(file: file.path)
            // A warm-up request confirms the old key's new connection first (a new token connection
            // sends one request before it fans out, and which of a request's tokens reaches it first
            // is not fixed). Then Apple holds every answer of the request: with 100 notifications in
            // flight at most, 101 are sent on the old key and the request cannot go on until the
            // reload is done.
            let engine = try world.startEngine {
                $0.credentials = credentials
                $0.maxInFlightNotifications = 100
            }
            _ = try await world.produceRequest(Self.request("rotation-warm-up", bundleID: "com.rotate.app", token: EngineWorld.token("f1")))
            try await eventually("the warm-up request completed") { world.feedback.completions("rotation-warm-up").count == 1 }
            let tokens = (0..<3_000).map { EngineWorld.token("e1", $0) }
            var faults = APNsSimulatorFaults()
            faults.hold = .init(tokens: Set(tokens))
            world.simulator.setFaults(faults)

            var first = SendRequest(
                requestID: "rotation-1", target: .deviceTokens(DeviceTokens(deviceTokens: tokens)),
                notification: PushMessages.Notification(bundleID: "com.rotate.app", environment: .production, pushType: .alert,
                                                        payload: #"{"aps":{"alert":"hi"}}"#))
            first.createdAtMs = SystemWallClock().nowMilliseconds()
            _ = try await world.produceRequest(first)
            try await eventually("the in-flight budget taken by held answers") { world.simulator.heldTokens().count == 100 }
            try write(["old", "new"])  // the new key, active from this load on
            #expect(credentials.reload())
            world.simulator.setFaults(APNsSimulatorFaults())
            world.simulator.releaseHeld()
            try await eventually("the request completed", timeout: .seconds(120)) { world.feedback.completions("rotation-1").count == 1 }
            let firstReports = world.feedback.reports("rotation-1")
            #expect(firstReports.count == 3_000 && firstReports.allSatisfy { $0.outcome == .delivered })
            let records = world.simulator.receivedRequests().filter { $0.headers.contains { $0.name == "apns-topic" && $0.value == "com.rotate.app" } }
            let accepted = Dictionary(grouping: records.filter { $0.status == 200 }, by: \.path)
            #expect(accepted.count == 3_001 && accepted.values.allSatisfy { $0.count == 1 }, "every token accepted once")
            let keysUsed = Set(records.compactMap { Self.issuerAndKey($0)?.kid })
            #expect(keysUsed == ["KEYR000001", "KEYR000002"], "the old key before the reload, the new one after: \(keysUsed)")
            #expect(records.last.flatMap { Self.issuerAndKey($0)?.kid } == "KEYR000002")
            #expect(records.filter { Self.issuerAndKey($0)?.kid == "KEYR000001" }.count == 101, "only the warm-up and the held ones on the old key")

            // A bad new key: the key before it (KEYR000002) serves the app meanwhile.
            try write(["new", "bad"])
            #expect(credentials.reload())
            let more = (0..<200).map { EngineWorld.token("e2", $0) }
            var second = first
            second.requestID = "rotation-2"
            second.target = .deviceTokens(DeviceTokens(deviceTokens: more))
            _ = try await world.produceRequest(second)
            try await eventually("the second request completed", timeout: .seconds(60)) { world.feedback.completions("rotation-2").count == 1 }
            let secondReports = world.feedback.reports("rotation-2")
            #expect(secondReports.count == 200 && secondReports.allSatisfy { $0.outcome == .delivered }, "nothing FAILED on a bad key")
            #expect(!world.feedback.all.contains { if case .tokenInvalidated? = $0.event { true } else { false } })
            #expect((engine.registry.value("push_apns_key_fallbacks_total", labels: ["KEYR000003"]) ?? 0) >= 200)
            let refusals = engine.client.keysInFallback()
            #expect(refusals.map(\.keyID) == ["KEYR000003"] && refusals.map(\.fallbackKeyID) == ["KEYR000002"], "\(refusals)")
            #expect(refusals.first?.reason == .invalidProviderToken && refusals.first?.bundleID == "com.rotate.app")
            try await engine.stop()
            await world.close()
        }
    }
}
