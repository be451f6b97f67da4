import APNs
import APNsSimulator
import Foundation
import PushDomain
import ServiceCore
import Testing

/// A pool without sends closes its connections and reopens them on the next send
/// (`APNsClient.Configuration.idleCloseAfter`), over TLS against the simulator.
@Suite(.serialized, .timeLimit(.minutes(2))) struct IdlePoolTests {
    @Test func anIdlePoolClosesAndTheNextSendReopensIt() async throws {
        try await withSimulator { harness in
            var configuration = harness.configuration(connections: 2)
            configuration.idleCloseAfter = .milliseconds(400)
            let registry = MetricsRegistry()
            let client = APNsClient(configuration: configuration, tokens: try harness.credentials.tokens(clock: harness.clock, metrics: registry),
                                    logger: Logger(label: "apns.test", logLevel: .critical), metrics: registry)
            harness.shutdownAtEnd(client)
            #expect(try await client.send(alert(1), environment: .production).status == 200)
            try await waitFor(deadline: .seconds(5), "both connections open") { client.metrics["connections_opened"] == 2 }
            try await waitFor(deadline: .seconds(10), "the idle pool closed") {
                client.metrics["pools_closed_idle"] == 1 && registry.value("push_apns_connections", labels: ["production"]) == 0
            }
            #expect(registry.value("push_apns_connections_retired_total", labels: ["production", "idle"]) == 2)
            #expect(client.metrics["connections_opened"] == 2, "nothing reopens while nobody sends")
            // The next send reopens the pool lazily and is delivered.
            #expect(try await client.send(alert(2), environment: .production).status == 200)
            try await waitFor(deadline: .seconds(5), "reopened") { client.metrics["connections_opened"] == 4 }
            #expect(client.metrics["pools_closed_idle"] == 1)
        }
    }

    @Test func aPoolInUseDoesNotClose() async throws {
        try await withSimulator { harness in
            var configuration = harness.configuration()
            configuration.idleCloseAfter = .milliseconds(400)
            let client = APNsClient(configuration: configuration, tokens: try harness.credentials.tokens(clock: harness.clock),
                                    logger: Logger(label: "apns.test", logLevel: .critical), metrics: MetricsRegistry())
            harness.shutdownAtEnd(client)
            let start = ContinuousClock.now
            var index = 0
            while start.duration(to: .now) < .milliseconds(1_200) {
                index += 1
                #expect(try await client.send(alert(index), environment: .production).status == 200)
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(client.metrics["pools_closed_idle"] == 0)
            #expect(client.metrics["connections_opened"] == 1)
        }
    }
}
