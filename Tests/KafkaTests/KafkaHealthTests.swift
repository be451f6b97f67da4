import Foundation
import PushTestSupport
import ServiceCore
import Synchronization
import Testing

@testable import Kafka

/// What Kafka clients report for /healthz, /readyz and metrics: statistics from librdkafka's
/// `stats_cb` (against the real built-in broker), the poll thread's heartbeat and its test hook.
@Suite(.serialized) struct KafkaHealthTests {
    @Test func parsesBrokerStatesRoundTripsAndConsumerLagFromAStatisticsDocument() throws {
        // Shape of librdkafka's statistics (STATISTICS.md), trimmed to the fields read.
        let json = """
            {"name":"c#consumer-1","type":"consumer","brokers":{
              "127.0.0.1:9092/bootstrap":{"nodeid":-1,"state":"UP"},
              "127.0.0.1:9092/1":{"nodeid":1,"state":"UP","wakeups":5120,"rtt":{"min":80,"max":61000,"avg":900,"cnt":412,"p50":700,"p99":31000}},
              "127.0.0.1:9093/2":{"nodeid":2,"state":"DOWN","rtt":{"min":0,"max":0,"avg":0,"cnt":0,"p50":0,"p99":0}},
              ":0/internal":{"nodeid":-1,"state":"INIT"}},
             "topics":{"push.send-requests.v1":{"topic":"push.send-requests.v1","partitions":{
               "0":{"partition":0,"consumer_lag":42},
               "1":{"partition":1,"consumer_lag":-1},
               "-1":{"partition":-1,"consumer_lag":-1}}}}}
            """
        let statistics = try #require(KafkaStatistics(json: Array(json.utf8)))
        #expect(statistics.brokersKnown == 2)
        #expect(statistics.brokersUp == 1)
        #expect(statistics.consumerLag == [KafkaTopicPartition(topic: "push.send-requests.v1", partition: KafkaPartition(rawValue: 0)): 42])
        // A broker that answered nothing in the window has no round trip to report.
        #expect(statistics.roundTripP99Microseconds == [1: 31_000])
        #expect(statistics.wakeups == [1: 5_120])
        #expect(KafkaStatistics(json: Array("not json".utf8)) == nil)
    }

