import ServiceCore
import Foundation

/// A pending revocation of partitions from a `KafkaConsumer` (see `KafkaConsumerEvent.partitionsRevoked`).
///
/// The consumer's poll thread waits (inside librdkafka's rebalance callback) until `finish()` is
/// called, at most `KafkaConsumerConfiguration.revocationTimeout` (default 10 s; the whole group's
/// rebalance waits meanwhile, so finish far sooner), and only while some task iterates
/// `KafkaConsumer.events`. Until then the partitions are still assigned: offsets stored with
/// `KafkaConsumer.storeOffsets` are accepted and, with `OffsetCommit.storedOffsets`, committed by
/// librdkafka when the partitions are unassigned, so the next owner starts there. With `.explicit`,
/// `KafkaConsumer.commit` may be used instead. When `isLost`, store or commit nothing.
public final class KafkaRevocation: Sendable {
    /// The partitions being revoked.
    public let partitions: [KafkaTopicPartition]
    /// The partitions were lost (e.g. this member's session timed out) rather than handed over:
    /// another member may already be reading them. Do not store or commit their offsets; drop their
    /// in-flight work and call `finish()`.
    public let isLost: Bool
    /// The group uses the cooperative protocol: only these partitions move.
    public let isCooperative: Bool

    private let gate = RevocationGate()

    init(partitions: [KafkaTopicPartition], isLost: Bool, isCooperative: Bool) {
        self.partitions = partitions
        self.isLost = isLost
        self.isCooperative = isCooperative
    }

    /// Lets the revocation proceed: the application finished the in-flight work of these partitions
    /// and stored (or committed) its offsets. Idempotent.
    public func finish() { gate.open() }

    /// Blocks the calling (poll) thread until `finish()` or `timeout`. Returns whether `finish()` came.
    func wait(timeout: Duration) -> Bool { gate.wait(timeout: timeout) }
}

/// A one-shot gate; `condition` guards `opened` (it is only read and written while locked).
private final class RevocationGate: @unchecked Sendable {
    private let condition = NSCondition()
    private var opened = false

    func open() {
        condition.lock()
        opened = true
        condition.broadcast()
        condition.unlock()
    }

    func wait(timeout: Duration) -> Bool {
        let deadline = Date(timeIntervalSinceNow: Double(timeout.wholeMilliseconds) / 1000)
        condition.lock()
        defer { condition.unlock() }
        while !opened {
            if !condition.wait(until: deadline) { return opened }
        }
        return true
    }
}
