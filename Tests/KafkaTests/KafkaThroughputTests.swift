import Foundation
import ServiceCore
import Testing

@testable import Kafka

/// Produce throughput against the in-process mock broker (acks=all, idempotent, linger 5 ms):
/// 20,000 records of 200 bytes, all sends in flight at once. Prints records/s.
@Suite(.timeLimit(.minutes(1)))
struct KafkaThroughputTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    @Test func produceThroughput() async throws {
        let cluster = try KafkaMockCluster(brokers: 3, logger: TestSupport.logger)
        let topic = TestSupport.unique("throughput")
        try cluster.createTopic(topic, partitions: 6)
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        let count = 20_000
        let value = [UInt8](repeating: 0x61, count: 200)
        let start = ContinuousClock.now
        let acknowledged = try await withThrowingTaskGroup(of: KafkaDeliveryReport.self) { group in
            for index in 0..<count {
                group.addTask { try await producer.send(topic: topic, key: "key-\(index % 1000)", value: value) }
            }
            return try await group.reduce(into: 0) { total, _ in total += 1 }
        }
        let elapsed = ContinuousClock.now - start
        await producer.shutdown()
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = Double(count) / seconds
        print("kafka produce throughput: \(count) records x 200 B in \(String(format: "%.2f", seconds)) s = \(Int(rate)) records/s")
        #expect(acknowledged == count)
        #expect(rate > 1000, "only \(Int(rate)) records/s")
    }

    /// Consume throughput of the group consumer (`nextMessages`), from the start of a full topic.
    @Test(arguments: [500, 10]) func consumeThroughput(fetchWaitMs: Int) async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("consume-throughput")
        try cluster.createTopic(topic, partitions: 6)
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        let count = 30_000
        let value = [UInt8](repeating: 0x61, count: 200)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<count {
                group.addTask { _ = try await producer.send(topic: topic, key: "key-\(index)", value: value) }
            }
            try await group.waitForAll()
        }
        await producer.shutdown()
        var config = TestSupport.consumerConfig(cluster, group: TestSupport.unique("g"), topics: [topic])
        config.fetchMaxWait = .milliseconds(fetchWaitMs)
        let consumer = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        var received = 0
        var start: ContinuousClock.Instant?
        while received < count {
            let batch = await consumer.nextMessages(maxCount: 512)
            if start == nil { start = .now }
            received += batch.count
        }
        let elapsed = ContinuousClock.now - start!
        await consumer.close()
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        print("kafka consume throughput (fetch.wait.max.ms \(fetchWaitMs)): \(count) records x 200 B in \(String(format: "%.2f", seconds)) s = \(Int(Double(count) / seconds)) records/s")
        #expect(received == count)
    }
}
