import APNs
import APNsSimulator
import Foundation
import HTTP2
import PushDomain
import PushTestSupport
import ServiceCore
import Testing

/// A key removed from the credentials file drains its pools (`APNsClient.drain(_:)`), over TLS against
/// the simulator: a notification in flight on it is still delivered, retries included, and then its
/// connections close; the other key's pool is untouched.
@Suite(.serialized, .timeLimit(.minutes(2))) struct DrainTests {
    @Test func aRemovedKeysInFlightNotificationIsDeliveredThenItsConnectionsClose() async throws {
        try await withSimulator { harness in
            let registry = MetricsRegistry()
            let removed = try harness.credentials.tokens(key: 1, clock: harness.clock, metrics: registry)
            let kept = try harness.credentials.tokens(key: 2, clock: harness.clock, metrics: registry)
            let client = APNsClient(configuration: harness.configuration(connections: 2), credentials: [:],
                                    logger: Logger(label: "apns.test", logLevel: .critical), metrics: registry)
            harness.shutdownAtEnd(client)
            let onRemoved = APNsSendOptions(credentials: .token(removed))
            let onKept = APNsSendOptions(credentials: .token(kept))
            /// The simulator's connections bound to `team` (`GET /admin/connections`).
            func connections(team: String) async throws -> Int {
                let admin = try await HTTP2Connection.connect(host: "127.0.0.1", port: harness.simulator.adminPort!)
                let answer = try await withAsyncCleanup {
                    try await admin.send(HTTP2Request(method: "GET", path: "/admin/connections"))
                } cleanup: {
                    await admin.close()
                }
                let object = try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any]
                let listed = object?["connections"] as? [[String: Any]] ?? []
                return listed.filter { $0["team_id"] as? String == team }.count
            }
            // Both pools warm: two connections each, both trusted (each sent a request).
            for index in 1...8 {
                #expect(try await client.send(alert(index), environment: .production, options: index % 2 == 0 ? onKept : onRemoved).status == 200)
            }
            try await eventually("two connections per key", timeout: .seconds(10)) {
                guard client.metrics["connections_opened"] == 4 else { return false }
                let (team1, team2) = (try await connections(team: Credentials.team1), try await connections(team: Credentials.team2))
                return team1 >= 1 && team2 >= 1
            }

            // A notification in flight on the removed key whose first answer (held) is a 500: it needs a
            // retry on that key's pool after the drain began.
            var faults = APNsSimulatorFaults()
            faults.hold = .init(tokens: [deviceToken(100).hex])
            faults.statusShares = [500: 1]
            harness.simulator.setFaults(faults)
            async let inFlight = client.send(alert(100), environment: .production, options: onRemoved)
            try await eventually("the first answer held", timeout: .seconds(10)) { harness.simulator.heldTokens() == [deviceToken(100).hex] }
            harness.simulator.setFaults(APNsSimulatorFaults())

            async let drained = client.drain(.token(removed))
            #expect(harness.simulator.releaseHeld() == 1)
            let response = try await inFlight
            #expect(response.status == 200 && response.attempts == 2, "\(response.status) after \(response.attempts) attempts")
            #expect(await drained == 1, "the removed key had one pool (production)")

            // Closed with GOAWAY: the simulator sees no connection of the removed key's team any more.
            try await eventually("the removed key's connections gone", timeout: .seconds(10)) { try await connections(team: Credentials.team1) == 0 }
            #expect(client.metrics["pools_drained"] == 1)
            let removedRequests = harness.simulator.receivedRequests().filter { $0.path.hasSuffix(deviceToken(100).hex) }
            #expect(removedRequests.compactMap(\.status) == [500, 200])
            // The kept key's pool serves on, on the connections it had.
            #expect(try await client.send(alert(200), environment: .production, options: onKept).status == 200)
            #expect(client.metrics["connections_opened"] == 4)
            #expect(try await connections(team: Credentials.team2) >= 1)
        }
    }
}
