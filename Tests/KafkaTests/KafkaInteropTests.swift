import Foundation
import ServiceCore
import Testing

@testable import Kafka

/// Our producer and consumer against peers we did not write: kcat (system librdkafka 2.0.2) and
/// Python confluent-kafka (its own bundled librdkafka), over the in-process mock broker.
@Suite(.timeLimit(.minutes(4)))
struct KafkaInteropTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    /// Produces 24 records with keys `k0…k5`, values `v<i>` and headers `origin=swift`, `seq=<i>`.
    private func produce(_ cluster: KafkaMockCluster, topic: String) async throws -> [KafkaDeliveryReport] {
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        var reports: [KafkaDeliveryReport] = []
        for index in 0..<24 {
            reports.append(try await producer.send(
                topic: topic, key: "k\(index % 6)", value: Array("v\(index)".utf8),
                headers: [KafkaHeader(name: "origin", value: "swift"), KafkaHeader(name: "seq", value: "\(index)")]))
        }
        await producer.shutdown()
        return reports
    }

    @Test func kcatReadsWhatWeProduce() async throws {
        let kcat = try TestSupport.tool("kcat")
        let cluster = try KafkaMockCluster(brokers: 3, logger: TestSupport.logger)
        let topic = TestSupport.unique("to-kcat")
        try cluster.createTopic(topic, partitions: 4)
        let reports = try await produce(cluster, topic: topic)

        let result = try await TestSupport.run(
            kcat, ["-C", "-b", cluster.bootstrapServers, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k %s %h %p %o\\n"])
        #expect(result.status == 0, "kcat failed: \(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        #expect(lines.count == 24)
        var partitionOfKey: [String: String] = [:]
        for fields in lines {
            try #require(fields.count == 5, "unexpected kcat line \(fields)")
            let (key, value, headers, partition, offset) = (fields[0], fields[1], fields[2], fields[3], fields[4])
            let index = Int(value.dropFirst())!
            #expect(key == "k\(index % 6)")
            #expect(headers == "origin=swift,seq=\(index)")
            #expect(partition == String(reports[index].partition.rawValue))
            #expect(offset == String(reports[index].offset.rawValue))
            if let known = partitionOfKey[key] { #expect(known == partition, "key \(key) on two partitions") }
            partitionOfKey[key] = partition
        }
    }

    @Test func confluentKafkaReadsWhatWeProduce() async throws {
        let cluster = try KafkaMockCluster(brokers: 3, logger: TestSupport.logger)
        let topic = TestSupport.unique("to-python")
        try cluster.createTopic(topic, partitions: 4)
        let reports = try await produce(cluster, topic: topic)

        let result = try await TestSupport.python("consume.py", [cluster.bootstrapServers, topic, "24", TestSupport.unique("py")])
        #expect(result.status == 0, "consume.py failed: \(result.stderr)")
        let records = result.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        #expect(records.count == 24)
        for record in records {
            let value = try #require(record["value"] as? String)
            let index = Int(value.dropFirst())!
            #expect(record["key"] as? String == "k\(index % 6)")
            #expect(record["headers"] as? [[String]] == [["origin", "swift"], ["seq", "\(index)"]])
            #expect(record["partition"] as? Int == Int(reports[index].partition.rawValue))
            #expect(record["offset"] as? Int == Int(reports[index].offset.rawValue))
        }
    }

    @Test func weReadWhatKcatProduces() async throws {
        let kcat = try TestSupport.tool("kcat")
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("from-kcat")
        try cluster.createTopic(topic, partitions: 2)
        let input = (0..<10).map { "key\($0 % 3):kcat-\($0)" }.joined(separator: "\n") + "\n"
        let result = try await TestSupport.run(
            kcat, ["-P", "-b", cluster.bootstrapServers, "-t", topic, "-K", ":", "-H", "origin=kcat", "-H", "second=2"],
            input: Data(input.utf8))
        #expect(result.status == 0, "kcat failed: \(result.stderr)")

        let consumer = try KafkaConsumer(
            configuration: TestSupport.consumerConfig(cluster, group: TestSupport.unique("g"), topics: [topic]), logger: TestSupport.logger)
        let messages = try await TestSupport.collect(10, from: consumer)
        await consumer.close()
        #expect(Set(messages.map { $0.value.utf8String }) == Set((0..<10).map { "kcat-\($0)" }))
        for message in messages {
            let index = Int(message.value.utf8String.dropFirst("kcat-".count))!
            #expect(message.key?.utf8String == "key\(index % 3)")
            #expect(message.headers == [KafkaHeader(name: "origin", value: "kcat"), KafkaHeader(name: "second", value: "2")])
        }
    }

    /// confluent-kafka produces; our consumer commits part of what it read and closes; a second member
    /// of the same group resumes exactly after the committed offsets: the uncommitted records come
    /// again, the committed ones never.
    @Test func committedOffsetsSurviveAndUncommittedRecordsAreRedelivered() async throws {
        let cluster = try KafkaMockCluster(brokers: 3, logger: TestSupport.logger)
        let topic = TestSupport.unique("commit")
        try cluster.createTopic(topic, partitions: 3)
        let produced = try await TestSupport.python("produce.py", [cluster.bootstrapServers, topic, "30"])
        #expect(produced.status == 0, "produce.py failed: \(produced.stderr)")
        let group = TestSupport.unique("group")
        var config = TestSupport.consumerConfig(cluster, group: group, topics: [topic])
        config.offsetCommit = .explicit
        // This test is about commits, not the rebalance protocol: the eager protocol hands the
        // partitions to the second member in one round (the cooperative one takes two, each waiting
        // for the test broker's join window, which made this test slow enough to time out under load).
        config.rebalanceProtocol = .eager

        let first = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        // Group joins on the test broker take seconds each; on a loaded 2-core machine many more.
        let all = try await TestSupport.collect(30, from: first, timeout: .seconds(90))
        #expect(Set(all.map { $0.value.utf8String }) == Set((0..<30).map { "py-\($0)" }))
        #expect(all.allSatisfy { $0.header("origin")?.utf8String == "python" })
        // "Process" the first half of every partition and commit the next offset to read.
        var processed: Set<String> = []
        for (partition, records) in Dictionary(grouping: all, by: \.partition) {
            let done = records.sorted { $0.offset < $1.offset }.prefix(records.count / 2)
            processed.formUnion(done.map { $0.value.utf8String })
            if let last = done.last {
                try await first.commit(topic: topic, partition: partition, offset: last.offset.next)
            }
        }
        await first.close()

        let second = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        let expected = Set((0..<30).map { "py-\($0)" }).subtracting(processed)
        let again = try await TestSupport.collect(expected.count, from: second, timeout: .seconds(90))
        #expect(Set(again.map { $0.value.utf8String }) == expected)
        // Nothing else arrives: committed records are not redelivered.
        let extra = try? await TestSupport.collect(1, from: second, timeout: .seconds(2))
        #expect(extra == nil)
        await second.close()
    }
}
