import Foundation
import ServiceCore
import Testing

@testable import Kafka

/// Our producer and our consumer against the in-process mock broker.
@Suite(.timeLimit(.minutes(1)))
struct KafkaRoundTripTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    @Test func producedRecordsAreConsumedWithKeysHeadersAndOrder() async throws {
        let cluster = try KafkaMockCluster(brokers: 3, logger: TestSupport.logger)
        let topic = TestSupport.unique("roundtrip")
        try cluster.createTopic(topic, partitions: 3)
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        var reports: [KafkaDeliveryReport] = []
        for index in 0..<30 {
            let report = try await producer.send(
                topic: topic, key: "key-\(index % 5)", value: Array("value-\(index)".utf8),
                headers: [KafkaHeader(name: "content-type", value: "text/plain"), KafkaHeader(name: "seq", value: "\(index)"),
                          KafkaHeader(name: "null", value: nil)])
            reports.append(report)
        }
        await producer.shutdown()
        // Same key, same partition; offsets increase per partition.
        for index in 0..<30 { #expect(reports[index].partition == reports[index % 5].partition) }

        let consumer = try KafkaConsumer(
            configuration: TestSupport.consumerConfig(cluster, group: TestSupport.unique("g"), topics: [topic]), logger: TestSupport.logger)
        let messages = try await TestSupport.collect(30, from: consumer)
        await consumer.close()
        for message in messages {
            let index = Int(message.value.utf8String.dropFirst("value-".count))!
            #expect(message.key?.utf8String == "key-\(index % 5)")
            #expect(message.headers.map(\.name) == ["content-type", "seq", "null"])
            #expect(message.headers[1].stringValue == "\(index)")
            #expect(message.headers[2].value == nil)
            #expect(message.partition == reports[index].partition)
            #expect(message.offset == reports[index].offset)
            #expect(message.timestamp.map { abs($0 - SystemWallClock().nowMilliseconds()) < 60_000 } == true)
        }
        // Per-key order is send order.
        for key in 0..<5 {
            let values = messages.filter { $0.key?.utf8String == "key-\(key)" }.map { Int($0.value.utf8String.dropFirst(6))! }
            #expect(values == values.sorted())
            #expect(values.count == 6)
        }
    }
}
