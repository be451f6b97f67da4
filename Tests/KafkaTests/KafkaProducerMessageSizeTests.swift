import Foundation
import ServiceCore
import Testing

@testable import Kafka

/// `KafkaProducer.maxMessageBytes` and the `messageSizeTooLarge` code, from librdkafka's own check in
/// `rd_kafka_produceva` and from a broker's produce response (the delivery report).
@Suite(.timeLimit(.minutes(1)))
struct KafkaProducerMessageSizeTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    @Test func maxMessageBytesIsTheEffectiveSetting() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let defaults = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        #expect(defaults.maxMessageBytes == 1_000_000)
        await defaults.shutdown()

        var config = TestSupport.producerConfig(cluster)
        config.maxMessageBytes = 20_000
        let configured = try KafkaProducer(configuration: config, logger: TestSupport.logger)
        #expect(configured.maxMessageBytes == 20_000)
        await configured.shutdown()

        config.additionalProperties["message.max.bytes"] = "30000"  // applied last: wins
        let overridden = try KafkaProducer(configuration: config, logger: TestSupport.logger)
        #expect(overridden.maxMessageBytes == 30_000)
        await overridden.shutdown()
    }

    /// librdkafka rejects the record in `rd_kafka_produceva` already: `send` throws at once.
    @Test func recordLargerThanMaxMessageBytesFailsWithMessageSizeTooLarge() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("size")
        try cluster.createTopic(topic, partitions: 1)
        var config = TestSupport.producerConfig(cluster)
        config.maxMessageBytes = 10_000
        let producer = try KafkaProducer(configuration: config, logger: TestSupport.logger)
        let error = await #expect(throws: KafkaError.self) {
            _ = try await producer.send(topic: topic, key: "k", value: [UInt8](repeating: 0x61, count: producer.maxMessageBytes + 1))
        }
        #expect(error?.code == .messageSizeTooLarge, "\(String(describing: error))")
        #expect(error?.code.name == "MSG_SIZE_TOO_LARGE")
        #expect(error?.isRetriable == false)
        // A record that fits still goes through.
        let report = try await producer.send(topic: topic, key: "k", value: [UInt8](repeating: 0x61, count: 5_000))
        #expect(report.offset == 0)
        #expect(producer.pendingCount == 0)
        await producer.shutdown()
    }

    /// The broker rejects the batch (its own, smaller limit): the code arrives in the delivery report.
    @Test(arguments: [true, false])
    func brokerRejectionArrivesAsMessageSizeTooLarge(idempotent: Bool) async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("size-broker")
        try cluster.createTopic(topic, partitions: 1)
        var config = TestSupport.producerConfig(cluster)
        config.enableIdempotence = idempotent
        if !idempotent { config.acks = .leader }
        let producer = try KafkaProducer(configuration: config, logger: TestSupport.logger)
        _ = try await producer.send(topic: topic, key: "k", value: Array("fits".utf8))  // connected, producer id known
        cluster.pushRequestErrors(apiKey: .produce, errors: [.messageSizeTooLarge])
        let error = await #expect(throws: KafkaError.self) {
            _ = try await producer.send(topic: topic, key: "k", value: Array("rejected".utf8))
        }
        #expect(error?.code == .messageSizeTooLarge, "\(String(describing: error))")
        await producer.shutdown()
    }
}
