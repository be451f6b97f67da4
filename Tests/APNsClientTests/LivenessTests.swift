import APNs
import APNsSimulator
import Foundation
import HTTP2
import PushTestSupport
import ServiceCore
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
            defer { Task { await client.shutdown() } }
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

/// Waits until `condition` holds, failing after `deadline`.
func waitFor(deadline: Duration, _ what: String = "condition", _ condition: () -> Bool) async throws {
    let clock = ContinuousClock()
    let end = clock.now + deadline
    while !condition() {
        guard clock.now < end else { throw TestFailure("\(what) not met within \(deadline)") }
        try await Task.sleep(for: .milliseconds(10))
    }
}
