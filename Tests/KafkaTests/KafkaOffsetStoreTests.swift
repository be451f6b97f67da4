import Foundation
import PushTestSupport
import ServiceCore
import Synchronization
import Testing

@testable import Kafka

/// The stored-offsets commit scheme (`OffsetCommit.storedOffsets`): `storeOffsets`, librdkafka's
/// auto-commit, the commit in `close()` and during a revocation hand-off.
@Suite(.timeLimit(.minutes(1)))
struct KafkaOffsetStoreTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    /// Produces `count` records per partition (values `<prefix>-<partition>-<i>`); returns the keys used.
    private func fill(_ cluster: KafkaMockCluster, topic: String, partitions: Int, count: Int, prefix: String = "r") async throws -> Int {
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        let (keys, sent) = try await TestSupport.keysByPartition(producer, topic: topic, partitions: partitions)
        for (partition, key) in keys {
            for index in 0..<count { _ = try await producer.send(topic: topic, key: key, value: Array("\(prefix)-\(partition)-\(index)".utf8)) }
        }
        await producer.shutdown()
        return sent + partitions * count
    }

    @Test func configurationDefaultsAndProperties() {
        var config = KafkaConsumerConfiguration(bootstrapServers: ["b:9092"], groupID: "g", topics: ["t"])
        #expect(config.offsetCommit == .storedOffsets(autoCommitInterval: .milliseconds(200)))
        #expect(config.rebalanceProtocol == .recommended)
        #expect(KafkaConsumerConfiguration.RebalanceProtocol.recommended == (KafkaLibrary.hasCooperativeStickyFix ? .cooperative : .eager))
        #expect(config.revocationTimeout == .seconds(10))
        #expect(config.groupInstanceID == nil)
        var properties = Dictionary(config.properties, uniquingKeysWith: { $1 })
        #expect(properties["enable.auto.commit"] == "true")
        #expect(properties["enable.auto.offset.store"] == "false")
        #expect(properties["auto.commit.interval.ms"] == "200")
        #expect(properties["partition.assignment.strategy"] == (KafkaLibrary.hasCooperativeStickyFix ? "cooperative-sticky" : "range,roundrobin"))
        #expect(properties["group.instance.id"] == nil)

        config.offsetCommit = .explicit
        config.groupInstanceID = "dispatcher-1"
        properties = Dictionary(config.properties, uniquingKeysWith: { $1 })
        #expect(properties["enable.auto.commit"] == "false")
        #expect(properties["enable.auto.offset.store"] == "false")
        #expect(properties["auto.commit.interval.ms"] == nil)
        #expect(properties["group.instance.id"] == "dispatcher-1")
    }

    /// A stored offset reaches the group coordinator through auto-commit alone, within about a second
    /// (auto.commit.interval.ms = 200).
    @Test func storedOffsetIsCommittedWithoutExplicitCommit() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("store")
        try cluster.createTopic(topic, partitions: 2)
        let total = try await fill(cluster, topic: topic, partitions: 2, count: 5)
        let consumer = try KafkaConsumer(
            configuration: TestSupport.consumerConfig(cluster, group: TestSupport.unique("g"), topics: [topic]), logger: TestSupport.logger)
        let messages = try await TestSupport.collect(total, from: consumer)
        let partition = KafkaTopicPartition(topic: topic, partition: 0)
        let last = try #require(messages.filter { $0.topicPartition == partition }.max { $0.offset < $1.offset })
        #expect(try await consumer.committedOffsets(for: [partition])[partition] == nil)

        let storedAt = ContinuousClock.now
        let results = consumer.storeOffsets([partition: last.offset.next])
        #expect(results[partition]?.isStored == true, "\(results)")
        try await eventually("stored offset committed", timeout: .seconds(3)) {
            try await consumer.committedOffsets(for: [partition])[partition] == last.offset.next
        }
        let elapsed = ContinuousClock.now - storedAt
        #expect(elapsed < .milliseconds(1500), "committed only after \(elapsed)")
        await consumer.close()
    }

    /// librdkafka refuses offsets of partitions this member does not own (`_STATE`): the result is
    /// `.notAssigned`, nothing is thrown, and the owner's position is not touched. After `close()`,
    /// storing fails with `shutdown`.
    @Test func storingForAPartitionNotAssignedReturnsNotAssigned() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("unassigned")
        try cluster.createTopic(topic, partitions: 4)
        let config = TestSupport.consumerConfig(cluster, group: TestSupport.unique("g"), topics: [topic])
        let first = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        let firstLog = KafkaConsumerGroupTests.EventLog(first)
        try await eventually("first member owns all 4 partitions") { first.assignment.count == 4 }
        let second = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        let secondLog = KafkaConsumerGroupTests.EventLog(second)
        try await eventually("both members own partitions") {
            let a = Set(first.assignment), b = Set(second.assignment)
            return !a.isEmpty && !b.isEmpty && a.isDisjoint(with: b) && a.union(b).count == 4
        }
        // Partitions the first member gave up in the rebalance, and one it kept.
        let moved = second.assignment
        let kept = try #require(first.assignment.first)
        var offsets = Dictionary(uniqueKeysWithValues: moved.map { ($0, KafkaOffset(5)) })
        offsets[kept] = 1
        offsets[KafkaTopicPartition(topic: topic, partition: 99)] = 1  // no such partition
        let results = first.storeOffsets(offsets)
        for partition in moved {
            guard case .notAssigned = results[partition] else {
                Issue.record("\(partition): \(String(describing: results[partition]))")
                continue
            }
        }
        guard case .notAssigned = results[KafkaTopicPartition(topic: topic, partition: 99)] else {
            Issue.record("unknown partition: \(results)")
            return
        }
        #expect(results[kept]?.isStored == true, "\(results)")

        await first.close()
        let after = first.storeOffsets([kept: 2])
        guard case .failed(let error) = after[kept] else {
            Issue.record("after close: \(after)")
            return
        }
        #expect(error.code == .shutdown)
        await second.close()
        await firstLog.task.value
        await secondLog.task.value
    }

    /// An offset stored right before `close()` is the group's committed offset afterwards, although the
    /// auto-commit interval (60 s) never elapsed: `rd_kafka_consumer_close` commits it.
    @Test func closeCommitsStoredOffsets() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("close")
        try cluster.createTopic(topic, partitions: 1)
        let total = try await fill(cluster, topic: topic, partitions: 1, count: 9)
        let group = TestSupport.unique("g")
        var config = TestSupport.consumerConfig(cluster, group: group, topics: [topic])
        config.offsetCommit = .storedOffsets(autoCommitInterval: .seconds(60))
        let consumer = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        let messages = try await TestSupport.collect(total, from: consumer)
        let partition = KafkaTopicPartition(topic: topic, partition: 0)
        let stored = messages[6].offset.next
        #expect(consumer.storeOffsets([partition: stored])[partition]?.isStored == true)
        #expect(try await consumer.committedOffsets(for: [partition])[partition] == nil, "committed before close")
        await consumer.close()

        let fresh = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        #expect(try await fresh.committedOffsets(for: [partition])[partition] == stored)
        // And the group resumes there.
        let resumed = try await TestSupport.collect(1, from: fresh)
        #expect(resumed.first?.offset == stored)
        await fresh.close()
    }

    /// The first member stores an offset for each partition it is losing INSIDE the revocation
    /// hand-off (before `finish()`); librdkafka commits it with the unassignment, and the second member
    /// starts reading those partitions exactly there.
    @Test func offsetStoredDuringRevocationIsHonouredByTheNextOwner() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("handoff")
        try cluster.createTopic(topic, partitions: 2)
        _ = try await fill(cluster, topic: topic, partitions: 2, count: 10)
        var config = TestSupport.consumerConfig(cluster, group: TestSupport.unique("g"), topics: [topic])
        config.offsetCommit = .storedOffsets(autoCommitInterval: .seconds(60))  // only the hand-off commits
        config.rebalanceProtocol = .cooperative  // the hand-off under test is the cooperative one
        let first = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        let handedOver = Mutex<[KafkaTopicPartition: KafkaStoreResult]>([:])
        let firstLog = KafkaConsumerGroupTests.EventLog(first) { revocation in
            guard !revocation.isLost, !revocation.partitions.isEmpty else { return }
            // The warm-up records come first in each partition: offset 3 is past them in both.
            let results = first.storeOffsets(Dictionary(uniqueKeysWithValues: revocation.partitions.map { ($0, KafkaOffset(3)) }))
            handedOver.withLock { $0.merge(results) { $1 } }
        }
        try await eventually("first member owns both partitions") { first.assignment.count == 2 }
        let second = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        try await eventually("second member owns a partition") { !second.assignment.isEmpty }
        let moved = try #require(second.assignment.first)
        let results = handedOver.withLock { $0 }
        #expect(results[moved]?.isStored == true, "store during the revocation: \(results)")

        let firstRead = try await TestSupport.collect(1, from: second)
        #expect(firstRead.first?.topicPartition == moved)
        // librdkafka sends the commit of a cooperative revocation without waiting for it before the
        // member rejoins, so the next owner's OffsetFetch can overtake it and start at the earlier
        // committed offset (seen in about 1 run of 10 with the whole target running; the engine then
        // handles those records again, idempotently). Recorded as a known intermittent issue, so a
        // run where the stored offset is not honoured is still reported.
        withKnownIssue("the cooperative revocation's commit can reach the broker after the next owner's OffsetFetch", isIntermittent: true) {
            #expect(firstRead.first?.offset == 3, "the next owner started at \(String(describing: firstRead.first?.offset))")
        }
        await second.close()
        await first.close()
        await firstLog.task.value
    }

    /// Static membership (KIP-345): a member with `group.instance.id` joins and consumes. librdkafka's
    /// mock broker accepts the id on JoinGroup; it does not implement the rejoin-without-rebalance
    /// semantics, which are therefore not tested here.
    @Test func staticMemberJoinsAndConsumes() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("static")
        try cluster.createTopic(topic, partitions: 2)
        let total = try await fill(cluster, topic: topic, partitions: 2, count: 3)
        var config = TestSupport.consumerConfig(cluster, group: TestSupport.unique("g"), topics: [topic])
        config.groupInstanceID = "dispatcher-static-1"
        let consumer = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        let messages = try await TestSupport.collect(total, from: consumer)
        #expect(messages.count == total)
        #expect(consumer.assignment.count == 2)
        let partition = KafkaTopicPartition(topic: topic, partition: 1)
        #expect(consumer.storeOffsets([partition: 2])[partition]?.isStored == true)
        try await eventually("static member's offset committed", timeout: .seconds(5)) {
            try await consumer.committedOffsets(for: [partition])[partition] == 2
        }
        await consumer.close()
    }
}
