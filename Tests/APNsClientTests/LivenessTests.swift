import APNs
import APNsSimulator
import Foundation
import HTTP2
import ProtobufCodec
import PushTestSupport
import ServiceCore
import Synchronization
import Testing

/// Liveness of pooled connections against the simulator over TLS, at the production ratios of the
/// timings scaled down only through configuration: healthy idle connections are never retired.
@Suite(.serialized, .timeLimit(.minutes(2))) struct LivenessTests {
    @Test func healthyIdleConnectionsAreNeverRetired() async throws {
        try await withSimulator { harness in
            var configuration = harness.configuration(connections: 2)
            // Production: timeout 30 s, PING after 60 s idle, PING timeout 10 s, checks every 5 s.
            configuration.requestTimeout = .milliseconds(1500)
            configuration.idlePingInterval = .seconds(3)
            configuration.pingTimeout = .milliseconds(500)
            configuration.healthCheckInterval = .milliseconds(250)
            let client = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(client)
            #expect(try await client.send(alert(1), environment: .production).status == 200)
            try await waitFor(deadline: .seconds(5)) { client.metrics["connections_opened"] == 2 }
            // Four idle intervals: each connection is pinged about four times.
            let clock = ContinuousClock()
            let end = clock.now + .seconds(13)
            while clock.now < end {
                try await Task.sleep(for: .milliseconds(250))
                #expect(client.metrics["ping_failures"] == 0)
                if client.metrics["ping_failures"] > 0 { break }
            }
            #expect(client.metrics["pings"] >= 6, "pings: \(client.metrics["pings"])")
            #expect(client.metrics["ping_failures"] == 0)
            #expect(client.metrics["connections_retired"] == 0)
            #expect(client.metrics["connections_opened"] == 2)
            #expect(try await client.send(alert(2), environment: .production).attempts == 1)
        }
    }
}


