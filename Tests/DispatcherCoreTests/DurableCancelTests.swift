import APNs
import APNsSimulator
import Foundation
import Kafka
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

extension DispatcherEngineSuites {
    /// Cancels of immediate requests on running dispatchers (real PostgreSQL and librdkafka's broker;
    /// docs/campaigns.md "Cancellation"). Where a request must be under way, it is sent to the APNs
    /// simulator over TLS; elsewhere every token must end SKIPPED without a send (the harness's sender
    /// fails the test if a notification reaches it).
    @Suite(.testDatabase, .serialized, .timeLimit(.minutes(5)))
    struct DurableCancelTests {
        init() { ProcessSignals.ignoreSIGPIPE() }

        static let bundleID = "com.example.app"

        /// `count` active tokens of `userID`, each starting with `prefix` (two hex digits).
        static func register(_ userID: String, prefix: String, count: Int = 3, in store: TokenStore) async throws -> [String] {
            let tokens = (1...count).map { prefix + String(format: "%06x", $0) + String(repeating: "cd", count: 28) }
            let now = SystemWallClock().nowMilliseconds()
            let events = tokens.map { DispatcherHarness.registration(token: $0, bundleID: bundleID, userID: userID, eventTimeMs: now) }
            _ = try await store.applyBatch(events)
            return tokens
        }

        static func request(_ requestID: String, to userID: String) -> SendRequest {
            var notification = PushMessages.Notification()
            notification.bundleID = bundleID
            notification.pushType = .alert
            notification.payload = #"{"aps":{"alert":"hi"}}"#
            return SendRequest(requestID: requestID, target: .userIDs(UserIds(userIDs: [userID])), notification: notification)
        }

        static let cancelContentType = "application/x-protobuf; message=push.v1.CancelRequest"

        static func cancel(_ requestID: String) -> CancelRequest {
            CancelRequest(requestID: requestID, reason: "test", requestedAtMs: SystemWallClock().nowMilliseconds())
        }

