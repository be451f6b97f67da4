import ServiceCore
import Synchronization

/// Knows whether the topics a service needs exist, and says which do not.
///
/// A client never creates topics (`allow.auto.create.topics=false`), so a missing topic would make
/// every produce wait `topic.metadata.propagation.max.ms` and then fail without its name, and a
/// subscription to it would stay empty. The watch asks the brokers for their topic list
/// (`rd_kafka_metadata`, on a thread of its own) when `check()` is called and every `interval` while
/// `watch(every:)` runs, logs an error naming each missing topic when the set changes, and caches the
/// answer: `missingTopics` and `problem` are cheap to read on every call or readiness probe.
public final class KafkaTopicWatch: Sendable {
    /// The answer of the last check.
    public enum Status: Sendable, Equatable {
        /// No check finished yet.
        case unknown
        /// Every topic exists.
        case ready
        /// These topics do not exist (sorted).
        case missing([String])
        /// The brokers did not answer the metadata request.
        case unreachable(String)
    }

    /// The topics that must exist.
    public let topics: [String]
    private let properties: [(String, String)]
    private let logger: Logger
    private let thread: DedicatedThread
    private let state = Mutex<(status: Status, client: RDKafkaMetadataClient?)>((.unknown, nil))
    private let timeout: Duration

    /// - Parameters:
    ///   - topics: the topic names the service reads or writes.
    ///   - bootstrapServers: `bootstrap.servers`.
    ///   - additionalProperties: further librdkafka properties (the security settings of
    ///     `KafkaSecurity.properties`).
    ///   - timeout: how long one metadata request may take. Default 10 s.
    ///   - logger: where changes are reported.
    public init(
        topics: [String], bootstrapServers: [String], additionalProperties: [String: String] = [:],
        timeout: Duration = .seconds(10), logger: Logger
    ) {
        self.topics = topics
        var properties: [(String, String)] = [
            ("bootstrap.servers", bootstrapServers.joined(separator: ",")), ("client.id", "push-topic-check"),
        ]
        for key in additionalProperties.keys.sorted() { properties.append((key, additionalProperties[key]!)) }
        properties.append(("allow.auto.create.topics", "false"))
        self.properties = properties
        self.timeout = timeout
        self.logger = logger
        self.thread = DedicatedThread(name: "kafka-topic-check")
    }

    deinit {
        // The client's rd_kafka_destroy blocks: release it on the dedicated thread.
        let client = state.withLock { state in
            let client = state.client
            state.client = nil
            return client
        }
        if let client { thread.submit { _ = client } }
        thread.shutdown()
    }

    /// The result of the last check.
    public var status: Status { state.withLock { $0.status } }

    /// The topics the last check found missing (empty when all exist or no check finished).
    public var missingTopics: [String] {
        if case .missing(let names) = status { return names }
        return []
    }

    /// What keeps the service from being ready as far as topics go, for `/readyz` and error messages
    /// (`nil` when every topic exists): "topic push.feedback.v1 does not exist", "topics not checked
    /// yet", or the metadata error.
    public var problem: String? {
        switch status {
        case .ready: nil
        case .unknown: "Kafka topics not checked yet"
        case .missing(let names):
            names.count == 1
                ? "topic \(names[0]) does not exist" : "topics \(names.joined(separator: ", ")) do not exist"
        case .unreachable(let reason): "Kafka metadata unavailable: \(reason)"
        }
    }

    /// Asks the brokers now and updates `status`.
    /// - Returns: the missing topics (empty when every topic exists).
    /// - Throws: `KafkaError` when the client cannot be created or the brokers do not answer within the
    ///   timeout (`status` becomes `.unreachable`, except that a known answer is kept);
    ///   `CancellationError` at once when the calling task is cancelled (the metadata request, which
    ///   blocks, still ends on the watch's thread; its answer is dropped and `status` kept).
    @discardableResult
    public func check() async throws -> [String] {
        let properties = self.properties, timeout = self.timeout, logger = self.logger
        let result: Result<Set<String>, KafkaError> = try await thread.runUnlessCancelled { [self] in
            // Only this thread creates the client, so reading then storing it needs no single lock scope.
            let existing = state.withLock { $0.client }
            let client: RDKafkaMetadataClient
            if let existing {
                client = existing
            } else {
                do {
                    client = try RDKafkaMetadataClient(properties: properties, logger: logger)
                } catch let error as KafkaError {
                    return .failure(error)
                } catch {
                    return .failure(KafkaError(code: .invalidArgument, message: "\(error)"))
                }
                state.withLock { $0.client = client }
            }
            do {
                return .success(try client.topicNames(timeout: timeout))
            } catch let error as KafkaError {
                return .failure(error)
            } catch {
                return .failure(KafkaError(code: .invalidArgument, message: "\(error)"))
            }
        }
        switch result {
        case .success(let present):
            let missing = topics.filter { !present.contains($0) }.sorted()
            update(missing.isEmpty ? .ready : .missing(missing))
            return missing
        case .failure(let error):
            state.withLock { s in
                if s.status == .unknown { s.status = .unreachable(error.message) }
            }
            throw error
        }
    }

    /// Checks every `interval` until the task is cancelled, and returns at once then (a check in
    /// progress is not waited for). Errors are logged, never thrown.
    public func watch(every interval: Duration = .seconds(10)) async {
        while !Task.isCancelled {
            do {
                try await check()
            } catch is CancellationError {
                return
            } catch {
                logger.warning("Kafka topic check failed", ["error": "\(error)"])
            }
            try? await Task.sleep(for: interval)
        }
    }

    private func update(_ new: Status) {
        let old = state.withLock { s in
            let old = s.status
            s.status = new
            return old
        }
        guard old != new else { return }
        switch new {
        case .missing(let names):
            for name in names {
                logger.error("Kafka topic does not exist; create it (clients never create topics)", ["topic": name])
            }
        case .ready where old != .unknown:
            logger.notice("Kafka topics present", ["topics": topics.joined(separator: ",")])
        default:
            break
        }
    }
}
