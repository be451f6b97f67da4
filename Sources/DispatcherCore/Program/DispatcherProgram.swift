import AdminHTTP
import APNs
import APNsKeyRegistry
import Foundation
import Kafka
import ServiceCore

/// The `dispatcher` executable: token events and send requests from Kafka → PostgreSQL and APNs →
/// feedback. Its settings (README "Settings") are read here, once, for `--help`, `--check-config`
/// and start alike (`ServiceMain`).
public enum DispatcherProgram {
    /// What `dispatcher --help` prints before the settings.
    public static let usage = """
        usage: dispatcher [--check-config | --help]

        Consumes push.token-events.v1 and push.send-requests.v1, keeps tokens in PostgreSQL, sends to APNs
        and publishes push.feedback.v1. SIGTERM/SIGINT: graceful shutdown (running records finish, the
        finished prefix is committed); a second signal or PUSH_SHUTDOWN_GRACE_MS: cancellation. Exit 0
        after a graceful stop, 1 otherwise (docs/lifecycle.md). The admin port (PUSH_ADMIN_PORT) serves
        /metrics, /healthz, /readyz and GET /v1/requests/<id>.
        """

    /// The program: `DispatcherProgram.main.run()` is the whole of `main.swift`.
    public static let main = ServiceMain(program: "dispatcher", usage: usage, load: load)

