import Foundation
import GRPC
import Kafka
import ServiceCore

/// The registration service as a `Service`: starts the Kafka producer and the gRPC/JSON server in
/// `run(shutdown:)`, serves until graceful shutdown, then drains and flushes.
///
/// On graceful shutdown: stop accepting (GOAWAY on every connection, listener closed), let calls in
/// progress finish for up to `Configuration.drainTimeout` (each of them waits for Kafka's
/// acknowledgement), then flush the producer for up to `Configuration.flushTimeout` and destroy it;
/// `run` returns normally. On cancellation (escalation): drop every connection and destroy the
/// producer without waiting; `run` throws `CancellationError`.
public struct RegistrationService: Service {
    private let configuration: Configuration
    private let logger: Logger
    private let onListening: @Sendable (_ port: Int) -> Void
    /// Whether the token events topic exists, checked at start and every 10 s while running. While
    /// it is missing, calls fail at once with `UNAVAILABLE` naming the topic (instead of waiting for
    /// Kafka's metadata timeout), and its `problem` says so (for logs and readiness).
    public let topicWatch: KafkaTopicWatch

    /// Creates the service; nothing connects or binds before `run(shutdown:)`.
    /// - Parameters:
    ///   - configuration: Kafka, topic, server address and shutdown bounds.
    ///   - logger: the service's logger; the producer logs with `component=kafka.producer` added.
    ///   - onListening: called with the bound TCP port once the server accepts calls (tests use it
    ///     when the configured port is 0).
    public init(
        configuration: Configuration, logger: Logger = Logger(label: "registration-service"),
        onListening: @escaping @Sendable (_ port: Int) -> Void = { _ in }
    ) {
        self.configuration = configuration
        self.logger = logger
        self.onListening = onListening
        self.topicWatch = KafkaTopicWatch(
            topics: [configuration.topic], bootstrapServers: configuration.producer.bootstrapServers,
            additionalProperties: configuration.producer.additionalProperties, logger: logger.with(["component": "kafka.topics"]))
    }

    /// Serves `push.v1.TokenRegistry` until `shutdown` triggers, then shuts down as described on the type.
    /// - Throws: `KafkaError` when the producer cannot be created, `HTTP2Error` when the address cannot
    ///   be bound (the producer is then destroyed first), `CancellationError` after cancellation.
    public func run(shutdown: GracefulShutdown) async throws {
        let producer = try KafkaProducer(configuration: configuration.producer, logger: logger.with(["component": "kafka.producer"]))
        let service = TokenRegistryService(producer: producer, topic: configuration.topic, topicWatch: topicWatch, logger: logger)
        let watch = Task { [topicWatch] in await topicWatch.watch() }
        defer { watch.cancel() }
        let server: RegistrationServer
        do {
            server = try RegistrationServer.start(service: service, configuration: configuration.server)
        } catch {
            await producer.shutdown(timeout: .zero)
            throw error
        }
        logger.info("registration-service ready", ["port": "\(server.port)", "tls": configuration.server.http2.tls == nil ? "off" : "on"])
        onListening(server.port)

        await shutdown.wait()  // returns on the trigger, or at once on cancellation

        if !Task.isCancelled {
            logger.notice("registration-service draining: no new calls, finishing calls in progress", [
                "drain_timeout": "\(configuration.drainTimeout)",
            ])
            await withTaskCancellationHandler {
                await server.shutdown(gracePeriod: configuration.drainTimeout)
            } onCancel: {
                server.close()
            }
        }
        if Task.isCancelled {
            logger.warning("registration-service cancelled: dropping connections and unflushed events")
            server.close()
            await producer.shutdown(timeout: .zero)
            throw CancellationError()
        }
        logger.info("registration-service flushing the Kafka producer", [
            "pending": "\(producer.pendingCount)", "flush_timeout": "\(configuration.flushTimeout)",
        ])
        await producer.shutdown(timeout: configuration.flushTimeout)
        logger.info("registration-service stopped")
    }
}
