import Foundation
import PushTestSupport
import ServiceCore
import Testing

@testable import Kafka

/// Records the client cannot read (docs/kafka-consumer.md "Records the client cannot read"): a record
/// batch that librdkafka cannot decompress is reported as `_BAD_COMPRESSION` at its first offset and
/// fetched again for ever. With `unreadableRecordRetries` the consumer hands the offset out as an
/// unreadable record and seeks past it.
@Suite(.timeLimit(.minutes(1)))
struct KafkaUnreadableRecordTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    /// The consumer's decompression limit in these tests (`receive.message.max.bytes`): a zstd record
    /// of 3 MB of zeros (about 100 bytes compressed) expands past it, which librdkafka 2.0.2 reports
    /// as `_BAD_COMPRESSION` (rdkafka_zstd.c grows its buffer up to this limit, then gives up). With
    /// the default limit (100 MB) a zstd record of about 94 MB fails the same way.
    static let receiveLimit = 1_100_000

    /// Writes "before" (its own batch), two zstd batches of one 3 MB record each, then "after" (its own
    /// batch) to partition 0 of a new one-partition topic.
    static func fill(_ cluster: KafkaMockCluster) async throws -> String {
        let topic = TestSupport.unique("unreadable")
        try cluster.createTopic(topic, partitions: 1)
        let plain = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        var zstdConfiguration = TestSupport.producerConfig(cluster)
        zstdConfiguration.maxMessageBytes = 10_000_000
        zstdConfiguration.additionalProperties["compression.codec"] = "zstd"
        let zstd = try KafkaProducer(configuration: zstdConfiguration, logger: TestSupport.logger)
        #expect(try await plain.send(topic: topic, key: "k", value: Array("before".utf8)).offset == 0)
        let huge = [UInt8](repeating: 0, count: 3_000_000)
        #expect(try await zstd.send(topic: topic, key: "k", value: huge).offset == 1)
        #expect(try await zstd.send(topic: topic, key: "k", value: huge).offset == 2)
        #expect(try await plain.send(topic: topic, key: "k", value: Array("after".utf8)).offset == 3)
        await zstd.shutdown()
        await plain.shutdown()
        return topic
    }

    static func consumerConfig(_ cluster: KafkaMockCluster, topic: String, retries: Int?) -> KafkaConsumerConfiguration {
        var config = TestSupport.consumerConfig(cluster, group: TestSupport.unique("g"), topics: [topic])
        config.unreadableRecordRetries = retries
        config.fetchMaxWait = .milliseconds(10)
        config.additionalProperties["receive.message.max.bytes"] = String(receiveLimit)
        config.additionalProperties["fetch.max.bytes"] = "1000000"
        config.additionalProperties["max.partition.fetch.bytes"] = "1000000"
        // librdkafka waits this long before fetching a partition again after an error.
        config.additionalProperties["fetch.error.backoff.ms"] = "50"
        return config
    }

    @Test func unreadableBatchesAreHandedOutByOffsetAndTheNextRecordIsDelivered() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = try await Self.fill(cluster)
        var config = Self.consumerConfig(cluster, topic: topic, retries: 3)
        config.partitionStallThreshold = .milliseconds(1)
        let consumer = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        let messages = try await TestSupport.collect(4, from: consumer)
        #expect(messages.map(\.offset) == [0, 1, 2, 3])
        #expect(messages.map(\.value.utf8String) == ["before", "", "", "after"])
        #expect(messages.map { $0.unreadableError != nil } == [false, true, true, false])
        #expect(messages[1].unreadableError?.contains("_BAD_COMPRESSION") == true, "\(messages[1].unreadableError ?? "")")
        #expect(messages[1].key == nil && messages[1].headers.isEmpty)
        // The record after them was delivered: the partition made progress again.
        #expect(consumer.stalledPartitions.isEmpty)
        // The application commits past the skipped offsets like past any record.
        let partition = KafkaTopicPartition(topic: topic, partition: 0)
        #expect(consumer.storeOffsets([partition: messages[3].offset.next])[partition]?.isStored == true)
        await consumer.close()
    }

    /// Without skipping (the library's default), the partition stays at the unreadable batch for
    /// ever (what the dispatcher did before): the record after it never arrives, and the partition is
    /// reported stalled once the threshold passed.
    @Test func withoutSkippingThePartitionStallsAndIsReported() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = try await Self.fill(cluster)
        var config = Self.consumerConfig(cluster, topic: topic, retries: nil)
        config.partitionStallThreshold = .milliseconds(300)
        let consumer = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        let first = try await TestSupport.collect(1, from: consumer)
        #expect(first.map(\.value.utf8String) == ["before"])
        let partition = KafkaTopicPartition(topic: topic, partition: 0)
        try await eventually("partition reported stalled", timeout: .seconds(10)) {
            consumer.stalledPartitions[partition]?.position == 1
        }
        #expect(consumer.stalledPartitions[partition]?.lastError.contains("Decompression") == true)
        #expect(consumer.bufferedCount == 0)
        await consumer.close()
    }
}

