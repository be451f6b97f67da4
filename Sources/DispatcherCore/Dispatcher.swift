import Foundation
import Kafka
import Postgres
import PushMessages
import ServiceCore
import Synchronization

/// The dispatcher service: consumes token events and send requests (consumer group
/// `push-dispatcher`), applies the events to PostgreSQL, sends the requests, and commits each
/// record's offset only after its work is done and its outcomes were acknowledged by Kafka.
///
/// Partitions proceed independently (one worker per partition, records of a partition in order), so
/// a slow request holds back only the records behind it on its partition. A failure of PostgreSQL
/// or Kafka retries the same record with exponential backoff (it never skips one), and a malformed
/// record goes to the dead-letter topic.
public final class Dispatcher: Sendable {
    private let configuration: DispatcherConfiguration
    private let store: TokenStore
    private let processor: SendRequestProcessor
    private let feedback: FeedbackPublisher
    private let clock: any WallClock
    private let logger: Logger
    /// The lane of each partition this replica is working on.
    private let lanes = Mutex<[KafkaTopicPartition: PartitionLane]>([:])

    public init(configuration: DispatcherConfiguration, store: TokenStore, sender: any NotificationSender,
                producer: KafkaProducer, clock: any WallClock = SystemWallClock(), logger: Logger = Logger(label: "dispatcher")) {
        self.configuration = configuration
        self.store = store
        self.clock = clock
        self.logger = logger
        self.feedback = FeedbackPublisher(producer: producer, topics: configuration.topics, clock: clock)
        self.processor = SendRequestProcessor(
            store: store, sender: sender, feedback: feedback, defaultEnvironment: configuration.defaultEnvironment,
            clock: clock, logger: logger)
    }

