import Foundation
import PushTestSupport
import ServiceCore
import Synchronization
import Testing

@testable import Kafka

/// Consumer groups on the mock broker: rebalances, revocation drain, buffering bound.
@Suite(.timeLimit(.minutes(2)))
struct KafkaConsumerGroupTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    /// Records every event of a consumer and finishes revocations after `onRevoke` ran.
    final class EventLog: Sendable {
        final class Store: Sendable { let events = Mutex<[String]>([]) }
        private let store = Store()
        let task: Task<Void, Never>

        init(_ consumer: KafkaConsumer, onRevoke: @escaping @Sendable (KafkaRevocation) async -> Void = { _ in }) {
            let store = self.store
            task = Task {
                for await event in consumer.events {
                    switch event {
                    case .partitionsAssigned(let partitions):
                        store.events.withLock { $0.append("assigned \(partitions.count)") }
                    case .partitionsRevoked(let revocation):
                        store.events.withLock { $0.append("revoked \(revocation.partitions.count)") }
                        await onRevoke(revocation)
                        revocation.finish()
                    case .error(let error):
                        store.events.withLock { $0.append("error \(error.code)") }
                    }
                }
            }
        }

        var all: [String] { store.events.withLock { $0 } }
    }

    @Test(arguments: [KafkaConsumerConfiguration.RebalanceProtocol.eager, .cooperative])
    func twoMembersSplitPartitionsAndTheSurvivorTakesThemBack(_ rebalanceProtocol: KafkaConsumerConfiguration.RebalanceProtocol) async throws {
        let cluster = try KafkaMockCluster(brokers: 3, logger: TestSupport.logger)
        let topic = TestSupport.unique("split")
        try cluster.createTopic(topic, partitions: 4)
        let group = TestSupport.unique("group")
        var config = TestSupport.consumerConfig(cluster, group: group, topics: [topic])
        config.rebalanceProtocol = rebalanceProtocol

        let first = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        let firstLog = EventLog(first)
        try await eventually("first member owns all 4 partitions") { first.assignment.count == 4 }

        let second = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        let secondLog = EventLog(second)
        try await eventually("both members own partitions") {
            let a = Set(first.assignment)
            let b = Set(second.assignment)
            return !a.isEmpty && !b.isEmpty && a.isDisjoint(with: b) && a.union(b).count == 4
        }
        // The events reach the logs' tasks a moment after the assignment changed: wait for them too.
        try await eventually("first member saw a revocation") { firstLog.all.contains { $0.hasPrefix("revoked") } }
        try await eventually("second member saw an assignment") {
            secondLog.all.contains { $0.hasPrefix("assigned") && $0 != "assigned 0" }
        }
        if rebalanceProtocol == .cooperative {
            // Incremental: the first member never gave up all four at once.
            #expect(!firstLog.all.contains("revoked 4"), "\(firstLog.all)")
        }

        await second.close()
        try await eventually("survivor owns all 4 partitions again") { first.assignment.count == 4 }
        try await eventually("closing member's last event is its revocation") { secondLog.all.last?.hasPrefix("revoked") == true }
        await first.close()
        await firstLog.task.value
        await secondLog.task.value
    }

    /// The first member holds records in flight. When the second member joins, the revocation waits
    /// until the first member finished draining (2 s here): the second member gets no partition before.
    /// With the cooperative protocol the group is stable during the revocation, so the drain's commit
    /// succeeds and the second member starts after the committed records: nothing is read twice.
    /// (With the eager protocol, librdkafka's mock broker answers commits during the rebalance with
    /// REBALANCE_IN_PROGRESS, unlike a real broker in PreparingRebalance; those records are redelivered.)
    @Test(arguments: [KafkaConsumerConfiguration.RebalanceProtocol.eager, .cooperative])
    func revocationWaitsForTheApplicationToDrain(_ rebalanceProtocol: KafkaConsumerConfiguration.RebalanceProtocol) async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("drain")
        try cluster.createTopic(topic, partitions: 4)
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        for index in 0..<40 { _ = try await producer.send(topic: topic, key: "k\(index)", value: Array("old-\(index)".utf8)) }

        var config = TestSupport.consumerConfig(cluster, group: TestSupport.unique("group"), topics: [topic])
        config.rebalanceProtocol = rebalanceProtocol
        config.offsetCommit = .explicit  // commits in the drain only
        let first = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        // Read, not yet committed. A first join can take long while the throughput tests load the
        // machine (a CI run once waited more than 30 s for it): the deadline is generous.
        let inFlight = try await TestSupport.collect(40, from: first, timeout: .seconds(75))
        let drainedAt = Mutex<ContinuousClock.Instant?>(nil)
        let commitErrors = Mutex<[KafkaError.Code]>([])
        let firstLog = EventLog(first) { revocation in
            guard !revocation.partitions.isEmpty, drainedAt.withLock({ $0 }) == nil else { return }
            // Drain: finish the in-flight work (2 s), then commit it, then let go.
            try? await Task.sleep(for: .seconds(2))
            let revoked = Set(revocation.partitions)
            var offsets: [KafkaTopicPartition: KafkaOffset] = [:]
            for message in inFlight where revoked.contains(message.topicPartition) {
                offsets[message.topicPartition] = max(offsets[message.topicPartition] ?? 0, message.offset.next)
            }
            do {
                try await first.commit(offsets)
            } catch let error as KafkaError {
                commitErrors.withLock { $0.append(error.code) }
            } catch {}
            drainedAt.withLock { $0 = .now }
        }
        let second = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        try await eventually("second member owns partitions", timeout: .seconds(45)) { !second.assignment.isEmpty }
        let assignedAt = ContinuousClock.now
        let drained = try #require(drainedAt.withLock { $0 }, "first member never drained")
        #expect(drained <= assignedAt)

        if rebalanceProtocol == .cooperative {
            let errors = commitErrors.withLock { $0 }
            // The mock broker sometimes starts another rebalance during the 2 s drain (seen in about 1
            // run of 5 with the whole target running) and answers the drain's commit with
            // REBALANCE_IN_PROGRESS; those records are then read again. Recorded as a known intermittent
            // issue, so such a run is still reported.
            withKnownIssue("the mock broker can answer the drain's commit with REBALANCE_IN_PROGRESS", isIntermittent: true) {
                #expect(errors == [])
            }
            for index in 0..<8 { _ = try await producer.send(topic: topic, key: "k\(index)", value: Array("new-\(index)".utf8)) }
            var received: [KafkaMessage] = []
            while let message = try? await TestSupport.collect(1, from: second, timeout: .seconds(3)).first {
                received.append(message)
            }
            #expect(!received.isEmpty)
            if errors.isEmpty {
                #expect(received.allSatisfy { $0.value.utf8String.hasPrefix("new-") }, "redelivered: \(received.map { $0.value.utf8String })")
            } else {
                #expect(errors.allSatisfy { $0 == .rebalanceInProgress }, "\(errors)")
            }
        } else {
            #expect(commitErrors.withLock { $0 }.allSatisfy { $0 == .rebalanceInProgress })
        }
        await producer.shutdown()
        await second.close()
        await first.close()
        await firstLog.task.value
    }

    /// A slow reader: the buffer stops growing at the configured bound (partitions are paused), and
    /// pause/resume neither loses nor repeats a record.
    @Test func bufferStaysBoundedAndPauseResumeLosesNothing() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let topic = TestSupport.unique("bounded")
        try cluster.createTopic(topic, partitions: 2)
        let producer = try KafkaProducer(configuration: TestSupport.producerConfig(cluster), logger: TestSupport.logger)
        let count = 2000
        _ = try await withThrowingTaskGroup(of: KafkaDeliveryReport.self) { group in
            for index in 0..<count {
                group.addTask { try await producer.send(topic: topic, key: "k\(index % 2)", value: Array("b-\(index)".utf8)) }
            }
            return try await group.reduce(into: 0) { count, _ in count += 1 }
        }
        await producer.shutdown()

        var config = TestSupport.consumerConfig(cluster, group: TestSupport.unique("g"), topics: [topic])
        config.maxBufferedMessages = 20
        let consumer = try KafkaConsumer(configuration: config, logger: TestSupport.logger)
        try await eventually("buffer fills") { consumer.bufferedCount >= 20 }
        var peak = 0
        for _ in 0..<20 {
            peak = max(peak, consumer.bufferedCount)
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(peak <= 20, "buffer grew to \(peak)")

        var offsets: [KafkaPartition: [Int64]] = [:]
        var seen = 0
        for await message in consumer.messages {
            offsets[message.partition, default: []].append(message.offset.rawValue)
            peak = max(peak, consumer.bufferedCount)
            seen += 1
            if seen % 100 == 0 { try await Task.sleep(for: .milliseconds(20)) }
            if seen == count { break }
        }
        await consumer.close()
        #expect(peak <= 20, "buffer grew to \(peak)")
        for (partition, list) in offsets {
            #expect(list == Array(0..<Int64(list.count)), "partition \(partition) not contiguous")
        }
        #expect(offsets.values.map(\.count).reduce(0, +) == count)
    }
}
