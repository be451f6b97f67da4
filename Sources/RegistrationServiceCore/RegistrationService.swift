import Foundation
import GRPC
import Kafka
import PushMessages
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
    ///
    /// Its concurrent work is structured: the topic watch is a child of a task group that spans the whole
    /// call (serving, draining, flushing: calls in progress keep failing fast on a missing topic) and is
    /// cancelled when `run` returns or throws; the background work (Kafka health probes, key reloads) is
    /// a child of a nested group, cancelled as soon as the serving phase ends, before the drain, which
    /// does not wait for it to end. Neither waits for a Kafka probe in progress (it ends on its own
    /// thread), so `run` returns as soon as the flush is done.
    /// - Throws: `KafkaError` when the producer cannot be created, `HTTP2Error` when the address cannot
    ///   be bound (the producer is then destroyed first), `CancellationError` after cancellation.
    public func run(shutdown: GracefulShutdown) async throws {
        let authenticator = try RegistrationAuthenticator(configuration: configuration.auth, logger: logger.with(["component": "auth"]))
        let producer = try KafkaProducer(configuration: configuration.producer, logger: logger.with(["component": "kafka.producer"]))
        configuration.readiness.setProducer { producer.health.readinessInput }
        configuration.producerMetrics?.setProducer(producer)
        defer { configuration.producerMetrics?.setProducer(nil) }
        let service = TokenRegistryService(producer: producer, topic: configuration.topic, topicWatch: topicWatch, logger: logger)
        let health = GRPCHealthService(services: [TokenRegistry.serviceName])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { [topicWatch] in await topicWatch.watch() }
            defer { group.cancelAll() }
            let server: RegistrationServer
            do {
                server = try RegistrationServer.start(service: service, authenticator: authenticator, health: health, configuration: configuration.server)
            } catch {
                await producer.shutdown(timeout: .zero)
                throw error
            }
            logger.info("registration-service ready", [
                "port": "\(server.port)", "tls": configuration.server.http2.tls == nil ? "off" : "on",
                "auth": configuration.auth.disabled ? "DISABLED" : "on",
            ])
            // The calls are children of this group; the drain or `close` ends their loop (and the
            // group's end waits for it: every path out closes the server, at the latest here).
            group.addTask { await server.serve() }
            defer { server.close() }
            onListening(server.port)
            configuration.readiness.setPhase(.running)
            try await serve(server, producer: producer, authenticator: authenticator, health: health, until: shutdown)
        }
    }

    /// Runs the background work beside the serving phase, then drains `server` and flushes `producer`
    /// (see the type).
    ///
    /// The background work (Kafka health probes every `Configuration.healthProbeInterval`, and key
    /// reloads unless authentication is disabled) is a child of this call's task group: the group is
    /// cancelled as soon as `shutdown` triggers, before the health service enters shutdown and the drain
    /// begins; the drain and the flush go on while the children end (cancelling the group does not cancel
    /// this task), and the group awaits them before returning.
    /// - Throws: `CancellationError` after cancellation (connections dropped, producer destroyed without flushing).
    private func serve(
        _ server: RegistrationServer, producer: KafkaProducer, authenticator: RegistrationAuthenticator, health: GRPCHealthService,
        until shutdown: GracefulShutdown
    ) async throws {
        try await withThrowingDiscardingTaskGroup { background in
            background.addTask { await Self.monitorKafka(producer, health: health, every: configuration.healthProbeInterval, logger: logger) }
            if !configuration.auth.disabled {
                background.addTask { await Self.watchKeys(authenticator, file: configuration.auth.keysFile, every: configuration.keysReloadInterval) }
            }

            await shutdown.wait()  // returns on the trigger, or at once on cancellation
            configuration.readiness.setPhase(.stopping)
            background.cancelAll()
            health.enterShutdown()

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

    /// Probes Kafka (metadata request on a thread of its own) every `interval` and sets the health
    /// status: SERVING while a broker answers, NOT_SERVING otherwise. Returns at once on cancellation,
    /// also while a probe is in progress (`DedicatedThread.runUnlessCancelled`).
    static func monitorKafka(_ producer: KafkaProducer, health: GRPCHealthService, every interval: Duration, logger: Logger) async {
        let thread = DedicatedThread(name: "kafka-health")
        defer { thread.shutdown() }
        let timeout = max(interval, .seconds(1))
        var last: GRPCHealthService.Status?
        while !Task.isCancelled {
            let reachable: Bool
            do {
                // A probe in progress is not waited for on cancellation: it ends on the thread.
                reachable = try await thread.runUnlessCancelled { producer.brokersReachable(timeout: timeout) }
            } catch {
                return  // cancelled (the thread is shut down only when this returns)
            }
            let status: GRPCHealthService.Status = reachable ? .serving : .notServing
            if status != last {
                health.setStatus(status)
                if reachable {
                    logger.info("Kafka reachable: health SERVING")
                } else {
                    logger.warning("Kafka unreachable: health NOT_SERVING")
                }
                last = status
            }
            try? await Task.sleep(for: reachable ? interval : .milliseconds(250))
        }
    }

    /// Reloads the keys on SIGHUP, and when the key file's modification time or size changes
    /// (checked every `interval`; `FileReloadWatch`). Returns on cancellation.
    static func watchKeys(_ authenticator: RegistrationAuthenticator, file: String?, every interval: Duration) async {
        await FileReloadWatch.run(file: file, every: interval) { authenticator.reload() }
    }
}
