import APNs
import APNsSimulator
import Foundation
import ServiceCore
import Synchronization
import Testing

/// A few bad devices never slow everyone (docs/apns-client.md "Circuit breaker", "Per-device gate"),
/// against the simulator over TLS on the system clock: hung device tokens leave the breaker closed and
/// a fresh request fast; a throttled device is sent about what Apple allows and others are untouched;
/// Apple answering 503 to everyone still opens the breaker within seconds.
@Suite(.serialized, .timeLimit(.minutes(2))) struct DeviceIsolationTests {
    /// A client with the default circuit breaker and the system clock.
    func configuration(_ harness: Harness, horizon: Duration) -> APNsClient.Configuration {
        var configuration = harness.configuration(connections: 2)
        configuration.circuitBreaker = APNsCircuitBreaker.Policy()
        configuration.clock = SystemWallClock()
        configuration.retryHorizon = APNsRetryHorizon(immediate: horizon, absent: horizon)
        return configuration
    }

    func healthyBatch(_ client: APNsClient, from first: Int, count: Int) async -> (Duration, Int) {
        let start = ContinuousClock.now
        let results = await sendAll(client, (first..<first + count).map { alert($0) })
        return (start.duration(to: .now), results.filter { (try? $0.get().status) == 200 }.count)
    }

    /// 3 % of 500 device tokens never answer (every retry until an 8 s horizon times out again, after
    /// 2 s): the breaker never opens, and a fresh 500-token request sent while they retry completes
    /// about as fast as the same request with no bad device around.
    @Test func hungTokensAmongHealthyOnesLeaveTheBreakerClosed() async throws {
        let size = 500
        let hung = Set(stride(from: 0, to: size, by: 33).map { deviceToken(100_000 + $0).hex })
        var faults = APNsSimulatorFaults()
        faults.hungTokens = .init(tokens: hung)
        try await withSimulator(faults: faults, configure: { $0.clock = SystemWallClock() }) { harness in
            let registry = MetricsRegistry()
            var configuration = configuration(harness, horizon: .seconds(8))
            configuration.requestTimeout = .seconds(2)  // healthy answers come far sooner, even on a loaded machine
            let client = APNsClient(
                configuration: configuration,
                tokens: try harness.credentials.tokens(clock: SystemWallClock(), metrics: registry),
                logger: Logger(label: "apns.test", logLevel: .warning), metrics: registry)
            harness.shutdownAtEnd(client)
            // The speed of a healthy request, connections warm.
            _ = await healthyBatch(client, from: 200_000, count: size)
            let (baseline, baselineDelivered) = await healthyBatch(client, from: 300_000, count: size)
            #expect(baselineDelivered == size)

            let start = ContinuousClock.now
            let mixed = Task { await sendAll(client, (100_000..<100_000 + size).map { alert($0) }) }
            // Let the hung tokens time out (2 s) and go back in line at least once.
            try await waitFor(deadline: .seconds(10), "hung streams timed out") { client.metrics["timeouts"] >= hung.count }
            let (fresh, freshDelivered) = await healthyBatch(client, from: 400_000, count: size)
            let results = await mixed.value
            let elapsed = start.duration(to: .now)
            // The speed of a healthy request again, with no bad device left: the slower of the two is
            // what this machine's load allows (other suites share its cores).
            let (after, _) = await healthyBatch(client, from: 500_000, count: size)

            #expect(freshDelivered == size)
            #expect(client.metrics["circuit_open"] == 0, "the breaker never opened")
            #expect(registry.value("push_apns_circuit_state", labels: ["production"]) ?? 0 == 0)
            #expect(fresh <= max(baseline, after) * 3 + .milliseconds(500),
                    "fresh request \(fresh) against \(baseline) and \(after) with no bad device")
            var delivered = 0
            var timedOut = 0
            for (index, result) in results.enumerated() {
                let token = deviceToken(100_000 + index).hex
                switch result {
                case .success(let response):
                    #expect(response.status == 200 && !hung.contains(token))
                    delivered += 1
                case .failure(let error):
                    #expect(hung.contains(token), "\(error)")
                    #expect((error as? APNsError)?.code == .retryHorizonExceeded && (error as? APNsError)?.isStreamTimeout == true, "\(error)")
                    timedOut += 1
                }
            }
            #expect(delivered == size - hung.count && timedOut == hung.count)
            #expect(elapsed < .seconds(8 + 6), "the hung ones ended at their horizon: \(elapsed)")
            let hungSends = harness.simulator.counters()["hung", default: 0]
            print("hung tokens: \(hung.count) of \(size) never answer; \(hungSends) sends to them; breaker opened \(client.metrics["circuit_open"])×;"
                  + " fresh \(size)-token request \(fresh) (baseline \(baseline), after \(after)); hung ones ended after \(elapsed)")
        }
    }

    /// A burst to one device that the simulator throttles after `maxPushes` in `window`: the device
    /// sees about that rate (after the burst's first wave, at most a few refused requests per window
    /// beyond what it allows), the burst finishes within the time that rate needs plus a margin, and
    /// other devices are not slowed.
    @Test(arguments: [(2, 500), (4, 1_000), (3, 1_500)])
    func aThrottledDeviceIsSentAboutWhatAppleAllows(maxPushes: Int, windowMilliseconds: Int) async throws {
        var faults = APNsSimulatorFaults()
        faults.tokenRateLimit = .init(maxPushes: maxPushes, window: .milliseconds(windowMilliseconds))
        try await withSimulator(faults: faults, configure: { $0.clock = SystemWallClock() }) { harness in
            var configuration = configuration(harness, horizon: .seconds(60))
            configuration.retry.tooManyRequestsDelay = .milliseconds(100)
            configuration.retry.backoff = .init(initial: .milliseconds(5), maximum: .seconds(2))
            let client = APNsClient(configuration: configuration, tokens: try harness.credentials.tokens(clock: SystemWallClock()),
                                    logger: Logger(label: "apns.test", logLevel: .warning))
            harness.shutdownAtEnd(client)
            #expect(try await client.send(alert(999), environment: .production).status == 200)  // connections warm
            harness.simulator.reset()

            let burst = 12
            let window = Duration.milliseconds(windowMilliseconds)
            let start = ContinuousClock.now
            let throttled = Task { await sendAll(client, (0..<burst).map { _ in alert(7) }) }
            // Other devices meanwhile: each answered at once, never held back.
            var slowest = Duration.zero
            for round in 0..<10 {
                let t0 = ContinuousClock.now
                let others = await sendAll(client, (0..<10).map { alert(1_000 + round * 10 + $0) })
                slowest = max(slowest, t0.duration(to: .now))
                for result in others { #expect((try? result.get())?.attempts == 1, "\(result)") }
                try await Task.sleep(for: window / 4)
            }
            let results = await throttled.value
            let elapsed = start.duration(to: .now)
            for result in results { #expect((try? result.get().status) == 200, "\(result)") }

            let sends = harness.simulator.receivedRequests().filter { $0.path.hasSuffix(deviceToken(7).hex) }
            let accepted = sends.filter { $0.status == 200 }.count
            let refused = sends.count - accepted
            let windows = (burst + maxPushes - 1) / maxPushes
            let allowed = window * (windows - 1)
            // After the first wave (the burst arrives before the first 429), per window: what Apple
            // allows plus a few refused probes of the gate.
            let firstWave = sends.first.map { $0.receivedAtMilliseconds + 50 } ?? 0
            let later = sends.filter { $0.receivedAtMilliseconds > firstWave }.map(\.receivedAtMilliseconds)
            var busiest = 0
            for (index, at) in later.enumerated() {
                busiest = max(busiest, later[index...].prefix { $0 < at + Int64(windowMilliseconds) }.count)
            }
            #expect(accepted == burst)
            #expect(busiest <= maxPushes + 4, "at most about \(maxPushes) per \(window) after the first wave: \(busiest)")
            #expect(sends.count <= 2 * burst + 3 * windows, "\(sends.count) sends for a burst of \(burst)")
            #expect(elapsed <= allowed * 2 + window * 2 + .seconds(1), "burst finished after \(elapsed); the rate allows \(allowed)")
            #expect(slowest < .seconds(2), "other devices were not held back: slowest batch \(slowest)")
            print("throttled device (\(maxPushes) per \(window)): burst of \(burst) in \(elapsed) (rate allows \(allowed)), "
                  + "\(sends.count) sends (\(refused) refused), busiest window after the first wave \(busiest); others' slowest batch \(slowest)")
        }
    }

    /// Apple answering 503 to everyone opens the breaker within seconds, with the default policy.
    @Test func serviceUnavailableForEveryoneOpensTheBreakerWithinSeconds() async throws {
        var faults = APNsSimulatorFaults()
        faults.statusShares = [503: 1.0]
        try await withSimulator(faults: faults) { harness in
            var configuration = configuration(harness, horizon: .seconds(60))
            configuration.retry.backoff = .init(initial: .milliseconds(200), maximum: .seconds(30))  // the default
            let client = try harness.tokenClient(configuration)
            harness.shutdownAtEnd(client)
            let start = ContinuousClock.now
            let sending = Task { await sendAll(client, (1...50).map { alert($0) }) }
            try await waitFor(deadline: .seconds(5), "breaker open") { client.metrics["circuit_open"] >= 1 }
            let opened = start.duration(to: .now)
            #expect(opened < .seconds(3), "opened after \(opened)")
            sending.cancel()
            _ = await sending.value
            print("503 to everyone: breaker open after \(opened)")
        }
    }
}