    @Test func consumerLagFollowsCommitsThroughTheStatisticsCallback() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("lag")
        try cluster.createTopic(topic, partitions: 1)
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        for index in 0..<10 { _ = try await producer.send(topic: topic, key: "k", value: Array("v\(index)".utf8)) }
        var configuration = TestSupport.consumerConfig(cluster, group: TestSupport.unique("g"), topics: [topic])
        configuration.offsetCommit = .explicit
        configuration.statisticsInterval = .milliseconds(200)
        let consumer = try KafkaConsumer(configuration: configuration, logger: TestSupport.logger)
        _ = try await TestSupport.collect(10, from: consumer)
        #expect(consumer.health.joined)
        #expect(consumer.health.assignedPartitions == 1)
        let partition = KafkaTopicPartition(topic: topic, partition: KafkaPartition(rawValue: 0))
        try await consumer.commit(topic: topic, partition: partition.partition, offset: KafkaOffset(rawValue: 4))
        try await eventually("a lag of 6 after committing offset 4") { consumer.health.statistics?.consumerLag[partition] == 6 }
        try await consumer.commit(topic: topic, partition: partition.partition, offset: KafkaOffset(rawValue: 10))
        try await eventually("a lag of 0 after committing everything") { consumer.health.statistics?.consumerLag[partition] == 0 }
        #expect((consumer.health.statistics?.brokersUp ?? 0) >= 1)  // the group coordinator has a connection of its own
        #expect(consumer.health.readinessInput.joined)
        await consumer.close()
        await producer.shutdown()
    }

    @Test func aWedgedPollThreadStopsItsHeartbeatAndRecovers() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("wedge")
        try cluster.createTopic(topic, partitions: 1)
        let consumer = try KafkaConsumer(
            configuration: TestSupport.consumerConfig(cluster, group: TestSupport.unique("g"), topics: [topic]), logger: TestSupport.logger)
        try await eventually("the consumer joined") { consumer.health.joined }
        #expect(consumer.health.lastPollAge < .seconds(1))
        #expect(Heartbeats.shared.snapshot().contains { $0.name == "kafka-consumer-poll" })
        consumer.wedgePollThreadForTesting(for: .seconds(2))
        try await eventually("the poll heartbeat grew old") { consumer.health.lastPollAge > .milliseconds(1500) }
        let liveness = LivenessPolicy(maxBeatAge: .seconds(1))
        #expect(!liveness.evaluate(Heartbeats.shared.snapshot()).isPassing)
        #expect(!ReadinessPolicy(maxPollAge: .seconds(1)).evaluate(.init(consumer: consumer.health.readinessInput)).isPassing)
        try await eventually("the poll thread came round again") { consumer.health.lastPollAge < .milliseconds(500) }
        await consumer.close()
        // A consumer closed on purpose is no longer watched. Its own heartbeat, by identity: other
        // suites' consumers running at the same time register the same name.
        try await eventually("the heartbeat was removed") { !Heartbeats.shared.contains(consumer.pollHeartbeat) }
    }

    /// A one-broker cluster with a one-partition topic, and a producer reporting statistics every
    /// 200 ms that has sent it one record.
    private func producerWithStatistics(_ topicPrefix: String) async throws -> (KafkaMockCluster, KafkaProducer, String) {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique(topicPrefix)
        try cluster.createTopic(topic, partitions: 1)
        var configuration = TestSupport.producerConfig(cluster)
        configuration.statisticsInterval = .milliseconds(200)
        let producer = try KafkaProducer(configuration: configuration, logger: TestSupport.logger)
        _ = try await producer.send(topic: topic, key: "k", value: Array("v".utf8))
        return (cluster, producer, topic)
    }

    @Test func producerStatisticsShowBrokersGoingDownAndComingBack() async throws {
        let (cluster, producer, _) = try await producerWithStatistics("down")
        let policy = ReadinessPolicy()
        try await eventually("a broker up in the statistics") { producer.health.statistics?.brokersUp == 1 }
        #expect(policy.evaluate(.init(producer: producer.health.readinessInput)).isPassing)
        try cluster.setBrokerDown(1)
        try await eventually("no broker up, not ready") {
            producer.health.statistics?.brokersUp == 0 && !policy.evaluate(.init(producer: producer.health.readinessInput)).isPassing
        }
        try cluster.setBrokerUp(1)
        try await eventually("ready again") { policy.evaluate(.init(producer: producer.health.readinessInput)).isPassing }
        await producer.shutdown()
    }

    @Test func producerStatisticsReportTheBrokersRoundTrip() async throws {
        let (cluster, producer, topic) = try await producerWithStatistics("rtt")
        try await eventually("a fast round trip while the broker answers at once") {
            (producer.health.statistics?.roundTripP99Microseconds[1] ?? .max) < 50_000
        }
        try cluster.setBrokerRoundTripTime(1, milliseconds: 120)
        // Sends keep requests going through the statistics windows (a window without an answer
        // reports nothing for the broker).
        try await eventually("the injected 120 ms in the 99th percentile") {
            _ = try await producer.send(topic: topic, key: "k", value: Array("v".utf8))
            return (producer.health.statistics?.roundTripP99Microseconds[1] ?? 0) >= 100_000
        }
        try cluster.setBrokerRoundTripTime(1, milliseconds: 0)
        await producer.shutdown()
    }
    /// librdkafka's idempotent producer counts its in-flight limit of 5 in records: once a batch of
    /// 5 or more is in flight, the partition's next batch waits for the answer, and the broker thread
    /// polls without sleeping from the end of that batch's `linger.ms` until the answer. Two producers
    /// send the same steady stream (2 records per millisecond) through a broker answering in 8 ms:
    /// the one lingering 5 ms spins, the one lingering 12 ms (at or above the round trip, as the
    /// dispatcher's 10 ms default is on a healthy cluster) sleeps (docs/capacity.md "Produce round trips").
    @Test func aLingerAtOrAboveTheRoundTripKeepsTheProducersBrokerThreadAsleep() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("spin")
        try cluster.createTopic(topic, partitions: 1)
        func producer(lingering linger: Duration) throws -> KafkaProducer {
            var configuration = TestSupport.producerConfig(cluster)
            configuration.linger = linger
            configuration.statisticsInterval = .milliseconds(200)
            return try KafkaProducer(configuration: configuration, logger: TestSupport.logger)
        }
        let short = try producer(lingering: .milliseconds(5))
        let long = try producer(lingering: .milliseconds(12))
        for client in [short, long] { _ = try await client.send(topic: topic, key: "k", value: Array("first".utf8)) }
        try cluster.setBrokerRoundTripTime(1, milliseconds: 8)
        let acknowledged = Atomic<Int>(0)
        let rounds = 1_500
        for _ in 0..<rounds {
            for client in [short, long] {
                for _ in 0..<2 {
                    client.send(topic: topic, key: Array("k".utf8), value: Array("steady".utf8)) { _ in acknowledged.add(1, ordering: .relaxed) }
                }
            }
            try await Task.sleep(for: .milliseconds(1))
        }
        // Read at the same moment: both counters cover the start and at least the stream's first second.
        let spinning = short.health.statistics?.wakeups[1] ?? 0
        let sleeping = long.health.statistics?.wakeups[1] ?? 0
        #expect(sleeping > 0)
        #expect(sleeping * 5 < spinning, "broker-thread wake-ups: \(spinning) lingering 5 ms, \(sleeping) lingering 12 ms")
        try await eventually("every record acknowledged") { acknowledged.load(ordering: .relaxed) == rounds * 4 }
        try cluster.setBrokerRoundTripTime(1, milliseconds: 0)
        await short.shutdown()
        await long.shutdown()
    }

    /// `linger.ms` as librdkafka runs it: the field, unless an additional property overrides it under
    /// either of librdkafka's names (the last set wins); a value that is not a number has none.
    @Test func theEffectiveLingerIsTheLastLingerPropertyApplied() {
        var configuration = KafkaProducerConfiguration(bootstrapServers: ["127.0.0.1:9092"])
        #expect(configuration.effectiveLingerMilliseconds == 5)
        configuration.linger = .milliseconds(10)
        #expect(configuration.effectiveLingerMilliseconds == 10)
        configuration.additionalProperties = ["queue.buffering.max.ms": "2.5"]
        #expect(configuration.effectiveLingerMilliseconds == 2.5)
        configuration.additionalProperties = ["linger.ms": "20"]
        #expect(configuration.effectiveLingerMilliseconds == 20)
        configuration.additionalProperties = ["linger.ms": "soon"]
        #expect(configuration.effectiveLingerMilliseconds == nil)
    }

    /// `KafkaProducerMetrics` renders a running producer's linger.ms, and its round trip and wake-ups
    /// per broker from the statistics of the real broker it sent to; without a producer, no broker.
    @Test func producerMetricsRenderTheLingerRoundTripAndWakeUpsOfTheRunningProducer() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("metrics")
        try cluster.createTopic(topic, partitions: 1)
        var configuration = TestSupport.producerConfig(cluster)
        configuration.linger = .milliseconds(7)
        configuration.statisticsInterval = .milliseconds(100)
        let producer = try KafkaProducer(configuration: configuration, logger: TestSupport.logger)
        let registry = MetricsRegistry()
        let metrics = KafkaProducerMetrics(registry: registry, role: "test")
        // An unlabelled family always has a sample (0 until the producer runs); labelled ones have none.
        #expect(registry.render().contains("\npush_kafka_producer_linger_seconds 0\n"))
        #expect(!registry.render().contains("{broker="))
        metrics.setProducer(producer)
        #expect(registry.render().contains("\npush_kafka_producer_linger_seconds 0.007\n"))
        _ = try await producer.send(topic: topic, key: "k", value: Array("v".utf8))
        try await eventually("a round trip and wake-ups of broker 1 rendered") {
            let text = registry.render()
            return text.contains("push_kafka_produce_rtt_seconds{broker=\"1\"}")
                && text.contains("push_kafka_producer_wakeups_total{broker=\"1\"}")
        }
        metrics.setProducer(nil)
        #expect(!registry.render().contains("{broker="))
        await producer.shutdown()
    }
}
