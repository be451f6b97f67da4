import APNs
import APNsSimulator
import Foundation
import Kafka
import Postgres
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

extension DispatcherEngineSuites {
    /// A partition lost and given back while its request runs (docs/dispatcher-engine.md "Rebalances",
    /// "Records handled again"): the engine on librdkafka's mock cluster, the real PostgreSQL and the
    /// APNs simulator over TLS; the only broker goes down for longer than the session timeout.
    @Suite(.testDatabase, .serialized, .timeLimit(.minutes(3)))
    struct LostAssignmentTests {
        init() { ProcessSignals.ignoreSIGPIPE() }

        static let bundle = "com.example.lost"
        static let tokens = 400

        /// Every token gets exactly one report on the feedback topic (not even a repeat with the same
        /// event id), the request exactly one `RequestCompleted`, and Apple accepts every token once.
        /// Before the fix the lost partition's handling was cancelled and the re-read record ran the
        /// request again: the reports recorded meanwhile and the `RequestCompleted` were published twice.
        @Test func aPartitionLostAndGivenBackMidRequestPublishesEveryReportAndTheCompletionOnce() async throws {
            let credentials = try await EngineCredentials.shared.value
            let keyID = "KEYLOST001", teamID = "TEAMLOST01"
            var simulatorConfiguration = APNsSimulator.Configuration(
                certificateChainFile: credentials.path("server-cert.pem"), privateKeyFile: credentials.path("server-key.pem"),
                trustedKeys: [APNsSimulator.TrustedKey(
                    keyID: keyID, teamID: teamID,
                    publicKeyPEM: try String(contentsOfFile: credentials.path("key.pub.pem"), encoding: .utf8))])
            simulatorConfiguration.eventLoopCount = 1
            // 150 ms an answer, 4 notifications at once: the request sends for about 15 s.
            var faults = APNsSimulatorFaults()
            faults.latency = .init(distribution: .uniform, minimum: .milliseconds(150), maximum: .milliseconds(150))
            simulatorConfiguration.faults = faults
            let simulator = try APNsSimulator.start(configuration: simulatorConfiguration)
            defer { simulator.close() }
            var client = APNsClient.Configuration()
            client.production = .init(host: "127.0.0.1", port: simulator.productionPort)
            client.sandbox = .init(host: "127.0.0.1", port: simulator.sandboxPort)
            client.caFile = credentials.path("server-cert.pem")
            client.connectionsPerPool = 1
            let signingKey = try APNsSigningKey(p8: try String(contentsOfFile: credentials.path("key.p8"), encoding: .utf8))
            let sender = APNsClient(
                configuration: client,
                tokens: APNsProviderTokenCache(signingKey: signingKey, keyID: keyID, teamID: teamID, clock: SystemWallClock()),
                logger: Logger(label: "test.apns", logLevel: .error))

            let harness = try await DispatcherHarness(sender: sender) { configuration in
                configuration.maxInFlightNotifications = 4
                configuration.sessionTimeout = .seconds(6)
            }
            let user = "lost-\(UUID().uuidString.prefix(8))"
            _ = try await harness.store.pool.query("""
                INSERT INTO device_tokens (device_token, bundle_id, environment, token_kind, user_id, status, last_event_at_ms, registered_at_ms)
                SELECT md5('\(user)a' || i) || md5('\(user)b' || i), '\(Self.bundle)', 'production', 'standard', '\(user)', 'active', 1, 1
                FROM generate_series(1, \(Self.tokens)) AS i
                """)
            var notification = PushMessages.Notification()
            notification.bundleID = Self.bundle
            notification.pushType = .alert
            notification.payload = #"{"aps":{"alert":"lost"}}"#
            let requestID = "lost-\(UUID().uuidString)"
            let request = SendRequest(requestID: requestID, target: .userIDs(UserIds(userIDs: [user])), notification: notification)
            try await harness.produce(harness.topics.sendRequests, key: requestID, value: request.serializedBytes(), contentType: SendRequest.protobufContentType)
            let partition = "\(KafkaTopicPartition(topic: harness.topics.sendRequests, partition: 0))"
            let uncommitted = { harness.registry.value("push_uncommitted_records", labels: [partition]) }

            // Mid-request, the only broker goes away for longer than the session timeout.
            try await harness.eventually("the first notifications answered") { simulator.receivedRequests().count >= 12 }
            try harness.cluster.setBrokerDown(1)
            // The member is evicted: its assignment is lost and the partition's state dropped.
            try await harness.eventually("the assignment lost", timeout: .seconds(30)) { uncommitted() == nil }
            // The broker comes back, but for a while it refuses every produce with a retriable error: the
            // reports produced before are still not acknowledged when the partition is assigned back and
            // its record read again (on a loaded machine the rejoin can beat the producer's retries).
            harness.cluster.pushRequestErrors(apiKey: .produce, errors: Array(repeating: .notEnoughReplicas, count: 100_000))
            try harness.cluster.setBrokerUp(1)
            try await harness.eventually("the record read again", timeout: .seconds(60)) { uncommitted() != nil }
            try await Task.sleep(for: .seconds(2))  // the fault's length, not a wait for a result
            harness.cluster.clearRequestErrors(apiKey: .produce)
            // The record finishes.
            try await harness.eventually("the request's record finished after the partition came back", timeout: .seconds(60)) {
                uncommitted() == 0
            }
            // A graceful stop waits for every handling, old ones included, and flushes the producer:
            // everything the dispatcher published is on the topic before the marker.
            try await harness.stop()
            let marker = "marker-\(UUID().uuidString)"
            _ = try await harness.producer(sending: marker, to: harness.topics.feedback)
            let records = try await harness.read(harness.topics.feedback, timeout: .seconds(30)) { records in
                records.contains { $0.key.map { String(decoding: $0, as: UTF8.self) } == marker }
            }
            var reports: [String: Int] = [:]
            var completed = 0
            for record in records {
                switch (try? FeedbackEvent(protobufBytes: record.value))?.event {
                case .deliveryReport(let report)? where report.requestID == requestID: reports[report.deviceToken, default: 0] += 1
                case .requestCompleted(let done)? where done.requestID == requestID: completed += 1
                default: break
                }
            }
            #expect(reports.count == Self.tokens, "tokens with a report")
            let repeated = reports.values.filter { $0 > 1 }.count
            #expect(repeated == 0, "tokens whose report was published more than once")
            #expect(completed == 1, "RequestCompleted records")
            var accepted: [String: Int] = [:]
            for record in simulator.receivedRequests() where record.status == 200 {
                accepted[String(record.path.split(separator: "/").last ?? ""), default: 0] += 1
            }
            #expect(accepted.count == Self.tokens)
            #expect(accepted.values.allSatisfy { $0 == 1 }, "tokens Apple accepted twice")
        }
    }
}

extension DispatcherHarness {
    /// Writes a record keyed `key` (empty value) to `topic` with a producer of its own (the harness's
    /// is shut down by `stop`).
    func producer(sending key: String, to topic: String) async throws -> KafkaOffset {
        let producer = try KafkaProducer(configuration: KafkaProducerConfiguration(bootstrapServers: [cluster.bootstrapServers]))
        let report = try await producer.send(topic: topic, key: key, value: [])
        await producer.shutdown()
        return report.offset
    }
}