    /// Reads every setting the dispatcher starts with; problems are reported through `env`.
    /// - Throws: `EnvironmentConfig.Error` at the first bad setting unless `env` collects errors.
    public static func load(_ env: EnvironmentConfig) throws -> ServiceMain.Launch {
        let bootstrap = env.string("PUSH_KAFKA_BOOTSTRAP", default: "127.0.0.1:9092").split(separator: ",").map(String.init)
        let kafkaSecurity = try KafkaSecurity(environment: env)
        let explicitInstance = env.string("PUSH_INSTANCE_ID")
        var configuration = DispatcherConfiguration(
            bootstrapServers: bootstrap, instanceID: explicitInstance ?? ProcessInfo.processInfo.hostName)
        // Static membership only for an instance id the operator chose (stable across restarts).
        configuration.groupInstanceID = explicitInstance
        configuration.consumerGroup = env.string("PUSH_CONSUMER_GROUP", default: configuration.consumerGroup)
        configuration.topics.tokenEvents = env.string("PUSH_TOPIC_TOKEN_EVENTS", default: configuration.topics.tokenEvents)
        configuration.topics.sendRequests = env.string("PUSH_TOPIC_SEND_REQUESTS", default: configuration.topics.sendRequests)
        configuration.topics.feedback = env.string("PUSH_TOPIC_FEEDBACK", default: configuration.topics.feedback)
        configuration.topics.deadLetter = env.string("PUSH_TOPIC_DEAD_LETTER", default: configuration.topics.deadLetter)
        configuration.kafkaProperties = kafkaSecurity.properties
        configuration.sessionTimeout = try env.milliseconds("PUSH_KAFKA_SESSION_TIMEOUT_MS", default: configuration.sessionTimeout)
        configuration.fetchMaxWait = try env.milliseconds("PUSH_KAFKA_FETCH_WAIT_MAX_MS", default: configuration.fetchMaxWait)
        configuration.rebalanceProtocol = try env.choice(
            "PUSH_KAFKA_REBALANCE_PROTOCOL", default: configuration.rebalanceProtocol, ["cooperative": .cooperative, "eager": .eager])
        configuration.revokeDrain = try env.milliseconds("PUSH_REVOKE_DRAIN_MS", default: configuration.revokeDrain)
        configuration.maxInFlightPerPartition = try env.int(
            "PUSH_MAX_IN_FLIGHT_PER_PARTITION", default: configuration.maxInFlightPerPartition, in: 1...100_000)
        configuration.pauseThresholdPerPartition = try env.int(
            "PUSH_PAUSE_THRESHOLD_PER_PARTITION", default: configuration.pauseThresholdPerPartition, in: 1...10_000_000)
        configuration.maxInFlightRecords = try env.int("PUSH_MAX_IN_FLIGHT_RECORDS", default: configuration.maxInFlightRecords, in: 1...10_000_000)
        configuration.maxInFlightRecordBytes = try env.int(
            "PUSH_MAX_IN_FLIGHT_RECORD_BYTES", default: configuration.maxInFlightRecordBytes, in: 1...1_099_511_627_776)
        configuration.maxInFlightNotifications = try env.int(
            "PUSH_MAX_IN_FLIGHT_NOTIFICATIONS", default: configuration.maxInFlightNotifications, in: 1...100_000)
        configuration.tokenEventBatchSize = try env.int("PUSH_TOKEN_EVENT_BATCH_SIZE", default: configuration.tokenEventBatchSize, in: 1...100_000)
        configuration.deadLetterMaxBytes = try env.int("PUSH_DLQ_MAX_BYTES", default: configuration.deadLetterMaxBytes, in: 4096...1_000_000_000)
        configuration.retryParking.maxUncommittedRecords = try env.int(
            "PUSH_MAX_UNCOMMITTED_RECORDS", default: configuration.retryParking.maxUncommittedRecords, in: 1...10_000_000)
        configuration.retryParking.maxUncommittedAge = try env.milliseconds(
            "PUSH_MAX_UNCOMMITTED_AGE_MS", default: configuration.retryParking.maxUncommittedAge)
        configuration.pendingRetryScanInterval = try env.milliseconds("PUSH_PENDING_RETRY_SCAN_MS", default: configuration.pendingRetryScanInterval)
        configuration.pendingRetryLease = try env.milliseconds("PUSH_PENDING_RETRY_LEASE_MS", default: configuration.pendingRetryLease)
        // Every integer setting has an upper bound far above sensible values, so that no number can
        // overflow where it is used (README "Configuration").
        let retentionHours = try env.int("PUSH_SEND_LOG_RETENTION_H", default: 192, in: 0...876_000)
        configuration.sendLogRetention = retentionHours == 0 ? nil : .seconds(retentionHours * 3600)
        configuration.sendLogAcknowledgementMarks = try env.bool("PUSH_SEND_LOG_ACK_MARKS", default: configuration.sendLogAcknowledgementMarks)
        configuration.cancelPollInterval = try env.milliseconds("PUSH_CANCEL_POLL_MS", default: configuration.cancelPollInterval)
        if configuration.cancelPollInterval <= .zero { try env.fail("PUSH_CANCEL_POLL_MS", "must be positive") }
        configuration.defaultEnvironment = try env.choice(
            "PUSH_APNS_DEFAULT_ENVIRONMENT", default: configuration.defaultEnvironment, ["sandbox": .sandbox, "production": .production])
        configuration.campaigns = try CampaignSettings.fromEnvironment(env)
        configuration.intake = try IntakeSettings.fromEnvironment(env)
        // Apps with one try on the other APNs environment after BadDeviceToken.
        configuration.otherEnvironmentRetry = try OtherEnvironmentRetrySettings.fromEnvironment(env)
        configuration.tokenHygiene = try tokenHygiene(env)
        configuration.channels = try ChannelSettings.fromEnvironment(env)

        let credentials = try apnsCredentials(env)
        let apns = try apnsClient(env)
        let postgresURL = env.string("PUSH_PG_URL", default: "postgresql://postgres@127.0.0.1:54329/push")
        let postgresPassword = try env.fileContents("PUSH_PG_PASSWORD_FILE")
        var producer = KafkaProducerConfiguration(bootstrapServers: bootstrap)
        // librdkafka's bound for linger.ms is 900,000.
        producer.linger = .milliseconds(try env.int("PUSH_KAFKA_LINGER_MS", default: Int(feedbackLinger.wholeMilliseconds), in: 0...900_000))
        producer.additionalProperties = kafkaSecurity.properties
        let databaseCheckInterval = try env.milliseconds("PUSH_PG_CHECK_INTERVAL_MS", default: .seconds(5))
        let gracePeriod = try env.milliseconds("PUSH_SHUTDOWN_GRACE_MS", default: .seconds(30))
        // Freed memory back to the system every so often (README "Operations", memory); 0 turns it off.
        let trimInterval = try env.milliseconds("PUSH_MALLOC_TRIM_INTERVAL_MS", default: .seconds(10))
        let admin = try AdminServer.Settings(environment: env, defaultPort: 9102)
        guard let credentials else { return ServiceMain.Launch(gracePeriod: gracePeriod) { _ in ServiceMain.Start(services: []) } }
        let dispatcher = configuration
        let kafkaProducer = producer
        return ServiceMain.Launch(gracePeriod: gracePeriod) { logger in
            if trimInterval > .zero { MallocArenas.startTrimming(every: trimInterval) }
            let monitor = DispatcherMonitor()
            var settings = DispatcherService.Settings(
                dispatcher: dispatcher, apns: apns, credentials: credentials, postgresURL: postgresURL, producer: kafkaProducer, monitor: monitor)
            settings.postgresPassword = postgresPassword
            settings.databaseCheckInterval = databaseCheckInterval
            return ServiceMain.Start(
                services: [DispatcherService(settings: settings, logger: logger)],
                infrastructure: [adminService(admin, monitor: monitor, credentials: credentials, logger: logger)])
        }
    }

