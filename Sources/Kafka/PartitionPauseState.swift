/// Why the assigned partitions of a `KafkaConsumer` are paused, and what librdkafka must be told.
///
/// Two parties pause partitions: the application (`KafkaConsumer.pause`, its own back-pressure) and the
/// consumer itself when the reader leaves the `messages` buffer full. librdkafka keeps one pause flag
/// per partition (`rd_kafka_pause_partitions` sets it, `rd_kafka_resume_partitions` clears it; no
/// counting), so both reasons are combined here: a partition is fetched only when neither paused it.
/// Each event returns the partitions whose librdkafka flag must change; the caller applies them while
/// still holding the lock that guards this value, so two threads never apply stale decisions out of
/// order. Revoked partitions are forgotten; newly assigned ones start unpaused by the application.
struct PartitionPauseState: Sendable, Equatable {
    private(set) var assignment: Set<KafkaTopicPartition> = []
    /// Paused by the application; always a subset of `assignment`.
    private(set) var applicationPaused: Set<KafkaTopicPartition> = []
    /// The whole assignment is paused because the buffer is full.
    private(set) var bufferPaused = false

    /// Whether `partition` is fetched right now.
    func isFetching(_ partition: KafkaTopicPartition) -> Bool {
        assignment.contains(partition) && !bufferPaused && !applicationPaused.contains(partition)
    }

    /// The application pauses `partitions`; partitions not assigned are ignored. Returns those to pause.
    mutating func applicationPause(_ partitions: [KafkaTopicPartition]) -> [KafkaTopicPartition] {
        let added = Set(partitions).intersection(assignment).subtracting(applicationPaused)
        applicationPaused.formUnion(added)
        return bufferPaused ? [] : added.sorted()
    }

    /// The application resumes `partitions`. Returns those to resume (none while the buffer is full).
    mutating func applicationResume(_ partitions: [KafkaTopicPartition]) -> [KafkaTopicPartition] {
        let removed = Set(partitions).intersection(applicationPaused)
        applicationPaused.subtract(removed)
        return bufferPaused ? [] : removed.sorted()
    }

    /// The buffer stayed full: pause everything. Returns the partitions to pause.
    mutating func bufferPause() -> [KafkaTopicPartition] {
        guard !bufferPaused else { return [] }
        bufferPaused = true
        return assignment.subtracting(applicationPaused).sorted()
    }

    /// The buffer drained: resume what the application did not pause. Returns the partitions to resume.
    mutating func bufferResume() -> [KafkaTopicPartition] {
        guard bufferPaused else { return [] }
        bufferPaused = false
        return assignment.subtracting(applicationPaused).sorted()
    }

    /// Partitions were added to the assignment. Returns whether they must be paused right away (the
    /// buffer is full).
    mutating func assigned(_ partitions: [KafkaTopicPartition]) -> Bool {
        assignment.formUnion(partitions)
        applicationPaused.subtract(partitions)
        return bufferPaused
    }

    /// Partitions were revoked. Returns whether librdkafka's pause flag of some of them is set (and
    /// must be cleared once they are unassigned, or a later re-assignment would start paused).
    mutating func revoked(_ partitions: [KafkaTopicPartition]) -> Bool {
        let revoked = Set(partitions)
        let wasPaused = bufferPaused ? !revoked.isDisjoint(with: assignment) : !revoked.isDisjoint(with: applicationPaused)
        assignment.subtract(revoked)
        applicationPaused.subtract(revoked)
        return wasPaused
    }
}
