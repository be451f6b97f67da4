import Foundation
import PushTestSupport
import ServiceCore
import Testing

@testable import Kafka

/// `flush(timeout:)`: its deadline, the caller's cancellation, and a wait served before the deadline.
@Suite(.timeLimit(.minutes(1)))
struct KafkaProducerFlushTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    /// With the partition's leader down, one record stays pending: a flush fails with `timedOut` after
    /// its timeout (not before), a cancelled flush ends at once with `CancellationError`, and once the
    /// leader returns a flush with a long timeout returns as soon as the record is acknowledged (its
    /// deadline child is cancelled, not awaited).
    @Test func flushWaitsForItsDeadlineEndsOnCancellationAndReturnsOnceServed() async throws {
        let cluster = try KafkaMockCluster(brokers: 3, logger: TestSupport.logger)
        let topic = TestSupport.unique("flush")
        try cluster.createTopic(topic, partitions: 1)
        try cluster.setPartitionLeader(topic: topic, partition: 0, brokerID: 2)
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        _ = try await producer.send(topic: topic, key: "warm-up", value: Array("before".utf8))
        try await producer.flush(timeout: .zero)  // nothing pending: returns at once

        try cluster.setBrokerDown(2)
        producer.send(topic: topic, key: nil, value: Array("during".utf8)) { _ in }
        try await eventually("the record pending while the leader is down") { producer.pendingCount == 1 }

        let clock = ContinuousClock()
        let timedOut = await clock.measure {
            await #expect {
                try await producer.flush(timeout: .milliseconds(300))
            } throws: { ($0 as? KafkaError)?.code == .timedOut }
        }
        #expect(timedOut >= .milliseconds(300))
        #expect(timedOut < .seconds(10))
        await #expect {
            try await producer.flush(timeout: .zero)
        } throws: { ($0 as? KafkaError)?.code == .timedOut }

        let cancelled = Task { try await producer.flush(timeout: .seconds(40)) }
        cancelled.cancel()
        let cancelling = await clock.measure {
            await #expect(throws: CancellationError.self) { try await cancelled.value }
        }
        #expect(cancelling < .seconds(10))
        #expect(producer.pendingCount == 1)

        let flushing = Task { try await producer.flush(timeout: .seconds(40)) }
        try await Task.sleep(for: .milliseconds(100))
        try cluster.setBrokerUp(2)
        let served = try await clock.measure { try await flushing.value }
        #expect(served < .seconds(30))
        #expect(producer.pendingCount == 0)
        await producer.shutdown()
    }
}