    /// The admin port: the standard endpoints, the request-status, channel and credentials routes and the
    /// test hook that wedges the Kafka poll thread.
    static func adminService(
        _ settings: AdminServer.Settings, monitor: DispatcherMonitor, credentials: CredentialsStore, logger: Logger
    ) -> AdminService {
        AdminService(
            settings: settings, readiness: monitor.readiness,
            testHooks: [
                "wedge-kafka-poll": { query in
                    let seconds = query("seconds").flatMap(Int.init) ?? 60
                    guard monitor.wedgeConsumerPollForTesting(for: .seconds(seconds)) else {
                        return AdminResponse(status: 409, body: "no consumer running\n")
                    }
                    return AdminResponse(status: 200, body: "Kafka poll thread wedged for \(seconds) s\n")
                },
            ],
            asyncRoutes: [
                AdminEndpoints.AsyncRoute(prefix: RequestStatusEndpoint.pathPrefix) { requestID in
                    let answer = await monitor.requestStatusAnswer(requestID: requestID)
                    return AdminResponse(status: answer.status, contentType: AdminResponse.json, body: answer.body + "\n")
                },
                AdminEndpoints.AsyncRoute(prefix: ChannelStatusEndpoint.pathPrefix) { path in
                    let answer = await monitor.channelStatusAnswer(path: path)
                    return AdminResponse(status: answer.status, contentType: AdminResponse.json, body: answer.body + "\n")
                },
                // GET /v1/credentials: each key's state, last mint and last refusal (CredentialsReport;
                // never key material).
                AdminEndpoints.AsyncRoute(prefix: credentialsPath) { rest in
                    guard rest.isEmpty else { return AdminResponse(status: 404, body: "no such path\n") }
                    let report = credentials.report(fallbacks: monitor.keysInFallback())
                    return AdminResponse(status: 200, contentType: AdminResponse.json, body: report.json + "\n")
                },
            ],
            logger: logger)
    }

    /// The admin port's credentials route (`CredentialsReport`).
    public static let credentialsPath = "/v1/credentials"

