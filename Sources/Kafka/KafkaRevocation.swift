import Foundation

/// A pending revocation of partitions from a `KafkaConsumer` (see `KafkaConsumerEvent.partitionsRevoked`).
///
/// The consumer's poll thread waits (inside librdkafka's rebalance callback) until `finish()` is
/// called, at most `KafkaConsumerConfiguration.revocationTimeout`, and only while some task iterates
/// `KafkaConsumer.events`. Offsets of these partitions may be committed until then.
public final class KafkaRevocation: Sendable {
    /// The partitions being revoked.
    public let partitions: [KafkaTopicPartition]
    /// The partitions were lost (e.g. this member's session timed out) rather than handed over:
    /// committing their offsets will fail, and another member may already be reading them.
    public let isLost: Bool
    /// The group uses the cooperative protocol: only these partitions move.
    public let isCooperative: Bool

    private let gate = RevocationGate()

    init(partitions: [KafkaTopicPartition], isLost: Bool, isCooperative: Bool) {
        self.partitions = partitions
        self.isLost = isLost
        self.isCooperative = isCooperative
    }

    /// Lets the revocation proceed: the application finished (and committed) the in-flight work of
    /// these partitions. Idempotent.
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