        /// The request's `RequestCompleted` and its delivery reports, read from the feedback topic.
        /// - Parameter timeout: how long to wait for the `RequestCompleted`.
        static func outcome(of requestID: String, on harness: DispatcherHarness, timeout: Duration = .seconds(60)) async throws -> (RequestCompleted, [DeliveryReport]) {
            let records = try await harness.read(harness.topics.feedback, timeout: timeout) { records in
                records.contains { record in
                    if case .requestCompleted(let completed)? = (try? FeedbackEvent(protobufBytes: record.value))?.event { return completed.requestID == requestID }
                    return false
                }
            }
            var completed: RequestCompleted?
            var reports: [DeliveryReport] = []
            for record in records {
                switch (try? FeedbackEvent(protobufBytes: record.value))?.event {
                case .requestCompleted(let event)? where event.requestID == requestID: completed = event
                case .deliveryReport(let report)? where report.requestID == requestID: reports.append(report)
                default: break
                }
            }
            return (try #require(completed), reports)
        }

        static func expectCancelled(_ completed: RequestCompleted, _ reports: [DeliveryReport], tokens: [String]) {
            #expect(completed.status == .cancelled)
            #expect(completed.total == UInt32(tokens.count) && completed.skipped == UInt32(tokens.count) && completed.delivered == 0)
            #expect(Set(reports.map(\.deviceToken)) == Set(tokens))
            for report in reports { #expect(report.outcome == .skipped && report.outcomeReason == .cancelled) }
        }

        /// The defect this fixes: a list of the last 10,000 cancels forgot a cancel once 10,050 cancels
        /// for other ids followed it, and the request was then sent. Its cancel, then 10,050 cancels for
        /// other ids, then the request: it ends CANCELLED with every token SKIPPED.
        @Test func tenThousandFiftyCancelsForOtherIDsDoNotUndoACancel() async throws {
            let harness = try await DispatcherHarness()
            let tokens = try await Self.register("u-victim", prefix: "a1", in: harness.store)
            let topic = harness.topics.sendRequests
            try await harness.produce(topic, key: "victim", value: Self.cancel("victim").serializedBytes(), contentType: Self.cancelContentType)
            for chunk in stride(from: 0, to: 10_050, by: 1_000) {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for index in chunk..<min(chunk + 1_000, 10_050) {
                        group.addTask {
                            let id = "other-\(index)"
                            try await harness.produce(topic, key: id, value: Self.cancel(id).serializedBytes(), contentType: Self.cancelContentType)
                        }
                    }
                    try await group.waitForAll()
                }
            }
            try await harness.produce(topic, key: "victim", value: Self.request("victim", to: "u-victim").serializedBytes(), contentType: SendRequest.protobufContentType)
            // Every cancel is written to PostgreSQL twice, one after the other in key order: about 20,000
            // statements before the request's turn (54 s seen on a machine with a load average of 45).
            let (completed, reports) = try await Self.outcome(of: "victim", on: harness, timeout: .seconds(240))
            Self.expectCancelled(completed, reports, tokens: tokens)
            // The cancels of other keys run in parallel with the victim's: some may still be being
            // written when the victim ended.
            try await eventually("10,051 cancellations rows", timeout: .seconds(60)) {
                try await harness.store.pool.query("SELECT count(*)::bigint AS n FROM cancellations").first?.int64("n") == 10_051
            }
            try await harness.stop()
        }

        /// A cancel received by another replica, on another topic partition, before its request: the
        /// replica that gets the request knows it (the cancellations table, read before its first record)
        /// and the request ends CANCELLED with every token SKIPPED.
        @Test func aCancelHandledByAnotherReplicaBeforeItsRequestCancelsIt() async throws {
            let other = try await DispatcherHarness()
            try await other.produce(other.topics.sendRequests, key: "early", value: Self.cancel("early").serializedBytes(), contentType: Self.cancelContentType)
            try await other.eventually("the other replica recorded the cancel") {
                try await other.store.pool.query("SELECT 1 FROM cancellations WHERE request_id = 'early'").count == 1
            }
            try await other.stop()

            let harness = try await DispatcherHarness()
            let tokens = try await Self.register("u-early", prefix: "b2", in: harness.store)
            try await harness.produce(
                harness.topics.sendRequests, key: "early", value: Self.request("early", to: "u-early").serializedBytes(),
                contentType: SendRequest.protobufContentType)
            let (completed, reports) = try await Self.outcome(of: "early", on: harness)
            Self.expectCancelled(completed, reports, tokens: tokens)
            try await harness.stop()
        }

        /// A cancel handled by another replica, on another topic partition, while the request is being
        /// sent here: no notification reaches APNs later than 1 s after Kafka acknowledged the cancel,
        /// and the rest of the tokens are SKIPPED (60 tokens, 2 at a time, each answered in 100 ms:
        /// about 3 s of sending, cancelled after the first 6).
        @Test func aCancelHandledByAnotherReplicaStopsARequestUnderWayWithinOneSecond() async throws {
            let apns = try await SimulatedAPNs.start(latency: .milliseconds(100))
            defer { apns.simulator.close() }
            let other = try await DispatcherHarness()
            let harness = try await DispatcherHarness(sender: apns.client) { $0.maxInFlightNotifications = 2 }
            let tokens = try await Self.register("u-inflight", prefix: "c3", count: 60, in: harness.store)
            try await harness.produce(
                harness.topics.sendRequests, key: "inflight", value: Self.request("inflight", to: "u-inflight").serializedBytes(),
                contentType: SendRequest.protobufContentType)
            try await harness.eventually("the request under way") { apns.simulator.receivedRequests().count >= 6 }
            try await other.produce(other.topics.sendRequests, key: "inflight", value: Self.cancel("inflight").serializedBytes(), contentType: Self.cancelContentType)
            let acknowledgedMs = SystemWallClock().nowMilliseconds()
            let (completed, reports) = try await Self.outcome(of: "inflight", on: harness)
            let received = apns.simulator.receivedRequests()
            let lastMs = try #require(received.map(\.receivedAtMilliseconds).max())
            #expect(lastMs - acknowledgedMs < 1_000, "last push \(lastMs - acknowledgedMs) ms after the cancel's acknowledgement")
            #expect(completed.status == .cancelled && completed.total == UInt32(tokens.count))
            #expect(completed.delivered == UInt32(received.count) && completed.skipped == UInt32(tokens.count - received.count))
            #expect(completed.skipped > 0)
            #expect(reports.filter { $0.outcome == .skipped }.allSatisfy { $0.outcomeReason == .cancelled })
            try await harness.stop()
            try await other.stop()
            await apns.client.shutdown()
        }

        /// A cancel produced to another partition than its request (a producer without the contract's
        /// partitioner), that partition owned by the other of two replicas in one consumer group, while
        /// the request is being sent: no notification reaches APNs later than 1 s after Kafka acknowledged
        /// the cancel, and the request ends CANCELLED.
        @Test func aCancelOnAnotherPartitionOfAnotherReplicaStopsARequestUnderWayWithinOneSecond() async throws {
            let apns = try await SimulatedAPNs.start(latency: .milliseconds(100))
            defer { apns.simulator.close() }
            let first = try await DispatcherHarness(partitions: 2, sender: apns.client) { $0.maxInFlightNotifications = 2 }
            let second = try await DispatcherHarness(replicaOf: first, sender: apns.client) { $0.maxInFlightNotifications = 2 }
            let topic = first.topics.sendRequests
            try await first.eventually("each replica owns one partition") {
                let (a, b) = (first.assigned(topic, of: 2), second.assigned(topic, of: 2))
                return a.count == 1 && b.count == 1 && a != b
            }
            let tokens = try await Self.register("u-partition", prefix: "d4", count: 60, in: first.store)
            // The cancel's producer partitions by CRC32 (librdkafka's `consistent`), the request's by murmur2:
            // a request id whose two partitions differ is found on a probe topic of as many partitions.
            var configuration = KafkaProducerConfiguration(bootstrapServers: [first.cluster.bootstrapServers])
            configuration.partitioner = "consistent"
            let elsewhere = try KafkaProducer(configuration: configuration)
            let probe = "probe-\(UUID().uuidString.prefix(8))"
            try first.cluster.createTopic(probe, partitions: 2)
            var requestID: String?
            for candidate in (0..<64).map({ "partition-\($0)" }) {
                let murmur2 = try await first.producer.send(topic: probe, key: candidate, value: []).partition
                if try await elsewhere.send(topic: probe, key: candidate, value: []).partition != murmur2 {
                    requestID = candidate
                    break
                }
            }
            let id = try #require(requestID)
            let sent = try await first.producer.send(
                topic: topic, key: id, value: Self.request(id, to: "u-partition").serializedBytes(),
                headers: [KafkaHeader(name: "content-type", value: SendRequest.protobufContentType)])
            try await first.eventually("the request under way") { apns.simulator.receivedRequests().count >= 6 }
            let cancelled = try await elsewhere.send(
                topic: topic, key: id, value: Self.cancel(id).serializedBytes(), headers: [KafkaHeader(name: "content-type", value: Self.cancelContentType)])
            let acknowledgedMs = SystemWallClock().nowMilliseconds()
            #expect(cancelled.partition != sent.partition)
            let (completed, _) = try await Self.outcome(of: id, on: first)
            let received = apns.simulator.receivedRequests()
            let lastMs = try #require(received.map(\.receivedAtMilliseconds).max())
            #expect(lastMs - acknowledgedMs < 1_000, "last push \(lastMs - acknowledgedMs) ms after the cancel's acknowledgement")
            #expect(completed.status == .cancelled && completed.total == UInt32(tokens.count) && completed.skipped > 0)
            await elsewhere.shutdown()
            try await second.stop()
            try await first.stop()
            await apns.client.shutdown()
        }
    }
}

/// The APNs simulator on free loopback ports with the engine tests' credentials (`EngineCredentials`:
/// a server certificate for 127.0.0.1, a `.p8` key it trusts), and a client for it.
struct SimulatedAPNs {
    static let keyID = EngineCredentials.keyID
    static let teamID = EngineCredentials.teamID