/// `maxValueBytes`: a value past it is handed out as a prefix with its size and digest, the rest never copied.
@Suite(.timeLimit(.minutes(1)))
struct KafkaOversizedValueTests {
    @Test func aValuePastTheLimitArrivesEmptyWithItsSize() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("oversized")
        try cluster.createTopic(topic, partitions: 1)
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        _ = try await producer.send(topic: topic, key: "k", value: [UInt8](repeating: 7, count: 1_001))
        _ = try await producer.send(topic: topic, key: "k", value: [UInt8](repeating: 7, count: 1_000))
        await producer.shutdown()
        var config = TestSupport.consumerConfig(cluster, group: TestSupport.unique("g"), topics: [topic])
        config.maxValueBytes = 1_000
        let consumer = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        let messages = try await TestSupport.collect(2, from: consumer)
        #expect(messages.map(\.value.count) == [1_000, 1_000])
        #expect(messages.map(\.oversizedValueBytes) == [1_001, nil])
        #expect(messages[0].oversizedValueSHA256 == Digest.sha256([UInt8](repeating: 7, count: 1_001)))
        #expect(messages[1].oversizedValueSHA256 == nil)
        #expect(messages[0].key == Array("k".utf8))
        await consumer.close()
    }
}

/// `UnreadableRecordSkipper` without I/O: when a position is skipped, and stalls.
@Suite struct UnreadableRecordSkipperTests {
    let partition = KafkaTopicPartition(topic: "t", partition: 0)

    @Test func aPositionIsSkippedAfterTheRetriesThenTheSameBatchOffsetByOffset() {
        var skipper = UnreadableRecordSkipper(retries: 3)
        #expect(skipper.error(.badCompression, message: "x", partition: partition, offset: 10, now: 0) == .wait)
        #expect(skipper.error(.badCompression, message: "x", partition: partition, offset: 10, now: 1) == .wait)
        #expect(skipper.error(.badCompression, message: "x", partition: partition, offset: 10, now: 2) == .skip(10))
        // The seek to 11 fetched the same batch (first offset 10): 11 is lost with it, at once.
        #expect(skipper.error(.badCompression, message: "x", partition: partition, offset: 10, now: 3) == .skip(11))
        #expect(skipper.error(.badCompression, message: "x", partition: partition, offset: 10, now: 4) == .skip(12))
        // A further batch, starting at the position: retried again before it is skipped.
        #expect(skipper.error(.badMessage, message: "crc", partition: partition, offset: 13, now: 5) == .wait)
        #expect(skipper.error(.badMessage, message: "crc", partition: partition, offset: 13, now: 6) == .wait)
        #expect(skipper.error(.badMessage, message: "crc", partition: partition, offset: 13, now: 7) == .skip(13))
        #expect(skipper.stuck[partition]?.since == 0)
        skipper.delivered(partition)
        #expect(skipper.stuck.isEmpty)
    }

    @Test func errorsNotTiedToARecordNeverSkip() {
        var skipper = UnreadableRecordSkipper(retries: 1)
        #expect(skipper.error(.transport, message: "down", partition: partition, offset: 10, now: 0) == .wait)
        #expect(skipper.error(.badCompression, message: "x", partition: partition, offset: -1001, now: 0) == .wait)
        #expect(skipper.stuck.isEmpty)
        #expect(skipper.error(.messageSizeTooLarge, message: "big", partition: partition, offset: 7, now: 0) == .skip(7))
        // Retries below 1 count as 1; the last offset is never passed.
        var low = UnreadableRecordSkipper(retries: Int.min)
        #expect(low.retries == 1)
        #expect(low.error(.corruptMessage, message: "x", partition: partition, offset: KafkaOffset(rawValue: .max), now: 0) == .wait)
    }

    @Test func stalledAfterTheThresholdUntilDeliveredOrForgotten() {
        var skipper = UnreadableRecordSkipper(retries: .max)
        let other = KafkaTopicPartition(topic: "t", partition: 1)
        _ = skipper.error(.badCompression, message: "x", partition: partition, offset: 5, now: 1_000_000_000)
        _ = skipper.error(.badCompression, message: "x", partition: other, offset: 5, now: 2_000_000_000)
        #expect(skipper.stalled(now: 1_500_000_000, threshold: .seconds(1)).isEmpty)
        #expect(Set(skipper.stalled(now: 2_000_000_000, threshold: .seconds(1)).keys) == [partition])
        #expect(Set(skipper.stalled(now: 3_000_000_000, threshold: .seconds(1)).keys) == [partition, other])
        #expect(skipper.stalled(now: 3_000_000_000, threshold: .seconds(Int64.max)).isEmpty)
        #expect(skipper.stalled(now: 0, threshold: .seconds(-1)).isEmpty)
        skipper.delivered(partition)
        skipper.forget([other])
        #expect(skipper.stalled(now: .max, threshold: .zero).isEmpty)
    }
}
