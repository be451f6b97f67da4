import APNs
import APNsSimulator
import Foundation
import PushDomain
import ServiceCore
import Testing

/// Key rotation over TLS against the simulator (docs/apns-client.md "Key rotation"): a key being
/// rotated in that APNs refuses never fails a notification while the key before it works.
@Suite(.serialized, .timeLimit(.minutes(2))) struct KeyRotationTests {
    /// Key B claims a Key ID the simulator does not know (403 InvalidProviderToken), key A is the
    /// simulator's team-1 key: every notification is delivered through A, B is left out for the retry
    /// delay, counted and shown, then tried again.
    @Test func aRefusedNewKeyFallsBackToTheKeyBeforeIt() async throws {
        try await withSimulator { harness in
            var configuration = harness.configuration()
            configuration.keyRetryDelay = .seconds(60)
            let registry = MetricsRegistry()
            let good = try harness.credentials.tokens(key: 1, clock: harness.clock, metrics: registry)
            let unknown = APNsProviderTokenCache(
                signingKey: try APNsSigningKey(p8: try harness.credentials.text("key2.p8")), keyID: "UNKNOWNKEY", teamID: Credentials.team1,
                clock: harness.clock, metrics: registry)
            let client = APNsClient(configuration: configuration, credentials: [:], logger: Logger(label: "apns.test", logLevel: .critical),
                                    metrics: registry)
            harness.shutdownAtEnd(client)
            let options = APNsSendOptions(credentials: .token(unknown), fallbackCredentials: .token(good))
            func kids(_ index: Int) -> [String] {
                harness.simulator.receivedRequests().filter { $0.path.hasSuffix(deviceToken(index).hex) }.compactMap {
                    if case .string(let kid)? = $0.jwt?.header["kid"] { kid } else { nil }
                }
            }
            func statuses(_ index: Int) -> [Int] {
                harness.simulator.receivedRequests().filter { $0.path.hasSuffix(deviceToken(index).hex) }.compactMap(\.status)
            }

            let first = try await client.send(alert(1), environment: .production, options: options)
            #expect(first.status == 200, "\(first.status) \(first.reason?.rawValue ?? "")")
            #expect(statuses(1) == [403, 200])
            #expect(kids(1) == ["UNKNOWNKEY", Credentials.key1])
            let refused = client.keysInFallback()
            #expect(refused.map(\.keyID) == ["UNKNOWNKEY"])
            #expect(refused.first?.reason == .invalidProviderToken)
            #expect(refused.first?.bundleID == Credentials.app)
            #expect(refused.first?.fallbackKeyID == Credentials.key1)
            // The key's cache remembers the refusal (pushctl credentials list --admin shows it), the good key none.
            #expect(unknown.lastRefusal?.reason == "InvalidProviderToken" && good.lastRefusal == nil)
            #expect(unknown.currentIssuedAt != nil && good.currentIssuedAt != nil)

            // Within the retry delay: straight to the key before it, B not asked.
            let results = await withTaskGroup(of: Int.self) { group in
                for index in 2...11 {
                    group.addTask { (try? await client.send(alert(index), environment: .production, options: options).status) ?? 0 }
                }
                return await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(results == Array(repeating: 200, count: 10))
            for index in 2...11 { #expect(kids(index) == [Credentials.key1], "notification \(index)") }
            #expect(registry.value("push_apns_key_fallbacks_total", labels: ["UNKNOWNKEY"]) == 11)

            // After the delay B is tried again, refused again, and the notification still delivered.
            harness.clock.advance(by: .seconds(61))
            #expect(try await client.send(alert(12), environment: .production, options: options).status == 200)
            #expect(kids(12) == ["UNKNOWNKEY", Credentials.key1])
            #expect(client.keysInFallback().first?.refusals == 2)
            #expect(harness.simulator.receivedRequests().filter { $0.status != nil && $0.status != 200 && $0.status != 403 }.isEmpty)
        }
    }
}
