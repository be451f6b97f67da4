import Foundation
import ServiceCore
import Synchronization

/// A consumer-group member that reads records with `rd_kafka_consumer_poll` on a thread of its own
/// (`kafka-consumer-poll`) and hands them out as an `AsyncSequence` (`messages`).
///
/// Offsets: by default (`KafkaConsumerConfiguration.OffsetCommit.storedOffsets`) the application
/// stores the next offset to read of each partition with `storeOffsets` (non-blocking) and librdkafka
/// commits the stored offsets periodically, when partitions are revoked and in `close()`. With
/// `.explicit`, `commit` commits and waits. `enable.auto.offset.store` is always off: nothing counts as
/// processed until the application says so.
///
/// Rebalances are applied by the consumer itself (cooperative, the default:
/// `rd_kafka_incremental_assign`/`_unassign`; eager: `rd_kafka_assign`) and reported on `events`.
/// The application can pause and resume single partitions (`pause`, `resume`) for back-pressure.
/// `close()` commits stored offsets and leaves the group cleanly (`rd_kafka_consumer_close`).
/// See docs/kafka-consumer.md.
public final class KafkaConsumer: Sendable {
    private let core: ConsumerCore
    /// The poll thread's heartbeat (`kafka-consumer-poll`), registered in `Heartbeats.shared` while the
    /// consumer runs.
    var pollHeartbeat: Heartbeat { core.monitor.heartbeat }

    /// Creates the consumer, subscribes to `configuration.topics` and starts polling.
    /// - Throws: `KafkaError` (`invalidArgument`) when librdkafka rejects a property or the subscription.
    public init(configuration: KafkaConsumerConfiguration, logger: Logger = Logger(label: "kafka.consumer")) throws(KafkaError) {
        core = try ConsumerCore(configuration: configuration, logger: logger)
        core.startPollThread()
    }

    deinit { core.requestClose() }

    /// The records, in order per partition. See `KafkaMessageSequence` for buffering.
    public var messages: KafkaMessageSequence { KafkaMessageSequence(core: core) }

    /// The next records, in order per partition: every record already buffered (at most `maxCount`)
    /// without suspending, else the next one to arrive together with any that came with it. A reader
    /// that handles records in bursts suspends once per burst instead of once per record.
    /// - Returns: at least one record, or an empty array once the consumer is closed or the calling
    ///   task is cancelled.
    public func nextMessages(maxCount: Int) async -> [KafkaMessage] {
        await core.nextMessages(maxCount: maxCount)
    }

    /// Rebalance and error events. See `KafkaConsumerEventSequence`.
    public var events: KafkaConsumerEventSequence { KafkaConsumerEventSequence(core: core) }

    /// Commits `offset` for one partition and waits for the group coordinator's answer.
    /// The blocking `rd_kafka_commit` runs on the consumer's commit thread.
    /// - Parameter offset: the next offset to read, i.e. the last processed record's offset + 1
    ///   (`KafkaMessage.offset.next`).
    /// - Throws: `KafkaError`: e.g. `assignmentLost`/`illegalGeneration`/`unknownMemberID` when the
    ///   partition moved to another member, `shutdown` after `close()`.
    public func commit(topic: String, partition: KafkaPartition, offset: KafkaOffset) async throws {
        try await commit([KafkaTopicPartition(topic: topic, partition: partition): offset])
    }

