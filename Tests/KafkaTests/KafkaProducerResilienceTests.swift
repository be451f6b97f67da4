import Foundation
import PushTestSupport
import ServiceCore
import Synchronization
import Testing

@testable import Kafka

/// Outages, a full local queue and fatal errors: `send` keeps waiting and nothing is lost.
@Suite(.timeLimit(.minutes(1)))
struct KafkaProducerResilienceTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    /// Reads records until every value in `expected` was seen; returns how often each value came.
    private func consumeAll(_ cluster: KafkaMockCluster, topic: String, expected: Set<String>) async throws -> [String: Int] {
        let consumer = try KafkaConsumer(
            configuration: TestSupport.consumerConfig(cluster, group: TestSupport.unique("check"), topics: [topic]), logger: TestSupport.logger)
        let seen = Tally()
        let complete = try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                try await Task.sleep(for: .seconds(30))
                return false
            }
            group.addTask {
                var missing = expected
                for await message in consumer.messages {
                    seen.add(message.value.utf8String)
                    missing.remove(message.value.utf8String)
                    if missing.isEmpty { return true }
                }
                return false
            }
            let first = try await group.next()!
            group.cancelAll()
            return first
        }
        await consumer.close()
        let counts = seen.counts
        guard complete else {
            throw TestSupport.TimedOut(what: "all records; missing \(expected.subtracting(counts.keys).sorted().prefix(20))")
        }
        return counts
    }

    @Test func sendWaitsWhileTheLeaderIsDownAndResolvesWhenItReturns() async throws {
        let cluster = try KafkaMockCluster(brokers: 3, logger: TestSupport.logger)
        let topic = TestSupport.unique("outage")
        try cluster.createTopic(topic, partitions: 1)
        try cluster.setPartitionLeader(topic: topic, partition: 0, brokerID: 2)
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        _ = try await producer.send(topic: topic, key: "warm-up", value: Array("before".utf8))

        try cluster.setBrokerDown(2)
        let sends = Task {
            try await withThrowingTaskGroup(of: KafkaDeliveryReport.self) { group in
                for index in 0..<20 {
                    group.addTask { try await producer.send(topic: topic, key: "k", value: Array("during-\(index)".utf8)) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
        }
        // While the leader is down every send waits (none fails): all 20 become pending.
        try await eventually("20 sends pending while the leader is down") { producer.pendingCount == 20 }
        try cluster.setBrokerUp(2)
        let reports = try await sends.value
        #expect(reports.count == 20)
        #expect(Set(reports.map(\.offset)).count == 20)
        await producer.shutdown()

        let counts = try await consumeAll(cluster, topic: topic, expected: Set((0..<20).map { "during-\($0)" } + ["before"]))
        #expect(counts.count == 21)
    }

    @Test func fullLocalQueueMakesSendWaitInsteadOfFailing() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("backpressure")
        try cluster.createTopic(topic, partitions: 2)
        var config = TestSupport.producerConfig(cluster)
        config.maxQueuedMessages = 5
        let producer = try KafkaProducer(configuration: config, logger: TestSupport.logger)
        let count = 400
        let reports = try await withThrowingTaskGroup(of: KafkaDeliveryReport.self) { group in
            for index in 0..<count {
                group.addTask { try await producer.send(topic: topic, key: "k\(index % 7)", value: Array("bp-\(index)".utf8)) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(reports.count == count)
        await producer.shutdown()
        let counts = try await consumeAll(cluster, topic: topic, expected: Set((0..<count).map { "bp-\($0)" }))
        #expect(counts.values.allSatisfy { $0 == 1 })
    }

    /// A fatal error (raised inside librdkafka with `rd_kafka_test_fatal_error`, as librdkafka's own
    /// tests do) in the middle of a stream of sends: every awaited send resolves, every record arrives
    /// at least once, and the producer was recreated.
    @Test func fatalErrorRecreatesTheProducerAndResendsUnacknowledgedRecords() async throws {
        let cluster = try KafkaMockCluster(brokers: 3, logger: TestSupport.logger)
        let topic = TestSupport.unique("fatal")
        try cluster.createTopic(topic, partitions: 3)
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        let count = 300
        let reports = try await withThrowingTaskGroup(of: KafkaDeliveryReport.self) { group in
            for index in 0..<count {
                group.addTask { try await producer.send(topic: topic, key: "k\(index % 10)", value: Array("f-\(index)".utf8)) }
                if index == 100 { producer.raiseFatalErrorForTesting(reason: "test: sequence desynchronisation") }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(reports.count == count)
        #expect(producer.fatalErrorRecoveries >= 1)
        // The recreated producer works for new sends too.
        _ = try await producer.send(topic: topic, key: "after", value: Array("after".utf8))
        await producer.shutdown()
        let counts = try await consumeAll(cluster, topic: topic, expected: Set((0..<count).map { "f-\($0)" } + ["after"]))
        #expect(counts.values.allSatisfy { $0 >= 1 })
    }

    /// The broker itself provokes the fatal error: Produce requests answered with
    /// OUT_OF_ORDER_SEQUENCE_NUMBER make librdkafka 2.0.2's idempotent producer fail fatally.
    @Test func brokerProvokedFatalErrorIsRecovered() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("oosn")
        try cluster.createTopic(topic, partitions: 1)
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        _ = try await producer.send(topic: topic, key: "k", value: Array("first".utf8))
        cluster.pushRequestErrors(apiKey: .produce, errors: Array(repeating: .outOfOrderSequenceNumber, count: 3))
        let reports = try await withThrowingTaskGroup(of: KafkaDeliveryReport.self) { group in
            for index in 0..<50 {
                group.addTask { try await producer.send(topic: topic, key: "k", value: Array("o-\(index)".utf8)) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(reports.count == 50)
        #expect(producer.fatalErrorRecoveries >= 1)
        await producer.shutdown()
        let counts = try await consumeAll(cluster, topic: topic, expected: Set((0..<50).map { "o-\($0)" } + ["first"]))
        #expect(counts.values.allSatisfy { $0 >= 1 })
    }

    @Test func sendAfterShutdownFails() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        await producer.shutdown()
        await #expect(throws: KafkaError.self) {
            _ = try await producer.send(topic: "t", key: nil, value: [1])
        }
    }

    @Test func invalidPropertyIsRejected() throws {
        var config = KafkaProducerConfiguration(bootstrapServers: ["127.0.0.1:1"])
        config.additionalProperties["no.such.property"] = "1"
        #expect(throws: KafkaError.self) { _ = try KafkaProducer(configuration: config, logger: TestSupport.logger) }
    }
}

/// Counts values seen by a consumer task.
final class Tally: Sendable {
    private let values = Mutex<[String: Int]>([:])
    func add(_ value: String) { values.withLock { $0[value, default: 0] += 1 } }
    var counts: [String: Int] { values.withLock { $0 } }
}
