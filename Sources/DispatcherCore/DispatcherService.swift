import APNs
import DispatcherStatus
import Kafka
import Postgres
import ServiceCore

/// The dispatcher as a `Service`: its PostgreSQL pool, Kafka producer and APNs client are created in
/// `run(shutdown:)`, not before, and shut down in order once the engine stopped: the engine first
/// (records finished, offsets stored, consumer closed), then the APNs client, the producer (flushed)
/// and the pool. See docs/lifecycle.md and docs/dispatcher-engine.md.
public struct DispatcherService: Service {
    /// Everything the service needs; executables fill it from the environment.
    public struct Settings: Sendable {
        /// The engine's settings.
        public var dispatcher: DispatcherConfiguration
        /// The APNs client's settings.
        public var apns: APNsClient.Configuration
        /// Provider-token (JWT) credentials for APNs.
        public var tokens: APNsProviderTokenCache
        /// libpq connection string of the token database.
        public var postgresURL: String
        /// The database password when it is not in `postgresURL` (`PUSH_PG_PASSWORD_FILE`). Default `nil`.
        public var postgresPassword: String? = nil
        /// Settings of the producer that publishes feedback and dead letters.
        public var producer: KafkaProducerConfiguration
        /// Readiness, scrape-time gauges and test hooks, read by the admin port.
        public var monitor: DispatcherMonitor
        /// How often the pool runs its cheap check (`SELECT 1`) for `/readyz`. Default 5 s.
        public var databaseCheckInterval: Duration = .seconds(5)

        /// - Parameters: see the properties.
        public init(dispatcher: DispatcherConfiguration, apns: APNsClient.Configuration, tokens: APNsProviderTokenCache,
                    postgresURL: String, producer: KafkaProducerConfiguration, monitor: DispatcherMonitor = DispatcherMonitor()) {
            self.monitor = monitor
            self.dispatcher = dispatcher
            self.apns = apns
            self.tokens = tokens
            self.postgresURL = postgresURL
            self.producer = producer
        }
    }

    private let settings: Settings
    private let logger: Logger
    /// Whether the four topics exist, checked at start and every 10 s while running: its `problem`
    /// names a missing topic (for logs and readiness).
    public let topicWatch: KafkaTopicWatch

    /// - Parameters:
    ///   - settings: see `Settings`.
    ///   - logger: the service's logger; components get a `component` field.
    public init(settings: Settings, logger: Logger) {
        self.settings = settings
        self.logger = logger
        self.topicWatch = KafkaTopicWatch(
            topics: settings.dispatcher.topics.all, bootstrapServers: settings.dispatcher.bootstrapServers,
            additionalProperties: settings.dispatcher.kafkaProperties, logger: logger.with(["component": "kafka.topics"]))
    }

    /// Starts the pool, the producer and the APNs client, runs the engine until graceful shutdown,
    /// then closes them in order.
    /// - Throws: `PostgresError` or `KafkaError` when a dependency cannot start or migrations fail.
    public func run(shutdown: GracefulShutdown) async throws {
        let readiness = settings.monitor.readiness
        readiness.usesDatabase()
        var poolConfiguration = PostgresPoolConfiguration(conninfo: settings.postgresURL)
        poolConfiguration.password = settings.postgresPassword
        let pool = PostgresPool(configuration: poolConfiguration, logger: logger.with(["component": "postgres"]))
        try await pool.start()
        // The admin port's GET /v1/requests/<id> reads through this pool while it is open.
        settings.monitor.setStatusLookup { requestID in
            try await pool.withConnection { try await RequestStatusReader.status(requestID: requestID, on: $0) }
        }
        defer { settings.monitor.setStatusLookup(nil) }
        // /readyz reads the last outcome of this loop, never a query of its own.
        let databaseChecks = Task { [interval = settings.databaseCheckInterval, logger] in
            var lastSucceeded = true
            while !Task.isCancelled {
                do {
                    let took = try await pool.healthCheck()
                    readiness.recordDatabaseCheck(succeeded: true, detail: "\(took.wholeMilliseconds) ms")
                    if !lastSucceeded { logger.notice("PostgreSQL check succeeds again") }
                    lastSucceeded = true
                } catch {
                    readiness.recordDatabaseCheck(succeeded: false, detail: "\(error)")
                    if lastSucceeded { logger.warning("PostgreSQL check failed", ["error": "\(error)"]) }
                    lastSucceeded = false
                }
                try? await Task.sleep(for: interval)
            }
        }
        defer { databaseChecks.cancel() }
        let producer: KafkaProducer
        do {
            producer = try KafkaProducer(configuration: settings.producer, logger: logger.with(["component": "kafka.producer"]))
        } catch {
            await pool.close()
            throw error
        }
        readiness.setProducer { producer.health.readinessInput }
        let client = APNsClient(configuration: settings.apns, tokens: settings.tokens, logger: logger.with(["component": "apns"]))
        let dispatcher = Dispatcher(
            configuration: settings.dispatcher, store: TokenStore(pool: pool, tokenRebindAfterDays: settings.dispatcher.intake.tokenRebindAfterDays), sender: client, producer: producer, logger: logger,
            monitor: settings.monitor)
        let watch = Task { [topicWatch] in await topicWatch.watch() }
        var failure: (any Error)?
        do {
            try await dispatcher.run(shutdown: shutdown)
        } catch {
            failure = error
        }
        readiness.setPhase(.stopping)
        readiness.setProducer(nil)
        watch.cancel()
        await client.shutdown()
        await producer.shutdown()
        await pool.close()
        if let failure { throw failure }
    }
}