    /// Commits several partitions' offsets at once (next offsets to read) and waits for the answer.
    /// - Throws: `KafkaError`, see `commit(topic:partition:offset:)`.
    public func commit(_ offsets: [KafkaTopicPartition: KafkaOffset]) async throws {
        try await core.commit(offsets.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
    }

    /// Starts committing `offset` (the next offset to read) without waiting; a failure is only logged.
    /// - Throws: `KafkaError` when the request cannot be queued (e.g. `shutdown`).
    public func scheduleCommit(topic: String, partition: KafkaPartition, offset: KafkaOffset) throws {
        try core.commitAsync([(KafkaTopicPartition(topic: topic, partition: partition), offset)])
    }

    /// Stores the next offset to read for each partition, to be committed by librdkafka with the next
    /// auto-commit (`auto.commit.interval.ms`), when the partition is revoked, or in `close()`
    /// (`rd_kafka_offsets_store`). Non-blocking: it only records the offset in memory. Storing a lower
    /// offset than before moves the commit back; store per partition in increasing order.
    ///
    /// librdkafka (since 1.9.0, so in 2.0.2) only accepts offsets of partitions assigned right now:
    /// for any other partition it answers `RD_KAFKA_RESP_ERR__STATE`, returned here as `.notAssigned`
    /// (the partition moved to another member, which resumes from the group's committed offset; drop
    /// the offset). Inside a revocation hand-off, before `KafkaRevocation.finish()`, the revoked
    /// partitions are still assigned and storing succeeds; do not store when the revocation
    /// `isLost` (another member may already own them).
    ///
    /// With `OffsetCommit.explicit` the offsets are stored but nothing commits them.
    /// - Parameter offsets: per partition, the last processed record's offset + 1 (`KafkaMessage.offset.next`).
    /// - Returns: the outcome per partition: `.stored`, `.notAssigned`, or `.failed` (e.g. `shutdown`
    ///   after `close()`). Never throws.
    public func storeOffsets(_ offsets: [KafkaTopicPartition: KafkaOffset]) -> [KafkaTopicPartition: KafkaStoreResult] {
        core.storeOffsets(offsets.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
    }

    /// The group's committed offsets (next offsets to read) of `partitions`, as the group coordinator
    /// has them now (`rd_kafka_committed`, run on the consumer's commit thread). Works for any
    /// partition, assigned to this member or not.
    /// - Parameters:
    ///   - partitions: the partitions to look up.
    ///   - timeout: how long to wait for the coordinator. Default 10 s.
    /// - Returns: the committed offset per partition; partitions without a committed offset are absent.
    /// - Throws: `KafkaError`: `timedOut`, coordinator errors, `shutdown` after `close()`.
    public func committedOffsets(for partitions: [KafkaTopicPartition], timeout: Duration = .seconds(10)) async throws -> [KafkaTopicPartition: KafkaOffset] {
        try await core.committedOffsets(for: partitions, timeout: timeout)
    }

    /// Stops fetching `partitions` until `resume` (the application's back-pressure,
    /// `rd_kafka_pause_partitions`). Partitions not assigned to this member are ignored; a revoked
    /// partition forgets that it was paused, and newly assigned partitions start unpaused.
    ///
    /// Records of these partitions already in the `messages` buffer are still delivered; records
    /// librdkafka prefetched are dropped and fetched again after `resume`, from the first record not yet
    /// delivered. Polling goes on meanwhile (rebalances are served, the member stays in the group).
    /// Independent of the consumer's own pausing while the buffer is full: a partition is fetched only
    /// when neither paused it. Does no I/O, but waits briefly (typically well under a millisecond) for
    /// librdkafka's partition threads to apply the change, as `rd_kafka_pause_partitions` does.
    public func pause(_ partitions: [KafkaTopicPartition]) {
        core.pause(partitions)
    }

    /// Fetches `partitions` again after `pause` (unless the buffer is full, then once it drained).
    /// Partitions not paused by the application are ignored.
    public func resume(_ partitions: [KafkaTopicPartition]) {
        core.resume(partitions)
    }

    /// The partitions paused by the application (`pause`) right now, sorted.
    public var pausedPartitions: [KafkaTopicPartition] { core.applicationPaused }

    /// Partitions without progress: the client reported errors at their position and delivered no record
    /// for at least `KafkaConsumerConfiguration.partitionStallThreshold`, with the position and the last
    /// error (docs/kafka-consumer.md "Records the client cannot read"). No I/O.
    public var stalledPartitions: [KafkaTopicPartition: UnreadableRecordSkipper.Stuck] { core.stalledPartitions }

    /// The partitions assigned to this member right now.
    public var assignment: [KafkaTopicPartition] { core.assignment }

    /// What the consumer's callbacks last reported (joined, poll age, last error, statistics with
    /// per-partition `consumer_lag`), without any I/O. See `KafkaClientHealth`.
    public var health: KafkaClientHealth { core.health }

    /// Test hook: the poll thread stops returning from its loop for `duration` (as if
    /// `rd_kafka_consumer_poll` hung), so that liveness probes can be shown to notice. Records stop
    /// flowing meanwhile. Only for tests and the admin port's test hooks.
    public func wedgePollThreadForTesting(for duration: Duration) {
        let (span, overflow) = UInt64(max(0, duration.wholeMilliseconds)).multipliedReportingOverflow(by: 1_000_000)
        let (until, past) = Heartbeat.monotonicNanoseconds().addingReportingOverflow(overflow ? .max : span)
        let wedgedUntil = past ? UInt64.max : until
        core.monitor.wedgedUntil.store(wedgedUntil, ordering: .relaxed)
    }

    /// Records waiting in the `messages` buffer (for tests of the buffering bound).
    var bufferedCount: Int { core.bufferedCount }

    /// Whether the consumer paused its partitions because the buffer stayed full (for tests).
    var isBufferPausedForTesting: Bool { core.isBufferPaused }

    /// Leaves the group (revoking the assignment, which reports `partitionsRevoked`), destroys the
    /// librdkafka instance and ends `messages` and `events`. Idempotent; returns when done.
    /// With `OffsetCommit.storedOffsets`, offsets stored until then (also inside the final revocation)
    /// are committed before the group is left (`rd_kafka_consumer_close`).
    public func close() async {
        await core.close()
    }
}

/// The consumer's state and threads. Mutable state lives in `state`; continuations are resumed after
/// the lock is released.
final class ConsumerCore: Sendable {
    fileprivate struct State {
        var client: RDKafkaConsumerClient?
        var buffer: [KafkaMessage] = []
        var head = 0
        var messageWaiter: CheckedContinuation<KafkaMessage?, Never>?
        var events: [KafkaConsumerEvent] = []
        var eventWaiter: CheckedContinuation<KafkaConsumerEvent?, Never>?
        var observers = 0
        /// The assignment and who paused which partition; applied to librdkafka under this lock.
        var partitions = PartitionPauseState()
        /// Partitions whose client reports errors at their position (docs/kafka-consumer.md "Records
        /// the client cannot read").
        var unreadable: UnreadableRecordSkipper
        /// The poll thread waits on `spaceAvailable` for the reader to make room.
        var pollerWaiting = false
        var closing = false
        var finished = false
        var closeWaiters: [CheckedContinuation<Void, Never>] = []

        init(retries: Int) { unreadable = UnreadableRecordSkipper(retries: retries) }

        var bufferedCount: Int { buffer.count - head }

        mutating func popMessage() -> KafkaMessage? {
            guard head < buffer.count else { return nil }
            let message = buffer[head]
            head += 1
            if head == buffer.count {
                buffer.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 512, head * 2 >= buffer.count {
                buffer.removeFirst(head)
                head = 0
            }
            return message
        }

        /// Returns the waiter to resume with `event`, or buffers it.
        mutating func emit(_ event: KafkaConsumerEvent) -> CheckedContinuation<KafkaConsumerEvent?, Never>? {
            if let waiter = eventWaiter {
                eventWaiter = nil
                return waiter
            }
            events.append(event)
            if events.count > 1000 {
                if let index = events.firstIndex(where: { if case .error = $0 { true } else { false } }) {
                    events.remove(at: index)
                } else {
                    events.removeFirst()
                }
            }
            return nil
        }
    }

    private let configuration: KafkaConsumerConfiguration
    private let logger: Logger
    private let state: Mutex<State>
    /// Errors, statistics and the poll thread's heartbeat (`kafka-consumer-poll`).
    let monitor = KafkaClientMonitor(heartbeatName: "kafka-consumer-poll")
    /// Serializes pause and resume decisions with their `rd_kafka_pause_partitions`/`_resume_` calls
    /// (which wait for a librdkafka thread); readers never take it, so they are not held up meanwhile.
    private let pauseOrder = Mutex(())
    private let commitThread = DedicatedThread(name: "kafka-commit")
    /// Signalled by the reader when it made room in a full buffer, and by `close`.
    private let spaceAvailable = DispatchSemaphore(value: 0)
    /// How long a full buffer may stay full before the partitions are paused.
    static let stallThreshold: DispatchTimeInterval = .milliseconds(500)

    init(configuration: KafkaConsumerConfiguration, logger: Logger) throws(KafkaError) {
        self.configuration = configuration
        self.logger = logger
        self.state = Mutex(State(retries: configuration.unreadableRecordRetries ?? Int.max))
        let monitor = self.monitor
        let context = RDKafkaContext(
            logger: logger,
            onError: { [logger] error in
                monitor.recordError(error, fatal: error.isFatal)
                logger.warning("consumer error", ["error": "\(error)"])
            },
            onRebalance: { [weak self] rebalance in self?.rebalanced(rebalance) ?? false },
            onStatistics: { json in monitor.recordStatistics(json) })
        let client: RDKafkaConsumerClient
        do {
            client = try RDKafkaConsumerClient(properties: configuration.properties, context: context)
            try client.subscribe(configuration.topics)
        } catch {
            Heartbeats.shared.remove(monitor.heartbeat)
            throw error
        }
        state.withLock { $0.client = client }
    }

    deinit { commitThread.shutdown() }

    var health: KafkaClientHealth {
        let assigned = state.withLock { $0.partitions.assignment.count }
        var health = monitor.snapshot(joined: monitor.joined.load(ordering: .acquiring), assignedPartitions: assigned)
        // Lag of partitions this member no longer owns is not its lag.
        if var statistics = health.statistics {
            let owned = Set(state.withLock { $0.partitions.assignment })
            statistics.consumerLag = statistics.consumerLag.filter { owned.contains($0.key) }
            health.statistics = statistics
        }
        return health
    }

    func startPollThread() {
        NamedThread.start(name: "kafka-cons-poll") { [self] in pollLoop() }
    }

    var assignment: [KafkaTopicPartition] { state.withLock { $0.partitions.assignment.sorted() } }
    var applicationPaused: [KafkaTopicPartition] { state.withLock { $0.partitions.applicationPaused.sorted() } }
    var bufferedCount: Int { state.withLock { $0.bufferedCount } }
    var isBufferPaused: Bool { state.withLock { $0.partitions.bufferPaused } }

    // MARK: Poll thread

    private func pollLoop() {
        let high = max(1, configuration.maxBufferedMessages)
        let low = high / 2
        defer { Heartbeats.shared.remove(monitor.heartbeat) }
        while true {
            monitor.heartbeat.beat()
            monitor.waitWhileWedged()
            let (client, closing, full, paused) = state.withLock { s in (s.client, s.closing, s.bufferedCount >= high, s.partitions.bufferPaused) }
            guard let client, !closing else { break }
            if full, !paused {
                // Take no more records until the reader makes room. A reader that stalls longer than
                // `stallThreshold` gets the partitions paused, so that rebalance callbacks are served
                // again (by polling) without records piling up. librdkafka's own prefetch queue is
                // bounded by queued.min.messages / queued.max.messages.kbytes meanwhile.
                state.withLock { $0.pollerWaiting = true }
                let woken = spaceAvailable.wait(timeout: .now() + ConsumerCore.stallThreshold) == .success
                // Decided and applied under `pauseOrder`, so that an application pause/resume cannot
                // interleave; the state lock (which readers take) is not held during the C call.
                let pausedNow = pauseOrder.withLock { _ -> [KafkaTopicPartition]? in
                    let partitions = state.withLock { s -> [KafkaTopicPartition]? in
                        s.pollerWaiting = false
                        guard !woken, s.bufferedCount >= high, !s.closing else { return nil }
                        return s.partitions.bufferPause()
                    }
                    if let partitions { client.pause(partitions) }
                    return partitions
                }
                if let pausedNow {
                    logger.debug("reader stalled with a full buffer: pausing partitions", ["partitions": pausedNow.map(\.description).joined(separator: ",")])
                }
                continue
            }
            if paused, let resumed = pauseOrder.withLock({ _ -> [KafkaTopicPartition]? in
                let partitions = state.withLock { s -> [KafkaTopicPartition]? in
                    guard s.bufferedCount <= low else { return nil }
                    // Partitions the application paused stay paused.
                    return s.partitions.bufferResume()
                }
                if let partitions { client.resume(partitions) }
                return partitions
            }) {
                logger.debug("buffer drained: resuming partitions", ["partitions": resumed.map(\.description).joined(separator: ",")])
            }
            switch client.poll(timeoutMilliseconds: 100, maxValueBytes: configuration.maxValueBytes ?? .max) {
            case .nothing:
                break
            case .message(let message):
                configuration.onReceipt?(message)
                handOut(message, delivered: true)
            case .error(let error, let at):
                logger.warning("consume error", ["error": "\(error)"])
                state.withLock { $0.emit(.error(error)) }?.resume(returning: .error(error))
                if let (partition, offset) = at { skipUnreadable(error, partition: partition, offset: offset, client: client) }
            }
        }
        // Leave the group: rd_kafka_consumer_close serves the final revocation on this thread.
        let client = state.withLock { $0.client }
        if let error = client?.close() { logger.warning("consumer close", ["error": "\(error)"]) }
        let (closing, messageWaiter, eventWaiter, closeWaiters) = state.withLock { s in
            let result = (s.client, s.messageWaiter, s.eventWaiter, s.closeWaiters)
            s.client = nil
            s.finished = true
            s.messageWaiter = nil
            s.eventWaiter = nil
            s.closeWaiters.removeAll()
            s.buffer.removeAll()
            s.head = 0
            return result
        }
        _ = consume client
        _ = consume closing  // rd_kafka_destroy, on this thread (the commit thread may hold it briefly)
        messageWaiter?.resume(returning: nil)
        eventWaiter?.resume(returning: nil)
        closeWaiters.forEach { $0.resume() }
    }

    /// Poll thread: after a consumer error tied to `offset`, hands out the position as an unreadable
    /// record and seeks past it when `UnreadableRecordSkipper` says so (only with
    /// `unreadableRecordRetries` set).
    private func skipUnreadable(_ error: KafkaError, partition: KafkaTopicPartition, offset: KafkaOffset, client: RDKafkaConsumerClient) {
        let action = state.withLock { s in
            s.unreadable.error(error.code, message: error.message, partition: partition, offset: offset, now: Heartbeat.monotonicNanoseconds())
        }
        guard case .skip(let skipped) = action, configuration.unreadableRecordRetries != nil else { return }
        // Waits for the fetcher, so that nothing fetched from the old position arrives afterwards.
        if let failure = client.seek(partition, to: skipped.next, timeoutMilliseconds: 5_000) {
            logger.error("seek past an unreadable record failed", ["partition": "\(partition)", "offset": "\(skipped)", "error": "\(failure)"])
            return
        }
        logger.error("record the client cannot read: skipped", ["partition": "\(partition)", "offset": "\(skipped)", "error": "\(error)"])
        var record = KafkaMessage(topic: partition.topic, partition: partition.partition, offset: skipped, key: nil, value: [], headers: [], timestamp: nil)
        record.unreadableError = "\(error.code.name): \(error.message)"
        handOut(record, delivered: false)
    }

    /// Gives `record` to the caller waiting for one, else buffers it; `delivered`: the client read it
    /// (its partition made progress, for the unreadable-record skipper).
    private func handOut(_ record: KafkaMessage, delivered: Bool) {
        let waiter = state.withLock { s -> CheckedContinuation<KafkaMessage?, Never>? in
            if delivered { s.unreadable.delivered(record.topicPartition) }
            if let waiter = s.messageWaiter {
                s.messageWaiter = nil
                return waiter
            }
            s.buffer.append(record)
            return nil
        }
        waiter?.resume(returning: record)
    }

    /// Partitions whose client reported errors at their position and delivered nothing for at least
    /// `partitionStallThreshold`.
    var stalledPartitions: [KafkaTopicPartition: UnreadableRecordSkipper.Stuck] {
        state.withLock { $0.unreadable.stalled(now: Heartbeat.monotonicNanoseconds(), threshold: configuration.partitionStallThreshold) }
    }

    /// Rebalance callback (poll thread). Assigned: returns whether the new partitions must be paused
    /// (the buffer is full). Revoked: returns whether some of them were paused (to be resumed once
    /// unassigned, as librdkafka keeps the flag).
    private func rebalanced(_ rebalance: RDKafkaRebalance) -> Bool {
        if rebalance.kind == .assigned { monitor.joined.store(true, ordering: .releasing) }
        if rebalance.partitions.isEmpty {
            // Cooperative rounds often hand out nothing: no event.
            return false
        }
        switch rebalance.kind {
        case .assigned:
            logger.info("partitions assigned", ["partitions": rebalance.partitions.map(\.description).joined(separator: ",")])
            let event = KafkaConsumerEvent.partitionsAssigned(rebalance.partitions)
            let (waiter, paused) = state.withLock { s in
                s.unreadable.forget(rebalance.partitions)
                let paused = s.partitions.assigned(rebalance.partitions)
                return (s.emit(event), paused)
            }
            waiter?.resume(returning: event)
            return paused
        case .revoked:
            logger.info(
                "partitions revoked",
                ["partitions": rebalance.partitions.map(\.description).joined(separator: ","), "lost": String(rebalance.isLost)])
            let revocation = KafkaRevocation(partitions: rebalance.partitions, isLost: rebalance.isLost, isCooperative: rebalance.isCooperative)
            let event = KafkaConsumerEvent.partitionsRevoked(revocation)
            let revoked = Set(rebalance.partitions)
            let (waiter, observed, wasPaused) = state.withLock { s in
                let remaining = s.buffer[s.head...].filter { !revoked.contains($0.topicPartition) }
                s.buffer = Array(remaining)
                s.head = 0
                let wasPaused = s.partitions.revoked(rebalance.partitions)
                s.unreadable.forget(rebalance.partitions)
                return (s.emit(event), s.observers > 0, wasPaused)
            }
            waiter?.resume(returning: event)
            // The partitions stay assigned in librdkafka until this callback returns: offsets the
            // application stores meanwhile are accepted and committed with the unassignment.
            if observed, !revocation.wait(timeout: configuration.revocationTimeout) {
                logger.warning("revocation not finished by the application in time; proceeding", ["timeout": "\(configuration.revocationTimeout)"])
            }
            return wasPaused
        }
    }

    // MARK: Sequences

    /// Up to `maxCount` buffered records without suspending, or, when none is buffered, waits for the
    /// next one and adds whatever arrived with it. Empty once the consumer finished or the task is
    /// cancelled.
    func nextMessages(maxCount: Int) async -> [KafkaMessage] {
        var batch = popMessages(maxCount: maxCount)
        if !batch.isEmpty { return batch }
        guard let first = await nextMessage() else { return [] }
        batch = [first]
        batch += popMessages(maxCount: maxCount - 1)
        return batch
    }

    private func popMessages(maxCount: Int) -> [KafkaMessage] {
        guard maxCount > 0 else { return [] }
        let (batch, wake) = state.withLock { s -> ([KafkaMessage], Bool) in
            var batch: [KafkaMessage] = []
            while batch.count < maxCount, let message = s.popMessage() { batch.append(message) }
            let wake = !batch.isEmpty && s.pollerWaiting
            if wake { s.pollerWaiting = false }
            return (batch, wake)
        }
        if wake { spaceAvailable.signal() }
        return batch
    }

    func nextMessage() async -> KafkaMessage? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<KafkaMessage?, Never>) in
                let (ready, wake) = state.withLock { s -> (KafkaMessage??, Bool) in
                    if let message = s.popMessage() {
                        let wake = s.pollerWaiting
                        s.pollerWaiting = false
                        return (.some(message), wake)
                    }
                    if s.finished || Task.isCancelled { return (.some(nil), false) }
                    s.messageWaiter = continuation
                    return (nil, false)
                }
                if wake { spaceAvailable.signal() }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            state.withLock { s in
                defer { s.messageWaiter = nil }
                return s.messageWaiter
            }?.resume(returning: nil)
        }
    }

