import APNs
import APNsSimulator
import Foundation
import PushDomain
import ServiceCore
import Testing

/// 429 `TooManyProviderTokenUpdates` over TLS against the simulator, which refuses a connection's
/// second JWT within 20 minutes of its first (docs/apns-protocol.md §4).
@Suite(.serialized, .timeLimit(.minutes(2))) struct ProviderTokenChangeTests {
    /// Our clock runs 46 minutes ahead of the simulator's: the connection thinks its JWT is due for a
    /// change, APNs (1 second later by its clock) refuses the change. The notification must go out
    /// with the JWT APNs still holds for the connection, not with the refused one again and again.
    @Test func aRefusedChangeIsDeliveredWithThePreviousTokenNotRetriedWithTheNewOne() async throws {
        try await withSimulator { harness in
            let ours = ManualWallClock(milliseconds: harness.clock.nowMilliseconds())
            var configuration = harness.configuration()
            configuration.clock = ours
            configuration.retry.providerTokenUpdateDelay = .milliseconds(100)
            let registry = MetricsRegistry()
            let tokens = try harness.credentials.tokens(clock: ours, metrics: registry)
            let client = APNsClient(configuration: configuration, tokens: tokens, logger: Logger(label: "apns.test", logLevel: .critical),
                                    metrics: registry)
            harness.shutdownAtEnd(client)
            #expect(try await client.send(alert(0), environment: .production).status == 200)
            let first = try #require(tokens.currentIssuedAt)
            ours.advance(by: .seconds(46 * 60))
            harness.clock.advance(by: .seconds(1))
            // Retrying may go on for one second of our clock; the waiter moves our clock by each delay.
            let waiter = ClockAdvancingWaiter(clock: ours)
            let deadline = Date(timeIntervalSince1970: TimeInterval(ours.nowMilliseconds() + 1_000) / 1000)
            let response = try await client.send(alert(1), environment: .production, options: APNsSendOptions(waiter: waiter, retryDeadline: deadline))
            #expect(response.status == 200, "\(response.status) \(response.reason?.rawValue ?? "")")
            let sent = harness.simulator.receivedRequests().filter { $0.path.hasSuffix(deviceToken(1).hex) }
            let iats = sent.compactMap { $0.jwt?.claims["iat"]?.integerValue }
            #expect(sent.map(\.status) == [429, 200], "\(sent.map(\.status))")
            #expect(iats.count == 2 && iats[0] > first && iats[1] == first, "refused the new JWT, then the previous one: \(iats)")
            #expect(Set(sent.map(\.connectionID)).count == 1, "on the same connection")
            #expect(client.metrics["provider_token_restores"] == 1)
            // The connection keeps the previous JWT: the next notification goes at once.
            #expect(try await client.send(alert(2), environment: .production).status == 200)
        }
    }
}