    /// `linger.ms` of the feedback producer (`PUSH_KAFKA_LINGER_MS`): 10 ms, not the library's 5.
    /// librdkafka's idempotent producer counts its in-flight limit of 5 in records, so once a
    /// partition's batch of 5 or more records is in flight the next batch waits for its answer, and
    /// its broker thread polls without sleeping from the moment that batch's `linger.ms` ran out until
    /// the answer arrives. A `linger.ms` at or above the brokers' produce round trip never spins; under
    /// steady traffic it adds no delay either, as the next batch waits for the answer anyway
    /// (docs/capacity.md "Produce round trips").
    static let feedbackLinger: Duration = .milliseconds(10)

    /// Token hygiene (docs/token-hygiene.md): stale ageing and inactive-row deletion are off until set.
    static func tokenHygiene(_ env: EnvironmentConfig) throws -> TokenHygieneSettings {
        var hygiene = TokenHygieneSettings()
        if env.string("PUSH_TOKEN_STALE_AFTER_DAYS") != nil {
            hygiene.staleAfterDays = try env.int("PUSH_TOKEN_STALE_AFTER_DAYS", default: 90, in: 1...36_500)
        }
        if env.string("PUSH_TOKEN_DELETE_INACTIVE_AFTER_DAYS") != nil {
            hygiene.deleteInactiveAfterDays = try env.int("PUSH_TOKEN_DELETE_INACTIVE_AFTER_DAYS", default: 1, in: 1...36_500)
        }
        let campaignRetentionDays = try env.int(
            "PUSH_CAMPAIGN_RETENTION_DAYS", default: hygiene.campaignRetentionDays ?? 0, in: 0...36_500)
        hygiene.campaignRetentionDays = campaignRetentionDays == 0 ? nil : campaignRetentionDays
        hygiene.interval = try env.milliseconds("PUSH_TOKEN_HYGIENE_INTERVAL_MS", default: hygiene.interval)
        if hygiene.interval <= .zero { try env.fail("PUSH_TOKEN_HYGIENE_INTERVAL_MS", "must be positive") }
        hygiene.batchSize = try env.int("PUSH_TOKEN_HYGIENE_BATCH_SIZE", default: hygiene.batchSize, in: 1...100_000)
        return hygiene
    }

    /// The APNs credentials: `PUSH_APNS_CREDENTIALS_FILE` (every key loaded and parsed; errors name
    /// the file and the entry), or the single-key shorthand (`providerToken`) as one entry `*`. Both at
    /// once are refused: which one is meant cannot be guessed.
    /// - Returns: `nil` when a variable is bad (reported through `env`).
    static func apnsCredentials(_ env: EnvironmentConfig) throws -> CredentialsStore? {
        guard let file = env.string("PUSH_APNS_CREDENTIALS_FILE") else {
            return try providerToken(env).map { CredentialsStore(single: $0) }
        }
        let shorthand = ["PUSH_APNS_TEAM_ID", "PUSH_APNS_KEY_ID", "PUSH_APNS_KEY_FILE", "PUSH_APNS_KEY"].filter { env.string($0) != nil }
        if !shorthand.isEmpty {
            try env.fail("PUSH_APNS_CREDENTIALS_FILE", "is set together with \(shorthand.joined(separator: ", ")): set either the credentials file or the single key, not both")
            return nil
        }
        return try env.attempt("PUSH_APNS_CREDENTIALS_FILE") { try CredentialsStore(file: file) }
    }