    /// Migrates the schema, joins the consumer group and processes records until the task is
    /// cancelled; then leaves the group cleanly.
    /// - Throws: `PostgresError` when migrations fail, `KafkaError` when the consumer cannot start.
    public func run() async throws {
        try await store.migrate()
        var consumerConfiguration = KafkaConsumerConfiguration(
            bootstrapServers: configuration.bootstrapServers, groupID: configuration.consumerGroup,
            topics: [configuration.topics.tokenEvents, configuration.topics.sendRequests])
        consumerConfiguration.clientID = "dispatcher-\(configuration.instanceID)"
        consumerConfiguration.sessionTimeout = configuration.sessionTimeout
        let consumer = try KafkaConsumer(configuration: consumerConfiguration, logger: logger.with(["component": "kafka"]))
        logger.info("dispatcher ready", ["group": configuration.consumerGroup, "instance": configuration.instanceID])

        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.watchRebalances(consumer) }
            group.addTask {
                await withTaskCancellationHandler {
                    await self.consume(consumer)
                } onCancel: {
                    Task { await consumer.close() }
                }
            }
            await group.next()
            group.cancelAll()
        }
        await consumer.close()
    }

    /// Hands each record to the lane of its partition; each lane has a worker of its own.
    private func consume(_ consumer: KafkaConsumer) async {
        await withTaskGroup(of: Void.self) { group in
            for await message in consumer.messages {
                let (lane, isNew) = lanes.withLock { lanes -> (PartitionLane, Bool) in
                    if let lane = lanes[message.topicPartition] { return (lane, false) }
                    let lane = PartitionLane(capacity: configuration.maxQueuedRecordsPerPartition)
                    lanes[message.topicPartition] = lane
                    return (lane, true)
                }
                if isNew { group.addTask { await self.work(lane, consumer) } }
                await lane.push(message)
                if Task.isCancelled { break }
            }
            let remaining = lanes.withLock { lanes -> [PartitionLane] in
                defer { lanes.removeAll() }
                return Array(lanes.values)
            }
            for lane in remaining {
                lane.dropQueued()
                lane.finish()
            }
        }
    }

    /// Processes one partition's records in offset order, committing each after its work.
    private func work(_ lane: PartitionLane, _ consumer: KafkaConsumer) async {
        while let message = await lane.next() {
            await withRetries("record \(message.topic)/\(message.partition)@\(message.offset)") {
                do {
                    try await self.handle(message)
                } catch let error as PostgresError where error.isCausedByTheData {
                    // Retrying cannot help a record the database refuses: keep it for operators and
                    // go on, so that nothing blocks the partition behind it.
                    self.logger.error("record refused by PostgreSQL", ["error": "\(error)", "offset": "\(message.offset)"])
                    try await self.feedback.deadLetter(message, error: "refused by PostgreSQL: \(error)", rejectedBy: "dispatcher")
                }
            }
            await withRetries("commit \(message.topic)/\(message.partition)@\(message.offset.next)", giveUpOn: { ($0 as? KafkaError)?.code == .assignmentLost }) {
                try await consumer.commit(topic: message.topic, partition: message.partition, offset: message.offset.next)
            }
            lane.done()
        }
    }

    /// Lets a revocation proceed once the revoked partitions' records in progress are finished and
    /// committed; their queued records are dropped (the next owner reads them from the committed
    /// offset).
    private func watchRebalances(_ consumer: KafkaConsumer) async {
        for await event in consumer.events {
            switch event {
            case .partitionsAssigned(let partitions):
                logger.info("partitions assigned", ["partitions": partitions.map { "\($0)" }.joined(separator: ",")])
            case .partitionsRevoked(let revocation):
                let revoked = lanes.withLock { lanes in revocation.partitions.compactMap { lanes.removeValue(forKey: $0) } }
                for lane in revoked {
                    lane.dropQueued()
                    lane.finish()
                }
                while revoked.contains(where: \.isBusy) {
                    try? await Task.sleep(for: .milliseconds(5))
                }
                logger.info("partitions revoked", ["partitions": revocation.partitions.map { "\($0)" }.joined(separator: ",")])
                revocation.finish()
            case .error(let error):
                logger.warning("consumer error", ["error": "\(error)"])
            }
        }
    }

    /// Handles one record; throws only for transient infrastructure failures.
    func handle(_ message: KafkaMessage) async throws {
        if message.topic == configuration.topics.tokenEvents {
            let event: TokenEvent
            do {
                event = try TokenEventChecker.checked(message, nowMs: clock.nowMilliseconds())
            } catch {
                logger.warning("token event rejected", ["error": "\(error)", "offset": "\(message.offset)"])
                try await feedback.deadLetter(message, error: "invalid TokenEvent: \(error)", rejectedBy: "dispatcher")
                return
            }
            let applied = try await store.apply(event)
            logger.debug("token event", ["event_id": event.eventID, "applied": "\(applied)"])
        } else if message.topic == configuration.topics.sendRequests {
            let request: SendRequest
            do {
                request = try SendRequestDecoder.decode(message)
            } catch {
                logger.warning("send request rejected", ["error": error.description, "offset": "\(message.offset)"])
                try await feedback.deadLetter(message, error: error.description, rejectedBy: "dispatcher")
                // Tell the producer too: its request finishes visibly, with the reason.
                if let key = message.key, !key.isEmpty {
                    var completed = RequestCompleted()
                    completed.requestID = String(decoding: key, as: UTF8.self)
                    completed.error = error.description
                    completed.completedAtMs = clock.nowMilliseconds()
                    try await feedback.publish(feedback.event(.requestCompleted(completed)), key: completed.requestID)
                }
                return
            }
            try await processor.process(request, consumedAtMs: clock.nowMilliseconds())
        }
    }

    /// Runs `body` until it succeeds, backing off exponentially on errors, or until cancelled or
    /// `giveUpOn` says the error is final.
    private func withRetries(_ what: String, giveUpOn: (any Error) -> Bool = { _ in false }, _ body: () async throws -> Void) async {
        var delay = configuration.initialRetryDelay
        while true {
            do {
                try await body()
                return
            } catch {
                if giveUpOn(error) || Task.isCancelled {
                    logger.warning("giving up", ["what": what, "error": "\(error)"])
                    return
                }
                logger.error("retrying after a failure", ["what": what, "error": "\(error)", "delay_ms": "\(delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000)"])
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, configuration.maximumRetryDelay)
            }
        }
    }
}

extension PostgresError {
    /// SQLSTATE classes 22 (data exception) and 23 (integrity constraint violation): the record's
    /// content is at fault, so retrying the same record cannot succeed.
    var isCausedByTheData: Bool {
        guard let state = sqlState else { return false }
        return state.hasPrefix("22") || state.hasPrefix("23")
    }
}
