import APNs
import APNsKeyRegistry
import DispatcherStatus
import Kafka
import Postgres
import ServiceCore

/// The dispatcher as a `Service`: its PostgreSQL pool, Kafka producer and APNs client are opened in
/// `run(shutdown:)`, in that order, and run with the topic watch, the credentials file's reload and the
/// dispatcher's sources as a nested `ServiceGroup` that stops in reverse start order: the sources first
/// (all at once: records finished, offsets stored, consumer closed, campaigns and re-drives drained),
/// then the credentials reload, the topic watch, the APNs client, the producer (flushed) and the pool.
/// See docs/lifecycle.md and
/// docs/dispatcher-engine.md.
public struct DispatcherService: Service {
    /// Everything the service needs; executables fill it from the environment.
    public struct Settings: Sendable {
        /// The engine's settings.
        public var dispatcher: DispatcherConfiguration
        /// The APNs client's settings.
        public var apns: APNsClient.Configuration
        /// The APNs credentials registry (`PUSH_APNS_CREDENTIALS_FILE` or the single-key shorthand):
        /// the key of every send.
        public var credentials: CredentialsStore
        /// How often the credentials file's modification time and size are checked for a reload
        /// (SIGHUP reloads at once). Default 2 seconds.
        public var credentialsReloadInterval: Duration = .seconds(2)
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
        public init(dispatcher: DispatcherConfiguration, apns: APNsClient.Configuration, credentials: CredentialsStore,
                    postgresURL: String, producer: KafkaProducerConfiguration, monitor: DispatcherMonitor = DispatcherMonitor()) {
            self.monitor = monitor
            self.dispatcher = dispatcher
            self.apns = apns
            self.credentials = credentials
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

    /// Opens the pool, the producer and the APNs client, runs them with the engine until graceful
    /// shutdown, then closes them in reverse order.
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
        settings.monitor.setDatabasePool { pool.statistics }
        defer { settings.monitor.setDatabasePool(nil) }
        settings.monitor.setChannelLookup(.init(store: ChannelStore(pool: pool)))
        defer { settings.monitor.setChannelLookup(nil) }
        let producer: KafkaProducer
        do {
            producer = try KafkaProducer(configuration: settings.producer, logger: logger.with(["component": "kafka.producer"]))
        } catch {
            await pool.close()
            throw error
        }
        readiness.setProducer { producer.health.readinessInput }
        settings.monitor.setProducer(producer)
        defer { settings.monitor.setProducer(nil) }
        // Every send names its credentials (the registry's choice); the client has no default.
        let client = APNsClient(configuration: settings.apns, credentials: [:], logger: logger.with(["component": "apns"]))
        settings.monitor.setKeyFallbacks { client.keysInFallback() }
        defer { settings.monitor.setKeyFallbacks(nil) }
        var configuration = settings.dispatcher
        configuration.credentials = settings.credentials
        let dispatcher = Dispatcher(
            configuration: configuration, store: TokenStore(pool: pool, tokenRebindAfterDays: settings.dispatcher.intake.tokenRebindAfterDays), sender: client, producer: producer, logger: logger,
            monitor: settings.monitor)
        defer { readiness.setPhase(.stopping) }
        let group = ServiceGroup(
            configuredServices: [
                .init(PostgresPoolService(pool: pool, checkInterval: settings.databaseCheckInterval, readiness: readiness, logger: logger), name: "postgres pool"),
                .init(KafkaProducerService(producer: producer, readiness: readiness), name: "kafka producer"),
                .init(APNsClientService(client: client), name: "apns client"),
                .init(KafkaTopicWatchService(watch: topicWatch), name: "kafka topic watch"),
                .init(CredentialsReloadService(store: settings.credentials, interval: settings.credentialsReloadInterval,
                                               drain: { _ = await client.drain($0) }),
                      name: "apns credentials reload"),
                .init(dispatcher, name: "dispatcher"),
            ],
            configuration: .nested(shutdownOrder: .reverseStartOrder), logger: logger.with(["component": "lifecycle"]))
        try await group.run(shutdown: shutdown)
    }
}

extension Dispatcher: Service {}

/// The pool, opened before the group runs (the engine migrates through it): runs the cheap check
/// whose last outcome `/readyz` reads until asked to stop, then closes the pool.
struct PostgresPoolService: Service {
    let pool: PostgresPool
    let checkInterval: Duration
    let readiness: ReadinessState
    let logger: Logger

    func run(shutdown: GracefulShutdown) async {
        var lastSucceeded = true
        while !shutdown.isTriggered, !Task.isCancelled {
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
            do { try await shutdown.sleep(for: checkInterval) } catch { break }
        }
        await pool.close()
    }
}

/// The producer, created before the group runs: when asked to stop (every source has returned) it
/// delivers what is still queued and is destroyed.
struct KafkaProducerService: Service {
    let producer: KafkaProducer
    let readiness: ReadinessState

    func run(shutdown: GracefulShutdown) async {
        await shutdown.wait()
        readiness.setProducer(nil)
        await producer.shutdown()
    }
}

/// The APNs client: when asked to stop, its connections close.
struct APNsClientService: Service {
    let client: APNsClient

    func run(shutdown: GracefulShutdown) async {
        await shutdown.wait()
        await client.shutdown()
    }
}

/// Checks every 10 s that the four topics exist (`KafkaTopicWatch`) until asked to stop.
struct KafkaTopicWatchService: Service {
    let watch: KafkaTopicWatch

    func run(shutdown: GracefulShutdown) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await watch.watch() }
            await shutdown.wait()
            group.cancelAll()
        }
    }
}