    /// The provider token: the `.p8` key inline (`PUSH_APNS_KEY`) or from a file (`PUSH_APNS_KEY_FILE`),
    /// parsed as start parses it, with `PUSH_APNS_KEY_ID` and `PUSH_APNS_TEAM_ID`.
    /// - Returns: `nil` when a variable is bad (reported through `env`).
    static func providerToken(_ env: EnvironmentConfig) throws -> APNsProviderTokenCache? {
        let keyVariable = env.string("PUSH_APNS_KEY") != nil ? "PUSH_APNS_KEY" : "PUSH_APNS_KEY_FILE"
        let keyText: String? = keyVariable == "PUSH_APNS_KEY" ? env.string("PUSH_APNS_KEY") : try env.fileContents("PUSH_APNS_KEY_FILE")
        if keyText == nil, env.string("PUSH_APNS_KEY_FILE") == nil {
            try env.fail("PUSH_APNS_KEY_FILE", "is required (or PUSH_APNS_KEY with the .p8 text)")
        }
        let signingKey = try keyText.flatMap { text in try env.attempt(keyVariable) { try APNsSigningKey(p8: text) } }
        let keyID = try env.required("PUSH_APNS_KEY_ID")
        let teamID = try env.required("PUSH_APNS_TEAM_ID")
        guard let signingKey, !keyID.isEmpty, !teamID.isEmpty else { return nil }
        return APNsProviderTokenCache(signingKey: signingKey, keyID: keyID, teamID: teamID)
    }

    /// The APNs client's endpoints, CA file, connections and timeouts (`PUSH_APNS_*`).
    static func apnsClient(_ env: EnvironmentConfig) throws -> APNsClient.Configuration {
        var apns = APNsClient.Configuration()
        if let url = env.string("PUSH_APNS_PRODUCTION_URL"),
            let endpoint = try env.attempt("PUSH_APNS_PRODUCTION_URL", { try APNsClient.Configuration.Endpoint(url: url) })
        {
            apns.production = endpoint
        }
        if let url = env.string("PUSH_APNS_SANDBOX_URL"),
            let endpoint = try env.attempt("PUSH_APNS_SANDBOX_URL", { try APNsClient.Configuration.Endpoint(url: url) })
        {
            apns.sandbox = endpoint
        }
        // Broadcast channels (docs/live-activities.md "Where Apple is"): channel management and broadcast hosts.
        for (variable, path) in [
            ("PUSH_APNS_CHANNELS_URL_PRODUCTION", \APNsClient.Configuration.channelsProduction),
            ("PUSH_APNS_CHANNELS_URL_SANDBOX", \APNsClient.Configuration.channelsSandbox),
            ("PUSH_APNS_BROADCAST_URL_PRODUCTION", \APNsClient.Configuration.broadcastProduction),
            ("PUSH_APNS_BROADCAST_URL_SANDBOX", \APNsClient.Configuration.broadcastSandbox),
        ] {
            if let url = env.string(variable), let endpoint = try env.attempt(variable, { try APNsClient.Configuration.Endpoint(url: url) }) {
                apns[keyPath: path] = endpoint
            }
        }
        apns.caFile = env.string("PUSH_APNS_CA_FILE")
        if let caFile = apns.caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            try env.fail("PUSH_APNS_CA_FILE", "cannot read \(caFile)")
        }
        apns.connectionsPerPool = try env.int("PUSH_APNS_CONNECTIONS", default: apns.connectionsPerPool, in: 1...1_000)
        apns.keyRetryDelay = try env.milliseconds("PUSH_APNS_KEY_RETRY_MS", default: apns.keyRetryDelay)
        apns.idleCloseAfter = try env.milliseconds("PUSH_APNS_POOL_IDLE_CLOSE_MS", default: apns.idleCloseAfter)
        apns.requestTimeout = try env.milliseconds("PUSH_APNS_REQUEST_TIMEOUT_MS", default: apns.requestTimeout)
        apns.retryHorizon.absent = try env.milliseconds("PUSH_APNS_RETRY_HORIZON_MS", default: apns.retryHorizon.absent)
        apns.retryHorizon.immediate = try env.milliseconds("PUSH_APNS_RETRY_HORIZON_IMMEDIATE_MS", default: apns.retryHorizon.immediate)
        if env.string("PUSH_APNS_MAX_REQUESTS_PER_SECOND_PER_CONNECTION") != nil {
            apns.maxRequestsPerSecondPerConnection = try env.int(
                "PUSH_APNS_MAX_REQUESTS_PER_SECOND_PER_CONNECTION", default: 1, in: 1...1_000_000)
        }
        return apns
    }
}