/// Dead connections found within the PING timeout through a TCP proxy that freezes or resets a live
/// connection, the bound on every attempt, and provider-token faults, against the simulator over TLS.
@Suite(.serialized, .timeLimit(.minutes(2))) struct FaultTests {
    /// A client through `proxy` with timings scaled down only through configuration.
    func client(_ harness: Harness, proxy: TCPProxy) throws -> APNsClient {
        var configuration = harness.configuration(connections: 2)
        configuration.production = .init(host: "127.0.0.1", port: proxy.port)
        configuration.requestTimeout = .seconds(2)
        configuration.connectTimeout = .seconds(2)
        configuration.idlePingInterval = .seconds(1)
        configuration.pingTimeout = .milliseconds(300)
        configuration.healthCheckInterval = .milliseconds(50)
        return try harness.tokenClient(configuration)
    }

    /// Sends `count` notifications while `fault` holds the connections open now; returns how often the
    /// simulator received each one.
    func sendThroughFault(_ fault: @escaping @Sendable (TCPProxy) -> Void, count: Int) async throws -> (received: [Int], client: APNsClient) {
        try await withSimulator { harness in
            let proxy = try TCPProxy(targetPort: harness.simulator.productionPort)
            defer { proxy.stop() }
            let client = try client(harness, proxy: proxy)
            #expect(try await client.send(alert(0), environment: .production).status == 200)
            try await waitFor(deadline: .seconds(5)) { client.metrics["connections_opened"] == 2 }
            fault(proxy)
            let clock = ContinuousClock()
            let start = clock.now
            let results = await sendAll(client, (1...count).map { alert($0) })
            let elapsed = start.duration(to: clock.now)
            for result in results { #expect((try? result.get().status) == 200, "\(result)") }
            // Found dead by PING (300 ms) or by the request timeout (2 s), then sent elsewhere.
            #expect(elapsed < .seconds(4), "\(elapsed)")
            let records = harness.simulator.receivedRequests()
            let received = (1...count).map { index in records.filter { $0.path.hasSuffix(deviceToken(index).hex) }.count }
            await client.shutdown()
            return (received, client)
        }
    }

    @Test func frozenClientToServerDeliversEachNotificationExactlyOnce() async throws {
        let (received, client) = try await sendThroughFault({ $0.freeze(.clientToServer) }, count: 20)
        #expect(received == Array(repeating: 1, count: 20), "\(received)")
        #expect(client.metrics["ping_failures"] >= 1, "found dead by PING")
        print("frozen client→server: 20 notifications, received \(received.reduce(0, +)) times, ping failures \(client.metrics["ping_failures"]), connections opened \(client.metrics["connections_opened"])")
    }

    @Test func frozenServerToClientAfterForwardingDeliversEachAtMostTwice() async throws {
        let (received, client) = try await sendThroughFault({ $0.freeze(.serverToClient) }, count: 20)
        #expect(received.allSatisfy { $0 == 1 || $0 == 2 }, "\(received)")
        let twice = received.filter { $0 == 2 }.count
        #expect(twice >= 1, "the answers were lost, so APNs saw them again")
        print("frozen server→client: 20 notifications, \(twice) received twice, \(20 - twice) once; ping failures \(client.metrics["ping_failures"])")
    }

    @Test func aResetConnectionResendsItsStreams() async throws {
        let (received, client) = try await sendThroughFault({ proxy in
            proxy.resetAll()
        }, count: 20)
        #expect(received.allSatisfy { $0 == 1 || $0 == 2 }, "\(received)")
        print("reset: 20 notifications, received \(received.reduce(0, +)) times, connection errors \(client.metrics["connection_errors"])")
    }

    @Test func noAttemptOutlivesItsTimeoutPlusConnectionSetUp() async throws {
        var faults = APNsSimulatorFaults()
        faults.unansweredShare = 1
        try await withSimulator(faults: faults) { harness in
            let proxy = try TCPProxy(targetPort: harness.simulator.productionPort)
            defer { proxy.stop() }
            var configuration = harness.configuration(connections: 2)
            configuration.production = .init(host: "127.0.0.1", port: proxy.port)
            configuration.requestTimeout = .milliseconds(500)
            configuration.connectTimeout = .milliseconds(500)
            configuration.pingTimeout = .milliseconds(200)
            configuration.healthCheckInterval = .milliseconds(50)
            configuration.clock = SystemWallClock()
            let client = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(client)
            let marks = Marks()
            let waiter = MarkingWaiter(marks: marks)
            let clock = ContinuousClock()
            marks.add(clock.now)
            // Half-way, the connections freeze: queued and open streams must move, not wait.
            Thread.detachNewThread { usleep(1_200_000); proxy.freeze(.serverToClient) }
            let error = await #expect(throws: APNsError.self) {
                _ = try await client.send(alert(1), environment: .production, options: APNsSendOptions(waiter: waiter, retryDeadline: Date().addingTimeInterval(3)))
            }
            #expect(error?.code == .retryHorizonExceeded)
            #expect(error?.isStreamTimeout == true, "reported as STREAM_TIMEOUT, not a connection error")
            marks.add(clock.now)
            let times = marks.all
            // Marks: start, then per retry (attempt end, wait end), then the end: attempts are
            // (start→end₁), (wait end→next end), …
            let attemptsSpans = stride(from: 0, to: times.count - 1, by: 2).map { times[$0].duration(to: times[$0 + 1]) }
            let longest = attemptsSpans.max() ?? .zero
            #expect(attemptsSpans.count >= 3, "several attempts: \(attemptsSpans.count)")
            #expect(longest <= .milliseconds(1000) + .milliseconds(400), "longest attempt \(longest) (bound 500 ms + 500 ms set-up)")
            print("attempts: \(attemptsSpans.count), longest \(longest) against a bound of 1 s (request timeout + connect timeout)")
        }
    }

    @Test func expiredProviderTokenRenewsOnceForManyNotificationsAndRetriesOnceEach() async throws {
        try await withSimulator { harness in
            let registry = MetricsRegistry()
            var configuration = harness.configuration(connections: 2)
            configuration.requestTimeout = .seconds(5)
            let tokens = try harness.credentials.tokens(clock: harness.clock, metrics: registry)
            let client = APNsClient(configuration: configuration, tokens: tokens, logger: Logger(label: "apns.test", logLevel: .critical), metrics: registry)
            harness.shutdownAtEnd(client)
            #expect(try await client.send(alert(0), environment: .production).status == 200)
            try await waitFor(deadline: .seconds(5)) { client.metrics["connections_opened"] == 2 }
            let first = try #require(tokens.currentIssuedAt)
            // APNs now refuses that JWT as expired (as it would with our clock behind its own).
            var faults = APNsSimulatorFaults()
            faults.providerTokensExpiredThroughIat = first
            harness.simulator.reset()
            harness.simulator.setFaults(faults)
            let count = 30
            let results = await sendAll(client, (1...count).map { alert($0) })
            for result in results { #expect((try? result.get().status) == 200, "\(result)") }
            let records = harness.simulator.receivedRequests()
            for index in 1...count {
                let sent = records.filter { $0.path.hasSuffix(deviceToken(index).hex) }
                let iats = sent.compactMap { $0.jwt?.claims["iat"]?.integerValue }
                #expect(sent.count <= 2, "at most two sends per notification: \(sent.count)")
                if sent.count == 2 {
                    #expect(sent.map(\.status) == [403, 200])
                    #expect(iats[1] > iats[0], "the retry carries a new iat")
                    #expect(sent[0].connectionID != sent[1].connectionID, "on a new connection")
                }
            }
            let refused = records.filter { $0.status == 403 }.count
            #expect(refused >= 1)
            #expect(tokens.mintCount == 2, "one mint for all the notifications refused with the same JWT")
            #expect(registry.value("push_apns_jwt_mints_total") == 2)
            print("ExpiredProviderToken: \(count) notifications, \(refused) refused then resent, \(records.count) sends, JWT mints \(tokens.mintCount)")
        }
    }

    @Test func aServerClockAnHourAheadIsAProviderFaultWithNoTokenChange() async throws {
        let serverClock = OffsetWallClock(offsetMilliseconds: 3_660_000)
        try await withSimulator(configure: { $0.clock = serverClock }) { harness in
            let registry = MetricsRegistry()
            var configuration = harness.configuration()
            configuration.clock = SystemWallClock()
            let tokens = try harness.credentials.tokens(clock: SystemWallClock(), metrics: registry)
            let client = APNsClient(configuration: configuration, tokens: tokens, logger: Logger(label: "apns.test", logLevel: .info), metrics: registry)
            harness.shutdownAtEnd(client)
            for index in 1...5 {
                let response = try await client.send(alert(index), environment: .production)
                #expect(response.status == 403 && response.reason == .expiredProviderToken && response.attempts == 1)
            }
            #expect(tokens.mintCount == 1, "no token change: a new JWT would look just as old")
            #expect(registry.value("push_apns_provider_token_faults_total", labels: ["ExpiredProviderToken", "KEY0000001"]) == 5)
            #expect(client.metrics["provider_token_fault_log_lines"] == 1, "logged once a minute")
            let skew = client.metrics["provider_token_fault_skew_s"]
            #expect(skew >= 3650 && skew <= 3670, "the skew read from the date header: \(skew) s")
            let cause = APNsClient.providerTokenFaultCause(.expiredProviderToken, skewSeconds: Int64(skew))
            #expect(cause.contains("ahead of ours") && cause.contains("NTP"))
            print("clock an hour ahead: 5 notifications, 5 provider faults, 1 log line, JWT mints \(tokens.mintCount): \(cause)")
        }
    }
}

/// Times at which attempts ended.
final class Marks: Sendable {
    private let times = Mutex<[ContinuousClock.Instant]>([])
    func add(_ time: ContinuousClock.Instant) { times.withLock { $0.append(time) } }
    var all: [ContinuousClock.Instant] { times.withLock { $0 } }
}

/// Marks the end of each attempt, then sleeps the delay.
final class MarkingWaiter: APNsRetryWaiter {
    let marks: Marks
    init(marks: Marks) { self.marks = marks }
    func wait(_ delay: Duration, attemptsSoFar: Int, reason: APNsRetryReason) async throws {
        marks.add(ContinuousClock.now)
        try await Task.sleep(for: delay)
        marks.add(ContinuousClock.now)
    }
}

/// Waits until `condition` holds, failing after `deadline`.
func waitFor(deadline: Duration, _ what: String = "condition", _ condition: () -> Bool) async throws {
    let clock = ContinuousClock()
    let end = clock.now + deadline
    while !condition() {
        guard clock.now < end else { throw TestFailure("\(what) not met within \(deadline)") }
        try await Task.sleep(for: .milliseconds(10))
    }
}
