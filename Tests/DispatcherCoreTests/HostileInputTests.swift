import APNs
import Foundation
import Kafka
import Postgres
import PushDomain
import PushMessages
import PushTestSupport
import ServiceCore
import Testing

@testable import DispatcherCore

/// A running `Dispatcher` on a real PostgreSQL and librdkafka's Kafka-protocol broker, for what hostile
/// producers can put on the bus (README "Security"). Nothing reaches APNs unless a sender is given:
/// the default one fails the test if it is called.
final class DispatcherHarness: Sendable {
    struct NoSender: NotificationSender {
        func send(_ request: APNsRequest, environment: APNsEnvironment, options: APNsSendOptions) async throws -> APNsResponse {
            Issue.record("no notification should reach APNs in this test")
            throw CancellationError()
        }
        func retryDeadline(for request: APNsRequest, now: Date?) -> Date { Date() }
    }

    let pool: PostgresPool
    let store: TokenStore
    let cluster: KafkaMockCluster
    let producer: KafkaProducer
    let topics: DispatcherConfiguration.Topics
    let consumerGroup: String
    let registry = MetricsRegistry()
    let monitor: DispatcherMonitor
    let dispatcher: Dispatcher
    let shutdown = GracefulShutdown()
    let task: Task<Void, any Error>

    /// The consumer's decompression limit here (`receive.message.max.bytes`): a zstd record of 3 MB of
    /// zeros expands past it and librdkafka reports `_BAD_COMPRESSION`, as a record of about 94 MB
    /// does under the default limit of 100 MB.
    static let receiveLimit = 1_100_000

    /// - Parameters:
    ///   - partitions: of each topic.
    ///   - replicaOf: another harness whose broker, topics and consumer group this one shares (a second
    ///     replica); nil for a broker of its own.
    ///   - sender: where notifications go; by default none may be sent.
    ///   - configure: changes to the dispatcher's configuration, made last.
    init(intake: IntakeSettings = IntakeSettings(), campaignRunner: Bool = false, partitions: Int = 1, replicaOf: DispatcherHarness? = nil,
         sender: any NotificationSender = NoSender(), configure: (inout DispatcherConfiguration) -> Void = { _ in }) async throws {
        pool = PostgresPool(configuration: .init(conninfo: try TestDatabase.url, maximumConnections: 4))
        try await pool.start()
        store = TokenStore(pool: pool)
        try await store.migrate()
        var topics = DispatcherConfiguration.Topics()
        let suffix = UUID().uuidString.prefix(8)
        if let replicaOf {
            cluster = replicaOf.cluster
            topics = replicaOf.topics
            consumerGroup = replicaOf.consumerGroup
        } else {
            cluster = try KafkaMockCluster(brokers: 1)
            topics.tokenEvents = "token-events-\(suffix)"
            topics.sendRequests = "send-requests-\(suffix)"
            topics.feedback = "feedback-\(suffix)"
            topics.deadLetter = "dead-letter-\(suffix)"
            for topic in topics.all { try cluster.createTopic(topic, partitions: partitions) }
            consumerGroup = "dispatcher-\(suffix)"
        }
        self.topics = topics
        var producerConfiguration = KafkaProducerConfiguration(bootstrapServers: [cluster.bootstrapServers])
        producerConfiguration.maxMessageBytes = 10_000_000
        producer = try KafkaProducer(configuration: producerConfiguration)
        var configuration = DispatcherConfiguration(bootstrapServers: [cluster.bootstrapServers], instanceID: "test-\(suffix)")
        configuration.consumerGroup = consumerGroup
        configuration.topics = topics
        configuration.sessionTimeout = .seconds(6)
        configuration.fetchMaxWait = .milliseconds(10)
        configuration.intake = intake
        configuration.campaigns.runnerEnabled = campaignRunner
        configuration.sendLogRetention = nil
        configuration.kafkaProperties = [
            "receive.message.max.bytes": String(Self.receiveLimit), "fetch.max.bytes": "1000000",
            "max.partition.fetch.bytes": "1000000", "fetch.error.backoff.ms": "50",
        ]
        configure(&configuration)
        monitor = DispatcherMonitor(registry: registry)
        let dispatcher = Dispatcher(
            configuration: configuration, store: store, sender: sender, producer: producer,
            logger: Logger(label: "test.dispatcher", logLevel: .error), monitor: monitor, metrics: registry)
        self.dispatcher = dispatcher
        let shutdown = self.shutdown
        task = Task { try await dispatcher.run(shutdown: shutdown) }
    }

