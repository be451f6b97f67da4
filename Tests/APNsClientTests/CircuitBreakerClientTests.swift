import APNs
import APNsSimulator
import Foundation
import ServiceCore
import Synchronization
import Testing

/// The circuit breaker against the simulator's 503 fault: it opens, lets one real notification
/// through when half-open, and closes when APNs answers again; waiting spends no attempts.
@Suite(.serialized, .timeLimit(.minutes(1))) struct CircuitBreakerClientTests {
    @Test func opensHalfOpensAndClosesAgainstAnOutage() async throws {
        var faults = APNsSimulatorFaults()
        faults.statusShares = [503: 1.0]
        try await withSimulator(faults: faults) { harness in
            let registry = MetricsRegistry()
            var configuration = harness.configuration(connections: 2)
            configuration.circuitBreaker = APNsCircuitBreaker.Policy()
            configuration.circuitBreaker.openBackoff = .init(initial: .milliseconds(300), maximum: .milliseconds(600))
            configuration.circuitBreaker.halfOpenWait = .milliseconds(50)
            configuration.circuitBreaker.rampUp = .milliseconds(300)
            configuration.retry.backoff = .init(initial: .milliseconds(20), maximum: .milliseconds(50))
            configuration.clock = SystemWallClock()
            let client = APNsClient(configuration: configuration, tokens: try harness.credentials.tokens(clock: harness.clock, metrics: registry),
                                    logger: Logger(label: "apns.test", logLevel: .warning), metrics: registry)
            harness.shutdownAtEnd(client)
            let states = StateLog()
            let watcher = Task {
                while !Task.isCancelled {
                    states.add(registry.value("push_apns_circuit_state", labels: ["production"]) ?? 0)
                    try? await Task.sleep(for: .milliseconds(5))
                }
            }
            // 20 notifications during the outage: the breaker opens, sends stop.
            let sending = Task { await sendAll(client, (1...20).map { alert($0) }) }
            try await waitFor(deadline: .seconds(10), "breaker open") { client.metrics["circuit_open"] >= 1 }
            let sentWhenOpened = harness.simulator.receivedRequests().count
            try await Task.sleep(for: .milliseconds(250))
            let sentWhileOpen = harness.simulator.receivedRequests().count - sentWhenOpened
            #expect(sentWhileOpen <= 1, "nothing is sent while open (at most the trial): \(sentWhileOpen)")
            try await waitFor(deadline: .seconds(10), "a half-open trial") { client.metrics["circuit_halfOpen"] >= 1 }
            // APNs recovers: the next trial succeeds and closes the breaker; everyone is delivered.
            harness.simulator.setFaults(APNsSimulatorFaults())
            let results = await sending.value
            watcher.cancel()
            for result in results { #expect((try? result.get().status) == 200, "\(result)") }
            #expect(client.metrics["circuit_closed"] >= 1)
            #expect(registry.value("push_apns_circuit_state", labels: ["production"]) == 0)
            let seen = states.distinct
            #expect(seen.contains(2) && seen.contains(0), "open and closed seen: \(seen)")
            let records = harness.simulator.receivedRequests()
            let failed503 = records.filter { $0.status == 503 }.count
            print("breaker: \(records.count) sends for 20 notifications (\(failed503) answered 503), opened \(client.metrics["circuit_open"])×, half-open \(client.metrics["circuit_halfOpen"])×, closed \(client.metrics["circuit_closed"])×, circuit waits \(client.metrics["retries_circuit_open"])")
        }
    }
}

final class StateLog: Sendable {
    private let values = Mutex<Set<Double>>([])
    func add(_ value: Double) { values.withLock { _ = $0.insert(value) } }
    var distinct: Set<Double> { values.withLock { $0 } }
}