    func nextEvent() async -> KafkaConsumerEvent? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<KafkaConsumerEvent?, Never>) in
                let ready = state.withLock { s -> KafkaConsumerEvent?? in
                    if !s.events.isEmpty { return .some(s.events.removeFirst()) }
                    if s.finished || Task.isCancelled { return .some(nil) }
                    s.eventWaiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            state.withLock { s in
                defer { s.eventWaiter = nil }
                return s.eventWaiter
            }?.resume(returning: nil)
        }
    }

    func observerCountChanged(by delta: Int) {
        state.withLock { $0.observers += delta }
    }

    // MARK: Commits and close

    func commit(_ offsets: [(KafkaTopicPartition, KafkaOffset)]) async throws {
        guard let client = state.withLock({ $0.client }) else {
            throw KafkaError(code: .shutdown, message: "consumer is closed")
        }
        do {
            try await commitThread.run { try client.commit(offsets, async: false) }
        } catch is CancellationError {
            throw KafkaError(code: .shutdown, message: "consumer is closed")
        }
    }

    func storeOffsets(_ offsets: [(KafkaTopicPartition, KafkaOffset)]) -> [KafkaTopicPartition: KafkaStoreResult] {
        // Under the lock (the call is non-blocking), so this thread never holds the last reference to
        // the client: rd_kafka_destroy must run on the poll thread.
        let results = state.withLock { s in s.client?.storeOffsets(offsets) }
        guard let results else {
            let error = KafkaError(code: .shutdown, message: "consumer is closed")
            return Dictionary(offsets.map { ($0.0, KafkaStoreResult.failed(error)) }, uniquingKeysWith: { first, _ in first })
        }
        return Dictionary(zip(offsets.map(\.0), results).map { ($0, $1) }, uniquingKeysWith: { first, _ in first })
    }

    func committedOffsets(for partitions: [KafkaTopicPartition], timeout: Duration) async throws -> [KafkaTopicPartition: KafkaOffset] {
        guard let client = state.withLock({ $0.client }) else {
            throw KafkaError(code: .shutdown, message: "consumer is closed")
        }
        let milliseconds = Int32(clamping: max(0, timeout.wholeMilliseconds))
        do {
            let committed = try await commitThread.run { try client.committed(partitions, timeoutMilliseconds: milliseconds) }
            return committed.compactMapValues { $0 }
        } catch is CancellationError {
            throw KafkaError(code: .shutdown, message: "consumer is closed")
        }
    }

    // MARK: Application pause

    /// Bookkeeping and `rd_kafka_pause_partitions` under `pauseOrder`, so that the poll thread's
    /// buffer pause/resume and the application's calls apply in the order they were decided.
    func pause(_ partitions: [KafkaTopicPartition]) {
        let paused = pauseOrder.withLock { _ -> [KafkaTopicPartition] in
            let (client, list) = state.withLock { s in (s.client, s.client == nil ? [] : s.partitions.applicationPause(partitions)) }
            client?.pause(list)
            return list
        }
        if !paused.isEmpty { logger.debug("application paused partitions", ["partitions": paused.map(\.description).joined(separator: ",")]) }
    }

    func resume(_ partitions: [KafkaTopicPartition]) {
        let resumed = pauseOrder.withLock { _ -> [KafkaTopicPartition] in
            let (client, list) = state.withLock { s in (s.client, s.client == nil ? [] : s.partitions.applicationResume(partitions)) }
            client?.resume(list)
            return list
        }
        if !resumed.isEmpty { logger.debug("application resumed partitions", ["partitions": resumed.map(\.description).joined(separator: ",")]) }
    }

    func commitAsync(_ offsets: [(KafkaTopicPartition, KafkaOffset)]) throws {
        guard let client = state.withLock({ $0.client }) else {
            throw KafkaError(code: .shutdown, message: "consumer is closed")
        }
        try client.commit(offsets, async: true)
    }

    func close() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { s -> Bool in
                if s.finished { return true }
                s.closing = true
                s.closeWaiters.append(continuation)
                return false
            }
            if done { continuation.resume() } else { spaceAvailable.signal() }
        }
    }

    /// Asks the poll thread to close without waiting (from `KafkaConsumer.deinit`).
    func requestClose() {
        state.withLock { $0.closing = true }
        spaceAvailable.signal()
    }
}