    func stop() async throws {
        shutdown.trigger()
        try await task.value
        await producer.shutdown()
        await pool.close()
    }

    /// Writes `value` to `topic` in a batch of its own; zstd-compressed when `compressed`.
    @discardableResult
    func produce(_ topic: String, key: String, value: [UInt8], contentType: String? = nil, compressed: Bool = false, codec: String = "zstd") async throws -> KafkaOffset {
        let headers = contentType.map { [KafkaHeader(name: "content-type", value: $0)] } ?? []
        if compressed {
            var configuration = KafkaProducerConfiguration(bootstrapServers: [cluster.bootstrapServers])
            configuration.maxMessageBytes = 10_000_000
            configuration.additionalProperties["compression.codec"] = codec
            let zstd = try KafkaProducer(configuration: configuration)
            let report = try await zstd.send(topic: topic, key: key, value: value, headers: headers)
            await zstd.shutdown()
            return report.offset
        }
        return try await producer.send(topic: topic, key: key, value: value, headers: headers).offset
    }

    /// Every record of `topic` until `done` holds for what was read, failing after `timeout`.
    func read(_ topic: String, timeout: Duration = .seconds(30), until done: ([KafkaMessage]) -> Bool) async throws -> [KafkaMessage] {
        var configuration = KafkaConsumerConfiguration(bootstrapServers: [cluster.bootstrapServers], groupID: "reader-\(UUID())", topics: [topic])
        configuration.sessionTimeout = .seconds(6)
        configuration.fetchMaxWait = .milliseconds(10)
        let consumer = try KafkaConsumer(configuration: configuration)
        var records: [KafkaMessage] = []
        let deadline = ContinuousClock.now + timeout
        while !done(records) {
            guard ContinuousClock.now < deadline else {
                await consumer.close()
                throw TestFailure("\(topic): \(records.count) records read in \(timeout), condition not met")
            }
            let batch = try await withThrowingTaskGroup(of: [KafkaMessage].self) { group in
                group.addTask { await consumer.nextMessages(maxCount: 1_000) }
                group.addTask {
                    try await Task.sleep(for: .milliseconds(500))
                    return []
                }
                let first = try await group.next() ?? []
                group.cancelAll()
                return first
            }
            records += batch
        }
        await consumer.close()
        return records
    }

    func deadLetters(until done: ([DeadLetter]) -> Bool) async throws -> [DeadLetter] {
        let records = try await read(topics.deadLetter) { records in done(records.compactMap { try? DeadLetter(protobufBytes: $0.value) }) }
        return try records.map { try DeadLetter(protobufBytes: $0.value) }
    }

    /// Waits until `condition` holds, checking every 50 ms (`PushTestSupport.eventually`).
    func eventually(_ what: String, timeout: Duration = .seconds(30), _ condition: () async throws -> Bool) async throws {
        try await PushTestSupport.eventually(what, timeout: timeout, interval: .milliseconds(50), condition)
    }

    /// The partitions of `topic` (of `partitions`) assigned to this replica's consumer right now.
    func assigned(_ topic: String, of partitions: Int) -> Set<Int> {
        Set((0..<partitions).filter { registry.value("push_kafka_partition_stalled", labels: [topic, "\($0)"]) != nil })
    }

    func stalled(_ topic: String) -> Double? { registry.value("push_kafka_partition_stalled", labels: [topic, "0"]) }

    static func registration(token: String, bundleID: String, userID: String, eventTimeMs: Int64) -> TokenEvent {
        var device = Device()
        device.deviceToken = token
        device.bundleID = bundleID
        device.environment = .production
        device.userID = userID
        return TokenEvent(eventID: UUID().uuidString, action: .registered, device: device, eventTimeMs: eventTimeMs)
    }
}

extension DispatcherEngineSuites {
    @Suite(.testDatabase, .serialized, .timeLimit(.minutes(2)))
    struct HostileInputTests {
        init() { ProcessSignals.ignoreSIGPIPE() }

        static let huge = [UInt8](repeating: 0, count: 3_000_000)

