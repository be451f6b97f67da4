/// Decides, per partition, when the consumer gives up on records the Kafka client cannot deliver and
/// seeks past them, and which partitions have made no progress for too long. A value with no I/O: the
/// consumer's poll thread feeds it errors and deliveries and performs the seeks it asks for.
///
/// librdkafka reports a record batch it cannot decode (`_BAD_COMPRESSION`, a CRC mismatch as
/// `_BAD_MSG`, a broker's `CORRUPT_MESSAGE`, a record above the fetch limits as `MSG_SIZE_TOO_LARGE`)
/// as a consumer error at the batch's first offset, and fetches the same batch again and again. The
/// broker returns whole batches, so a seek to that offset + 1 fetches the same batch once more:
/// skipping goes one offset at a time, until a record is delivered (docs/kafka-consumer.md
/// "Records the client cannot read").
///
/// - The first `retries` reports at a new position are waited out (a transient fault heals by itself).
/// - After that the position is skipped: the caller records it as undeliverable, seeks to the next
///   offset and the position moves there.
/// - A report of a batch that starts below the position (the batch being skipped, fetched again
///   after the seek) skips the next offset at once; a report at or past the position is a new batch
///   and starts counting again.
/// - A delivered record of the partition ends it all.
public struct UnreadableRecordSkipper: Sendable {
    /// What the consumer does after a consumer error.
    public enum Action: Equatable, Sendable {
        /// Nothing: wait for the client to fetch again (the error is not tied to a record, or retries
        /// remain).
        case wait
        /// Hand out `offset` as undeliverable and seek the partition to `offset.next`.
        case skip(KafkaOffset)
    }

    /// A partition the client cannot read past right now.
    public struct Stuck: Equatable, Sendable {
        /// The offset the client tries to read.
        public var position: KafkaOffset
        /// Reports at `position` so far.
        public var attempts: Int
        /// The last error reported.
        public var lastError: String
        /// When the partition last made progress (monotonic nanoseconds): the first error since the
        /// last delivered record.
        public var since: UInt64
    }

    /// The error codes tied to a record at an offset, which retrying the same fetch does not heal.
    public static let unreadableCodes: Set<KafkaError.Code> = [.badCompression, .badMessage, .corruptMessage, .messageSizeTooLarge]

    /// Reports at one position waited out before it is skipped (at least 1).
    public let retries: Int
    /// Partitions with errors and no record delivered since.
    public private(set) var stuck: [KafkaTopicPartition: Stuck] = [:]

    /// - Parameter retries: reports of the same position before skipping it
    ///   (`PUSH_CONSUMER_ERROR_RETRIES`, default 3); values below 1 count as 1.
    public init(retries: Int) {
        self.retries = max(1, retries)
    }

    /// A consumer error was reported for `partition` at `offset`.
    /// - Parameter now: monotonic nanoseconds.
    public mutating func error(_ code: KafkaError.Code, message: String, partition: KafkaTopicPartition, offset: KafkaOffset, now: UInt64) -> Action {
        guard Self.unreadableCodes.contains(code), offset.rawValue >= 0 else { return .wait }
        guard var entry = stuck[partition] else {
            stuck[partition] = Stuck(position: offset, attempts: 1, lastError: message, since: now)
            return retries <= 1 ? skip(partition) : .wait
        }
        entry.lastError = message
        if offset < entry.position {
            // The batch being skipped, fetched again from inside it: its next offset is lost too.
            stuck[partition] = entry
            return skip(partition)
        }
        if offset > entry.position {
            // A further batch that cannot be read either: count again from its first offset.
            entry.position = offset
            entry.attempts = 0
        }
        entry.attempts += 1
        stuck[partition] = entry
        return entry.attempts >= retries ? skip(partition) : .wait
    }

    private mutating func skip(_ partition: KafkaTopicPartition) -> Action {
        guard var entry = stuck[partition], entry.position.rawValue < Int64.max else { return .wait }
        let skipped = entry.position
        entry.position = skipped.next
        entry.attempts = 0
        stuck[partition] = entry
        return .skip(skipped)
    }

    /// A record of `partition` was delivered: the partition moves again.
    public mutating func delivered(_ partition: KafkaTopicPartition) {
        if !stuck.isEmpty { stuck[partition] = nil }
    }

    /// The partitions left this member (or were assigned anew): forget them.
    public mutating func forget(_ partitions: [KafkaTopicPartition]) {
        for partition in partitions { stuck[partition] = nil }
    }

    /// The partitions without progress for at least `threshold` at `now` (monotonic nanoseconds).
    public func stalled(now: UInt64, threshold: Duration) -> [KafkaTopicPartition: Stuck] {
        let (seconds, attoseconds) = threshold.components
        let nanoseconds: UInt64
        if seconds < 0 {
            nanoseconds = 0
        } else {
            let (scaled, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
            nanoseconds = overflow ? .max : scaled.addingReportingOverflow(UInt64(max(0, attoseconds / 1_000_000_000))).partialValue
        }
        return stuck.filter { now >= $0.value.since && now - $0.value.since >= nanoseconds }
    }
}
