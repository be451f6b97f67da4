import Foundation
import Kafka
import ServiceCore

/// The Kafka clients `pushctl` uses: a producer, and readers in a consumer group of their own that
/// never commits (so they disturb no one and leave nothing behind but an empty group).
enum KafkaTools {
    /// A producer for `settings` (idempotent, acks=all; `message.timeout.ms` 30 s so an unreachable
    /// broker fails the command instead of hanging).
    static func producer(_ arguments: CommandLineArguments, _ settings: PushCtlSettings) throws -> KafkaProducer {
        var configuration = KafkaProducerConfiguration(bootstrapServers: settings.bootstrap(arguments))
        configuration.clientID = "pushctl"
        configuration.messageTimeout = .seconds(30)
        configuration.additionalProperties = try settings.kafkaProperties()
        return try KafkaProducer(configuration: configuration, logger: quietLogger("kafka.producer"))
    }

    /// A reader of `topic` in a fresh group, returned once it has its partitions (so that records
    /// produced afterwards are seen even when starting from the newest).
    /// - Throws: `PushCtlError` (`.unavailable`) when no assignment arrives within `timeout`.
    static func reader(
        topic: String, fromBeginning: Bool, _ arguments: CommandLineArguments, _ settings: PushCtlSettings,
        timeout: Duration = .seconds(30)
    ) async throws -> KafkaConsumer {
        var configuration = KafkaConsumerConfiguration(
            bootstrapServers: settings.bootstrap(arguments), groupID: "pushctl-\(UUID().uuidString.lowercased())", topics: [topic])
        configuration.clientID = "pushctl"
        configuration.offsetCommit = .explicit
        configuration.autoOffsetReset = fromBeginning ? .earliest : .latest
        configuration.sessionTimeout = .seconds(10)
        configuration.rebalanceProtocol = .eager
        configuration.additionalProperties = try settings.kafkaProperties()
        let consumer = try KafkaConsumer(configuration: configuration, logger: quietLogger("kafka.consumer"))
        let deadline = ContinuousClock.now + timeout
        while consumer.assignment.isEmpty {
            guard ContinuousClock.now < deadline else {
                await consumer.close()
                throw PushCtlError(.unavailable, "no partitions of \(topic) assigned within \(timeout) (is Kafka at \(settings.bootstrap(arguments).joined(separator: ",")) reachable, and does the topic exist?)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        // With `latest`, the start offset is looked up right after the assignment: give the lookup a
        // moment so that a record produced next is not skipped.
        if !fromBeginning { try await Task.sleep(for: .milliseconds(500)) }
        return consumer
    }

    /// Whether `topic` exists; throws naming it when not.
    /// - Throws: `PushCtlError` (`.failed`) naming the missing topic, (`.unavailable`) when Kafka
    ///   does not answer.
    static func requireTopics(_ topics: [String], _ arguments: CommandLineArguments, _ settings: PushCtlSettings) async throws {
        let watch = KafkaTopicWatch(
            topics: topics, bootstrapServers: settings.bootstrap(arguments), additionalProperties: try settings.kafkaProperties(),
            logger: quietLogger("kafka.topics"))
        let missing: [String]
        do {
            missing = try await watch.check()
        } catch {
            let failure = PushCtlError(.unavailable, "Kafka at \(settings.bootstrap(arguments).joined(separator: ",")) did not answer: \(error)")
            throw arguments.value("bootstrap") == nil ? settings.withSettingsHint(failure, variable: "PUSH_KAFKA_BOOTSTRAP", option: "--bootstrap") : failure
        }
        if !missing.isEmpty {
            throw PushCtlError(.failed, missing.count == 1 ? "topic \(missing[0]) does not exist" : "topics \(missing.joined(separator: ", ")) do not exist")
        }
    }

    /// A logger that only reports errors (librdkafka's warnings would interleave with the output).
    static func quietLogger(_ label: String) -> Logger {
        var logger = Logger(label: label)
        logger.logLevel = .error
        return logger
    }
}