        /// Two zstd records the client cannot decompress block neither topic: each is dead-lettered by its
        /// offset (`unreadable_by_client`, counted as `undecodable_batch`), the record written after it in
        /// a batch of its own is handled, the offsets are committed past them and the stall gauge is 0.
        @Test func unreadableBatchesAreDeadLetteredByOffsetAndTheNextRecordIsHandled() async throws {
            let harness = try await DispatcherHarness()
            let token = String(repeating: "ab", count: 32)
            let before = MetricsRegistry.shared.value("push_dead_letters_total", labels: ["undecodable_batch"]) ?? 0
            // Token events: two unreadable batches, then a registration.
            #expect(try await harness.produce(harness.topics.tokenEvents, key: token, value: Self.huge, compressed: true) == 0)
            #expect(try await harness.produce(harness.topics.tokenEvents, key: token, value: Self.huge, compressed: true) == 1)
            let event = DispatcherHarness.registration(token: token, bundleID: "com.example.app", userID: "u1", eventTimeMs: Int64(Date().timeIntervalSince1970 * 1000))
            #expect(try await harness.produce(harness.topics.tokenEvents, key: token, value: event.serializedBytes(), contentType: TokenEvent.protobufContentType) == 2)
            // Send requests: one unreadable batch, then a request to a user without tokens.
            #expect(try await harness.produce(harness.topics.sendRequests, key: "r-bad", value: Self.huge, compressed: true) == 0)
            var notification = PushMessages.Notification()
            notification.bundleID = "com.example.app"
            notification.pushType = .alert
            notification.payload = #"{"aps":{"alert":"hi"}}"#
            let request = SendRequest(requestID: "r-after", target: .userIDs(UserIds(userIDs: ["nobody"])), notification: notification)
            #expect(try await harness.produce(harness.topics.sendRequests, key: "r-after", value: request.serializedBytes(), contentType: SendRequest.protobufContentType) == 1)

            try await harness.eventually("the registration after the unreadable batches applied") {
                try await harness.store.pool.query("SELECT 1 FROM device_tokens WHERE device_token = '\(token)'").count == 1
            }
            let completed = try await harness.read(harness.topics.feedback) { records in
                records.contains { record in
                    if case .requestCompleted(let completed)? = (try? FeedbackEvent(protobufBytes: record.value))?.event { return completed.requestID == "r-after" }
                    return false
                }
            }
            #expect(!completed.isEmpty)
            let letters = try await harness.deadLetters { $0.count >= 3 }
            let byTopic = Dictionary(grouping: letters, by: \.sourceTopic)
            #expect(byTopic[harness.topics.tokenEvents]?.map(\.sourceOffset).sorted() == [0, 1])
            #expect(byTopic[harness.topics.sendRequests]?.map(\.sourceOffset) == [0])
            for letter in letters {
                #expect(letter.unreadableByClient)
                #expect(letter.originalValueSize == 0 && letter.originalValue.isEmpty && letter.originalKey.isEmpty)
                #expect(letter.error.contains("_BAD_COMPRESSION"), "\(letter.error)")
                #expect(letter.rejectedBy == "dispatcher")
            }
            #expect((MetricsRegistry.shared.value("push_dead_letters_total", labels: ["undecodable_batch"]) ?? 0) - before == 3)
            #expect(harness.stalled(harness.topics.tokenEvents) == 0)
            #expect(harness.stalled(harness.topics.sendRequests) == 0)
            try await harness.stop()
        }

        /// A partition the client cannot read past (skipping set far off) is reported stalled after
        /// `PUSH_PARTITION_STALL_MS`: the gauge is 1 and `/readyz`'s body names it, while the service stays
        /// ready.
        @Test func aStalledPartitionIsAGaugeAndAReadinessLineNotAReadinessFailure() async throws {
            var intake = IntakeSettings()
            intake.consumerErrorRetries = 1_000_000
            intake.partitionStall = .milliseconds(200)
            let harness = try await DispatcherHarness(intake: intake)
            try await harness.produce(harness.topics.sendRequests, key: "r-bad", value: Self.huge, compressed: true)
            try await harness.eventually("stall gauge at 1") { harness.stalled(harness.topics.sendRequests) == 1 }
            #expect(harness.stalled(harness.topics.tokenEvents) == 0)
            let report = harness.monitor.readiness.inputs()
            let lines = report.informational.filter { $0.name == "kafka.partition_stalled" }
            #expect(lines.count == 1)
            #expect(lines.first?.detail.contains("\(harness.topics.sendRequests)[0] at offset 0") == true, "\(lines)")
            try await harness.stop()
        }

