import APNs
import APNsSimulator
import Foundation
import HTTP2
import ServiceCore
import Synchronization
import Testing

/// Every reason of docs/apns-protocol.md §3, answered by the simulator, is handled by the action of
/// docs/semantics.md's retry rules: how often it is sent, on which connections, with which JWT.
@Suite(.serialized, .timeLimit(.minutes(1))) struct ReasonTests {
    @Test func everyDocumentedReasonGetsItsAction() async throws {
        try await withSimulator { harness in
            for (index, reason) in APNsReason.documented.enumerated() {
                harness.simulator.reset()
                var configuration = harness.configuration()
                // Delays of 50–100 ms (jitter) within a 600 ms horizon: 7 to 13 attempts, more than
                // the old attempt limit of 5: transient answers are retried until the horizon.
                configuration.retry.backoff = .init(initial: .milliseconds(100), maximum: .milliseconds(100))
                configuration.retry.providerTokenUpdateDelay = .milliseconds(100)
                configuration.retry.tooManyRequestsDelay = .milliseconds(100)
                let tokens = try harness.credentials.tokens(clock: harness.clock)
                let client = APNsClient(configuration: configuration, tokens: tokens, logger: Logger(label: "apns.test", logLevel: .critical))
                var faults = APNsSimulatorFaults()
                faults.reasonShares = [reason: 1.0]
                harness.simulator.setFaults(faults)
                let waiter = ClockAdvancingWaiter(clock: harness.clock)
                let start = harness.clock.nowMilliseconds()
                let response = try await client.send(alert(index), environment: .production, options: harness.options(waiter, horizon: .milliseconds(600)))
                let records = harness.simulator.receivedRequests().filter { $0.path.hasSuffix(deviceToken(index).hex) }
                #expect(response.reason == reason, "\(reason)")
                #expect(response.status == reason.httpStatus)
                #expect(response.action == reason.action, "\(reason)")
                #expect(records.count == response.attempts, "\(reason)")
                #expect(harness.clock.nowMilliseconds() - start <= 600, "\(reason): no attempt after the horizon")
                let connections = Set(records.map(\.connectionID))
                let jwts = records.map { $0.header("authorization") }
                switch reason.action {
                case .reject where reason == .topicDisallowed:
                    // A warm connection may predate the key's topics: once more, at once, on a new one.
                    #expect(response.attempts == 2, "\(reason) is retried once")
                    #expect(connections.count == 2, "\(reason): the retry on a new connection")
                    #expect(waiter.waits.isEmpty)
                case .reject, .deactivateToken:
                    #expect(response.attempts == 1, "\(reason) must not be retried")
                    #expect(waiter.waits.isEmpty)
                case .retryWithBackoff, .backOffDeviceToken:
                    #expect(response.attempts >= 7, "\(reason) is retried until the horizon: \(response.attempts)")
                    #expect(waiter.waits.count == response.attempts - 1)
                    let expected: APNsRetryReason = reason == .tooManyRequests ? .tooManyRequests : .serverError(status: reason.httpStatus!)
                    #expect(waiter.waits.allSatisfy { $0.reason == expected }, "\(reason)")
                case .retryOnNewConnection:
                    #expect(response.attempts >= 7)
                    #expect(connections.count == response.attempts, "\(reason): each retry on a new connection")
                case .refreshProviderTokenAndRetryOnce:
                    #expect(response.attempts == 2, "ExpiredProviderToken is retried once")
                    #expect(connections.count == 2, "on a new connection")
                    #expect(Set(jwts).count == 2, "with a new JWT")
                    #expect(client.metrics["provider_token_faults_ExpiredProviderToken"] == 1, "a repeated ExpiredProviderToken is a provider fault")
                case .retryAfterDelayKeepingJWT:
                    #expect(response.attempts >= 6)
                    #expect(Set(jwts).count == 1, "the JWT is kept")
                    #expect(client.metrics["provider_token_updates_refused"] == response.attempts, "alert metric")
                    #expect(waiter.waits.allSatisfy { $0.reason == .providerToken })
                }
                if reason == .invalidProviderToken {
                    #expect(client.metrics["provider_token_faults_InvalidProviderToken"] == 1)
                }
                if reason.raisesAlert { #expect(client.metrics["alerts"] >= 1, "\(reason) raises an alert") }
                await client.shutdown()
            }
        }
    }

    @Test func tooManyRequestsHoldsBackOnlyThatDeviceToken() async throws {
        var faults = APNsSimulatorFaults()
        faults.tokenRateLimit = .init(maxPushes: 1, window: .seconds(1))
        try await withSimulator(faults: faults) { harness in
            var configuration = harness.configuration()
            configuration.retry.tooManyRequestsDelay = .milliseconds(400)
            let client = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(client)
            #expect(try await client.send(alert(1), environment: .production).status == 200)
            let clock = ContinuousClock()
            let start = clock.now
            // Token 1 is over its limit: 429, held back; token 2 goes through meanwhile.
            async let held = client.send(alert(1), environment: .production)
            try await Task.sleep(for: .milliseconds(100))
            let other = try await client.send(alert(2), environment: .production)
            let otherDone = start.duration(to: clock.now)
            #expect(other.status == 200 && other.attempts == 1)
            // Only once the simulator answered token 1 with 429 (a loaded machine may start the
            // task late) does its rate window end.
            for _ in 0..<200 where harness.simulator.counters()["429 TooManyRequests", default: 0] == 0 {
                try await Task.sleep(for: .milliseconds(10))
            }
            harness.clock.advance(by: .seconds(2))  // the simulator's rate window ends
            let retried = try await held
            let heldDone = start.duration(to: clock.now)
            #expect(retried.status == 200 && retried.attempts == 2, "\(retried) \(harness.simulator.counters())")
            #expect(otherDone < .milliseconds(300), "another token is not held back: \(otherDone)")
            #expect(heldDone >= .milliseconds(250), "the throttled token waited (tooManyRequestsDelay with jitter): \(heldDone)")
        }
    }

    @Test func retriesNeverGoPastTheNotificationsExpiration() async throws {
        var faults = APNsSimulatorFaults()
        faults.statusShares = [500: 1.0]
        try await withSimulator(faults: faults) { harness in
            var configuration = harness.configuration()
            configuration.retry.backoff = .init(initial: .seconds(2), maximum: .seconds(2))  // 1–2 s with jitter
            let client = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(client)
            let soon = alert(1, expiration: .at(secondsSinceEpoch: harness.clock.nowSeconds() + 1))
            let response = try await client.send(soon, environment: .production)
            #expect(response.status == 500 && response.attempts == 1, "a retry would land after the expiration")

            // apns-expiration in 10 s: retried (no attempt limit) until then, never after.
            configuration.retry.backoff = .init(initial: .milliseconds(400), maximum: .seconds(1))
            let patient = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(patient)
            let waiter = ClockAdvancingWaiter(clock: harness.clock)
            let expiration = harness.clock.nowSeconds() + 10
            let later = alert(2, expiration: .at(secondsSinceEpoch: expiration))
            let final = try await patient.send(later, environment: .production, options: APNsSendOptions(waiter: waiter))
            #expect(final.status == 500 && final.attempts >= 10, "\(final.attempts) attempts")
            let sent = harness.simulator.receivedRequests().filter { $0.path.hasSuffix(deviceToken(2).hex) }
            #expect(sent.count == final.attempts)
            #expect(sent.allSatisfy { $0.receivedAtMilliseconds <= expiration * 1000 })

            // apns-expiration 0: the short horizon; absent: the long one (APNsRetryHorizon).
            configuration.retryHorizon = APNsRetryHorizon(immediate: .seconds(3), absent: .seconds(20))
            let horizons = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(horizons)
            for (index, expiration, horizon) in [(3, APNsExpiration.immediately, 3_000), (4, .omitted, 20_000)] as [(Int, APNsExpiration, Int64)] {
                let waiter = ClockAdvancingWaiter(clock: harness.clock)
                let start = harness.clock.nowMilliseconds()
                let answer = try await horizons.send(alert(index, expiration: expiration), environment: .production, options: APNsSendOptions(waiter: waiter))
                let waited = harness.clock.nowMilliseconds() - start
                #expect(answer.status == 500 && waited <= horizon && waited >= horizon - 2_000, "\(expiration): waited \(waited) ms")
            }
        }
    }

    @Test func unknownReasonIsARejectionWithAMetricNeverACrash() async throws {
        let credentials = try await Credentials.shared.value
        ProcessSignals.ignoreSIGPIPE()
        let hits = Counter()
        let server = try HTTP2Server.start(configuration: .init(
            tls: HTTP2ServerTLS(certificateChainFile: credentials.path("server-cert.pem"), privateKeyFile: credentials.path("server-key.pem"))
        )) { request, responder in
            hits.add()
            let status = request.path.hasSuffix(deviceToken(1).hex) ? 503 : 400
            responder.respond(HTTP2ServerResponse(status: status, headers: [HTTP2Header("content-type", "application/json")],
                                                  body: Array(#"{"reason":"BrandNewReason"}"#.utf8)))
        }
        defer { server.close() }
        var configuration = APNsClient.Configuration()
        configuration.production = .init(host: "127.0.0.1", port: server.port)
        configuration.caFile = credentials.path("server-cert.pem")
        configuration.connectionsPerPool = 1
        let client = APNsClient(configuration: configuration, tokens: try credentials.tokens(clock: SystemWallClock()),
                                logger: Logger(label: "apns.test", logLevel: .critical))
        try await withAsyncCleanup {
            for index in [0, 1] {
                let response = try await client.send(alert(index), environment: .production)
                #expect(response.reason == .unknown("BrandNewReason"))
                #expect(response.hasUnknownReason && response.attempts == 1)
            }
        } cleanup: {
            await client.shutdown()
        }
        #expect(hits.value == 2, "an unknown reason is never retried, even with 503")
        #expect(client.metrics["unknown_reasons"] == 2)
    }
}

final class Counter: Sendable {
    private let count = Atomic<Int>(0)
    func add() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}
