import Foundation
import ServiceCore
import Synchronization

/// A consumer-group member that reads records with `rd_kafka_consumer_poll` on a thread of its own
/// (`kafka-consumer-poll`) and hands them out as an `AsyncSequence` (`messages`).
///
/// Offsets are only committed explicitly (`commit`); `enable.auto.commit` and
/// `enable.auto.offset.store` are off. Rebalances are applied by the consumer itself (eager:
/// `rd_kafka_assign`; cooperative: `rd_kafka_incremental_assign`/`_unassign`) and reported on
/// `events`. `close()` leaves the group cleanly (`rd_kafka_consumer_close`).
public final class KafkaConsumer: Sendable {
    private let core: ConsumerCore

    /// Creates the consumer, subscribes to `configuration.topics` and starts polling.
    /// - Throws: `KafkaError` (`invalidArgument`) when librdkafka rejects a property or the subscription.
    public init(configuration: KafkaConsumerConfiguration, logger: Logger = Logger(label: "kafka.consumer")) throws(KafkaError) {
        core = try ConsumerCore(configuration: configuration, logger: logger)
        core.startPollThread()
    }

    deinit { core.requestClose() }

    /// The records, in order per partition. See `KafkaMessageSequence` for buffering.
    public var messages: KafkaMessageSequence { KafkaMessageSequence(core: core) }

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

    /// The partitions assigned to this member right now.
    public var assignment: [KafkaTopicPartition] { core.assignment }

    /// Records waiting in the `messages` buffer (for tests of the buffering bound).
    var bufferedCount: Int { core.bufferedCount }

    /// Leaves the group (revoking the assignment, which reports `partitionsRevoked`), destroys the
    /// librdkafka instance and ends `messages` and `events`. Idempotent; returns when done.
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
        var assignment: Set<KafkaTopicPartition> = []
        var paused = false
        /// The poll thread waits on `spaceAvailable` for the reader to make room.
        var pollerWaiting = false
        var closing = false
        var finished = false
        var closeWaiters: [CheckedContinuation<Void, Never>] = []

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
    private let state = Mutex(State())
    private let commitThread = DedicatedThread(name: "kafka-consumer-commit")
    /// Signalled by the reader when it made room in a full buffer, and by `close`.
    private let spaceAvailable = DispatchSemaphore(value: 0)
    /// How long a full buffer may stay full before the partitions are paused.
    static let stallThreshold: DispatchTimeInterval = .milliseconds(500)

    init(configuration: KafkaConsumerConfiguration, logger: Logger) throws(KafkaError) {
        self.configuration = configuration
        self.logger = logger
        let context = RDKafkaContext(
            logger: logger,
            onError: { [logger] error in logger.warning("consumer error", ["error": "\(error)"]) },
            onRebalance: { [weak self] rebalance in self?.rebalanced(rebalance) ?? false })
        let client = try RDKafkaConsumerClient(properties: configuration.properties, context: context)
        try client.subscribe(configuration.topics)
        state.withLock { $0.client = client }
    }

    deinit { commitThread.shutdown() }

    func startPollThread() {
        let thread = Thread { [self] in pollLoop() }
        thread.name = "kafka-consumer-poll"
        thread.start()
    }

    var assignment: [KafkaTopicPartition] { state.withLock { $0.assignment.sorted() } }
    var bufferedCount: Int { state.withLock { $0.bufferedCount } }

    // MARK: Poll thread

    private func pollLoop() {
        let high = max(1, configuration.maxBufferedMessages)
        let low = high / 2
        while true {
            let (client, closing, full, paused) = state.withLock { s in (s.client, s.closing, s.bufferedCount >= high, s.paused) }
            guard let client, !closing else { break }
            if full, !paused {
                // Take no more records until the reader makes room. A reader that stalls longer than
                // `stallThreshold` gets the partitions paused, so that rebalance callbacks are served
                // again (by polling) without records piling up. librdkafka's own prefetch queue is
                // bounded by queued.min.messages / queued.max.messages.kbytes meanwhile.
                state.withLock { $0.pollerWaiting = true }
                let woken = spaceAvailable.wait(timeout: .now() + ConsumerCore.stallThreshold) == .success
                let stillFull = state.withLock { s in
                    s.pollerWaiting = false
                    if !woken, s.bufferedCount >= high, !s.closing {
                        s.paused = true
                        return true
                    }
                    return false
                }
                if stillFull {
                    let partitions = client.assignment()
                    logger.debug("reader stalled with a full buffer: pausing partitions", ["partitions": partitions.map(\.description).joined(separator: ",")])
                    client.pause(partitions)
                }
                continue
            }
            if paused, state.withLock({ s in
                guard s.bufferedCount <= low else { return false }
                s.paused = false
                return true
            }) {
                let partitions = client.assignment()
                logger.debug("buffer drained: resuming partitions", ["partitions": partitions.map(\.description).joined(separator: ",")])
                client.resume(partitions)
            }
            switch client.poll(timeoutMilliseconds: 100) {
            case .nothing:
                break
            case .message(let message):
                let waiter = state.withLock { s -> CheckedContinuation<KafkaMessage?, Never>? in
                    if let waiter = s.messageWaiter {
                        s.messageWaiter = nil
                        return waiter
                    }
                    s.buffer.append(message)
                    return nil
                }
                waiter?.resume(returning: message)
            case .error(let error):
                logger.warning("consume error", ["error": "\(error)"])
                state.withLock { $0.emit(.error(error)) }?.resume(returning: .error(error))
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

    /// Rebalance callback (poll thread). Returns whether newly assigned partitions must be paused.
    private func rebalanced(_ rebalance: RDKafkaRebalance) -> Bool {
        if rebalance.partitions.isEmpty {
            // Cooperative rounds often hand out nothing: no event.
            return state.withLock { $0.paused }
        }
        switch rebalance.kind {
        case .assigned:
            logger.info("partitions assigned", ["partitions": rebalance.partitions.map(\.description).joined(separator: ",")])
            let event = KafkaConsumerEvent.partitionsAssigned(rebalance.partitions)
            let (waiter, paused) = state.withLock { s in
                s.assignment.formUnion(rebalance.partitions)
                return (s.emit(event), s.paused)
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
            let (waiter, observed) = state.withLock { s in
                let remaining = s.buffer[s.head...].filter { !revoked.contains($0.topicPartition) }
                s.buffer = Array(remaining)
                s.head = 0
                s.assignment.subtract(revoked)
                return (s.emit(event), s.observers > 0)
            }
            waiter?.resume(returning: event)
            if observed, !revocation.wait(timeout: configuration.revocationTimeout) {
                logger.warning("revocation not finished by the application in time; proceeding", ["timeout": "\(configuration.revocationTimeout)"])
            }
            return false
        }
    }

    // MARK: Sequences

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