        /// A registration of app B's active token by app A is not applied: it is dead-lettered as
        /// `token_owned_by_other_app` and counted, and app B keeps its token.
        @Test func aRegistrationOfAnotherAppsTokenIsDeadLettered() async throws {
            let harness = try await DispatcherHarness()
            let token = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let before = MetricsRegistry.shared.value("push_dead_letters_total", labels: ["token_owned_by_other_app"]) ?? 0
            let owner = DispatcherHarness.registration(token: token, bundleID: "com.example.b", userID: "bob", eventTimeMs: now - 1_000)
            let thief = DispatcherHarness.registration(token: token, bundleID: "com.example.a", userID: "mallory", eventTimeMs: now)
            try await harness.produce(harness.topics.tokenEvents, key: token, value: owner.serializedBytes(), contentType: TokenEvent.protobufContentType)
            let offset = try await harness.produce(harness.topics.tokenEvents, key: token, value: thief.serializedBytes(), contentType: TokenEvent.protobufContentType)
            let letters = try await harness.deadLetters { !$0.isEmpty }
            #expect(letters.count == 1)
            #expect(letters.first?.sourceOffset == offset.rawValue)
            #expect(letters.first?.error.contains("another app (com.example.b)") == true, "\(letters.first?.error ?? "")")
            #expect(letters.first?.unreadableByClient == false)
            #expect((MetricsRegistry.shared.value("push_dead_letters_total", labels: ["token_owned_by_other_app"]) ?? 0) - before == 1)
            let row = try #require(try await harness.store.tokens([token])[token])
            #expect(row.bundleID == "com.example.b" && row.userID == "bob" && row.isActive)
            try await harness.stop()
        }

        /// The same request id with another notification is dead-lettered as `request_id_reused`; the
        /// same request sent again (a producer's retry) is a repeat as before and dead-letters nothing.
        @Test func aRequestIDReusedForAnotherNotificationIsDeadLettered() async throws {
            let harness = try await DispatcherHarness()
            let before = MetricsRegistry.shared.value("push_dead_letters_total", labels: ["request_id_reused"]) ?? 0
            func request(_ alert: String) -> SendRequest {
                var notification = PushMessages.Notification()
                notification.bundleID = "com.example.app"
                notification.pushType = .alert
                notification.payload = #"{"aps":{"alert":"\#(alert)"}}"#
                return SendRequest(requestID: "r-reused", target: .userIDs(UserIds(userIDs: ["nobody"])), notification: notification)
            }
            let contentType = SendRequest.protobufContentType
            try await harness.produce(harness.topics.sendRequests, key: "r-reused", value: request("first").serializedBytes(), contentType: contentType)
            try await harness.produce(harness.topics.sendRequests, key: "r-reused", value: request("first").serializedBytes(), contentType: contentType)
            let reused = try await harness.produce(harness.topics.sendRequests, key: "r-reused", value: request("second").serializedBytes(), contentType: contentType)
            // A marker request after them: once it completed, the three before it were handled.
            var marker = request("marker")
            marker.requestID = "r-marker"
            try await harness.produce(harness.topics.sendRequests, key: "r-marker", value: marker.serializedBytes(), contentType: contentType)
            _ = try await harness.read(harness.topics.feedback) { records in
                records.contains { record in
                    if case .requestCompleted(let completed)? = (try? FeedbackEvent(protobufBytes: record.value))?.event { return completed.requestID == "r-marker" }
                    return false
                }
            }
            let letters = try await harness.deadLetters { !$0.isEmpty }
            #expect(letters.map(\.sourceOffset) == [reused.rawValue])
            #expect(letters.first?.error.hasPrefix("request_id: \"r-reused\" was used before") == true, "\(letters.first?.error ?? "")")
            #expect((MetricsRegistry.shared.value("push_dead_letters_total", labels: ["request_id_reused"]) ?? 0) - before == 1)
            try await harness.stop()
        }

