import APNs
import APNsSimulator
import Foundation
import PushDomain
import ServiceCore
import Testing

/// 400 `TopicDisallowed` over TLS: the send is retried once on a new connection (a connection opened
/// before a topic-scoped key gained the bundle ID may refuse it), and a topic that stays disallowed
/// does not churn connections. The simulator refuses an `mdm` push on a token connection on every
/// connection, so this shows the mechanism and its bound.
@Suite(.serialized, .timeLimit(.minutes(2))) struct TopicDisallowedTests {
    func mdm(_ index: Int) -> APNsRequest {
        APNsRequest(deviceToken: deviceToken(index), topic: Credentials.mdmTopic, pushType: .mdm, payload: Array(#"{"mdm":"x"}"#.utf8))
    }

    @Test func aRefusedTopicIsRetriedOnceOnANewConnectionThenFinalWithoutChurn() async throws {
        try await withSimulator { harness in
            let client = try harness.tokenClient()
            harness.shutdownAtEnd(client)
            #expect(try await client.send(alert(0), environment: .production).status == 200)  // a warm connection
            let response = try await client.send(mdm(1), environment: .production)
            #expect(response.status == 400 && response.reason == .topicDisallowed)
            #expect(response.attempts == 2)
            let sent = harness.simulator.receivedRequests().filter { $0.path.hasSuffix(deviceToken(1).hex) }
            #expect(sent.count == 2)
            #expect(Set(sent.map(\.connectionID)).count == 2, "the retry went out on a new connection")
            #expect(client.metrics["connections_opened"] == 2)
            // Refused on the new connection, soon after: final at once, no new connection.
            let again = try await client.send(mdm(2), environment: .production)
            #expect(again.status == 400 && again.attempts == 1)
            #expect(client.metrics["connections_opened"] == 2)
            #expect(try await client.send(alert(3), environment: .production).status == 200)
        }
    }
}