    let simulator: APNsSimulator
    let client: APNsClient

    /// - Parameter latency: how long the simulator waits before answering each push.
    static func start(latency: Duration) async throws -> SimulatedAPNs {
        let credentials = try await EngineCredentials.shared.value
        func path(_ name: String) -> String { credentials.path(name) }
        var configuration = APNsSimulator.Configuration(
            certificateChainFile: path("server-cert.pem"), privateKeyFile: path("server-key.pem"),
            trustedKeys: [.init(keyID: keyID, teamID: teamID, publicKeyPEM: try String(contentsOfFile: path("key.pub.pem"), encoding: .utf8))])
        configuration.adminPort = nil
        configuration.eventLoopCount = 1
        configuration.faults.latency = .init(minimum: latency, maximum: latency)
        let simulator = try APNsSimulator.start(configuration: configuration)
        var client = APNsClient.Configuration()
        client.production = .init(host: "127.0.0.1", port: simulator.productionPort)
        client.sandbox = .init(host: "127.0.0.1", port: simulator.sandboxPort)
        client.caFile = path("server-cert.pem")
        client.connectionsPerPool = 1
        let tokens = APNsProviderTokenCache(
            signingKey: try APNsSigningKey(p8: try String(contentsOfFile: path("key.p8"), encoding: .utf8)), keyID: keyID, teamID: teamID,
            metrics: MetricsRegistry())
        return SimulatedAPNs(
            simulator: simulator, client: APNsClient(configuration: client, tokens: tokens, logger: Logger(label: "test.apns", logLevel: .error)))
    }
}