        /// No number a producer chooses makes the dispatcher trap: `send_at_ms`, `created_at_ms`,
        /// `expiration`, `priority` and `CancelRequest.requested_at_ms` at Int64.min, -1, 0 and Int64.max
        /// (priority at 0, 1 and UInt32.max) each end as a completed request, a scheduled campaign or a
        /// dead letter, with the campaign runner running, and the process is still there to handle the next
        /// request.
        @Test func extremeNumbersInRequestsEndCleanly() async throws {
            let harness = try await DispatcherHarness(campaignRunner: true)
            let extremes: [Int64] = [.min, -1, 0, .max]
            var ids: [String] = []
            func send(_ id: String, _ edit: (inout SendRequest) -> Void) async throws {
                var notification = PushMessages.Notification()
                notification.bundleID = "com.example.app"
                notification.pushType = .alert
                notification.payload = #"{"aps":{"alert":"hi"}}"#
                var request = SendRequest(requestID: id, target: .userIDs(UserIds(userIDs: ["nobody"])), notification: notification)
                edit(&request)
                try await harness.produce(harness.topics.sendRequests, key: id, value: request.serializedBytes(), contentType: SendRequest.protobufContentType)
                ids.append(id)
            }
            for (index, value) in extremes.enumerated() {
                try await send("send-at-\(index)") { $0.sendAtMs = value }
                try await send("created-at-\(index)") { $0.createdAtMs = value }
                try await send("expiration-\(index)") { $0.notification?.expiration = value }
                var cancel = CancelRequest()
                cancel.requestID = "send-at-\(index)"
                cancel.requestedAtMs = value
                try await harness.produce(harness.topics.sendRequests, key: cancel.requestID, value: cancel.serializedBytes(),
                                          contentType: "application/x-protobuf; message=push.v1.CancelRequest")
            }
            for (index, value) in [UInt32(0), 1, .max].enumerated() {
                try await send("priority-\(index)") { $0.notification?.priority = value }
            }
            try await send("after") { _ in }
            // Each request id ends visibly: a RequestCompleted (a refused one carries the error) or a
            // campaign row.
            func completedIDs(_ records: [KafkaMessage]) -> Set<String> {
                Set(records.compactMap { record in
                    if case .requestCompleted(let completed)? = (try? FeedbackEvent(protobufBytes: record.value))?.event { return completed.requestID }
                    return nil
                })
            }
            let wanted = Set(ids)
            var accounted = Set<String>()
            try await harness.eventually("every request accounted for", timeout: .seconds(120)) {
                let campaigns = Set(try await harness.store.pool.query("SELECT request_id FROM campaigns").compactMap { try $0.string("request_id") })
                let records = try? await harness.read(harness.topics.feedback, timeout: .seconds(10)) { records in
                    wanted.subtracting(campaigns).isSubset(of: completedIDs(records))
                }
                guard let records else { return false }
                accounted = campaigns.union(completedIDs(records))
                return true
            }
            #expect(wanted.subtracting(accounted).isEmpty, "not accounted for: \(wanted.subtracting(accounted).sorted())")
            #expect(accounted.contains("after"))
            try await harness.stop()
        }

        /// A gzip record that expands past `PUSH_MAX_SEND_REQUEST_BYTES` (5 MB of zeros, 5 KB compressed)
        /// is dead-lettered as `send_request_too_large` with its size, SHA-256 and a prefix (the consumer
        /// copies no more than the limit out of librdkafka), and the request after it is handled.
        @Test func aRecordThatExpandsPastTheLimitIsDeadLetteredWithoutBeingCopied() async throws {
            let harness = try await DispatcherHarness()
            let before = MetricsRegistry.shared.value("push_dead_letters_total", labels: ["send_request_too_large"]) ?? 0
            let big = try await harness.produce(harness.topics.sendRequests, key: "r-big", value: [UInt8](repeating: 0, count: 5_000_000),
                                                contentType: SendRequest.protobufContentType, compressed: true, codec: "gzip")
            var notification = PushMessages.Notification()
            notification.bundleID = "com.example.app"
            notification.pushType = .alert
            notification.payload = #"{"aps":{"alert":"hi"}}"#
            let after = SendRequest(requestID: "r-small", target: .userIDs(UserIds(userIDs: ["nobody"])), notification: notification)
            try await harness.produce(harness.topics.sendRequests, key: "r-small", value: after.serializedBytes(), contentType: SendRequest.protobufContentType)
            _ = try await harness.read(harness.topics.feedback) { records in
                records.contains { record in
                    if case .requestCompleted(let completed)? = (try? FeedbackEvent(protobufBytes: record.value))?.event { return completed.requestID == "r-small" }
                    return false
                }
            }
            let letters = try await harness.deadLetters { !$0.isEmpty }
            #expect(letters.count == 1)
            let letter = try #require(letters.first)
            #expect(letter.sourceOffset == big.rawValue)
            #expect(letter.originalValueSize == 5_000_000 && letter.originalValueTruncated)
            #expect(!letter.originalValue.isEmpty && letter.originalValue.count < 1_000_000 && letter.originalValue.allSatisfy { $0 == 0 })
            #expect(letter.originalValueSha256 == Digest.sha256([UInt8](repeating: 0, count: 5_000_000)))
            #expect(letter.error.contains("PUSH_MAX_SEND_REQUEST_BYTES"), "\(letter.error)")
            #expect((MetricsRegistry.shared.value("push_dead_letters_total", labels: ["send_request_too_large"]) ?? 0) - before == 1)
            try await harness.stop()
        }
    }
}
