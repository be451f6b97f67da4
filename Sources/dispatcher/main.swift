import APNs
import DispatcherCore
import Foundation
import Kafka
import ServiceCore

// dispatcher: token events and send requests from Kafka → PostgreSQL and APNs → feedback.
// One service group: SIGTERM/SIGINT → graceful shutdown (running records finish, the finished prefix
// is committed), a second signal or PUSH_SHUTDOWN_GRACE_MS → cancellation (unfinished records are
// never committed). Exit 0 after a graceful stop, 1 otherwise. See docs/lifecycle.md.
ProcessSignals.ignoreSIGPIPE()
let logger = Logger(label: "dispatcher")
let group: ServiceGroup
do {
    let env = EnvironmentConfig()
    let bootstrap = env.string("PUSH_KAFKA_BOOTSTRAP", default: "127.0.0.1:9092").split(separator: ",").map(String.init)
    let explicitInstance = env.string("PUSH_INSTANCE_ID")
    var configuration = DispatcherConfiguration(
        bootstrapServers: bootstrap, instanceID: explicitInstance ?? ProcessInfo.processInfo.hostName)
    // Static membership only for an instance id the operator chose (stable across restarts).
    configuration.groupInstanceID = explicitInstance
    configuration.consumerGroup = env.string("PUSH_CONSUMER_GROUP", default: configuration.consumerGroup)
    configuration.sessionTimeout = try env.milliseconds("PUSH_KAFKA_SESSION_TIMEOUT_MS", default: configuration.sessionTimeout)
    configuration.fetchMaxWait = try env.milliseconds("PUSH_KAFKA_FETCH_WAIT_MAX_MS", default: configuration.fetchMaxWait)
    if let name = env.string("PUSH_KAFKA_REBALANCE_PROTOCOL") {
        switch name {
        case "cooperative": configuration.rebalanceProtocol = .cooperative
        case "eager": configuration.rebalanceProtocol = .eager
        default:
            throw EnvironmentConfig.Error(variable: "PUSH_KAFKA_REBALANCE_PROTOCOL", problem: "expected cooperative or eager, got \"\(name)\"")
        }
    }
    configuration.revokeDrain = try env.milliseconds("PUSH_REVOKE_DRAIN_MS", default: configuration.revokeDrain)
    configuration.maxInFlightPerPartition = try env.int("PUSH_MAX_IN_FLIGHT_PER_PARTITION", default: configuration.maxInFlightPerPartition, in: 1...Int.max)
    configuration.pauseThresholdPerPartition = try env.int("PUSH_PAUSE_THRESHOLD_PER_PARTITION", default: configuration.pauseThresholdPerPartition, in: 1...Int.max)
    configuration.maxInFlightRecords = try env.int("PUSH_MAX_IN_FLIGHT_RECORDS", default: configuration.maxInFlightRecords, in: 1...Int.max)
    configuration.maxInFlightNotifications = try env.int("PUSH_MAX_IN_FLIGHT_NOTIFICATIONS", default: configuration.maxInFlightNotifications, in: 1...Int.max)
    configuration.tokenEventBatchSize = try env.int("PUSH_TOKEN_EVENT_BATCH_SIZE", default: configuration.tokenEventBatchSize, in: 1...Int.max)
    configuration.deadLetterMaxBytes = try env.int("PUSH_DLQ_MAX_BYTES", default: configuration.deadLetterMaxBytes, in: 4096...Int.max)
    if let hours = env.string("PUSH_SEND_LOG_RETENTION_H") {
        guard let value = Int(hours), value >= 0 else {
            throw EnvironmentConfig.Error(variable: "PUSH_SEND_LOG_RETENTION_H", problem: "expected hours as a non-negative integer (0 keeps rows forever), got \"\(hours)\"")
        }
        configuration.sendLogRetention = value == 0 ? nil : .seconds(value * 3600)
    }
    configuration.campaigns = try CampaignSettings.fromEnvironment(env)
    if let name = env.string("PUSH_APNS_DEFAULT_ENVIRONMENT") {
        guard let environment = APNsEnvironment(rawValue: name) else {
            throw EnvironmentConfig.Error(variable: "PUSH_APNS_DEFAULT_ENVIRONMENT", problem: "expected sandbox or production, got \"\(name)\"")
        }
        configuration.defaultEnvironment = environment
    }

    let keyText: String
    if let inline = env.string("PUSH_APNS_KEY") {
        keyText = inline
    } else {
        let path = try env.required("PUSH_APNS_KEY_FILE")
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw EnvironmentConfig.Error(variable: "PUSH_APNS_KEY_FILE", problem: "cannot read \(path)")
        }
        keyText = text
    }
    let signingKey = try APNsSigningKey(p8: keyText)
    let tokens = APNsProviderTokenCache(
        signingKey: signingKey, keyID: try env.required("PUSH_APNS_KEY_ID"), teamID: try env.required("PUSH_APNS_TEAM_ID"))
    var apns = APNsClient.Configuration()
    if let url = env.string("PUSH_APNS_PRODUCTION_URL") { apns.production = try .init(url: url) }
    if let url = env.string("PUSH_APNS_SANDBOX_URL") { apns.sandbox = try .init(url: url) }
    apns.caFile = env.string("PUSH_APNS_CA_FILE")
    apns.connectionsPerPool = try env.int("PUSH_APNS_CONNECTIONS", default: apns.connectionsPerPool, in: 1...Int.max)
    apns.requestTimeout = try env.milliseconds("PUSH_APNS_REQUEST_TIMEOUT_MS", default: apns.requestTimeout)
    apns.retry.maxAttempts = try env.int("PUSH_APNS_MAX_ATTEMPTS", default: apns.retry.maxAttempts, in: 1...Int.max)
    if let cap = env.string("PUSH_APNS_MAX_REQUESTS_PER_SECOND_PER_CONNECTION") {
        guard let value = Int(cap), value > 0 else {
            throw EnvironmentConfig.Error(variable: "PUSH_APNS_MAX_REQUESTS_PER_SECOND_PER_CONNECTION", problem: "expected a positive integer, got \"\(cap)\"")
        }
        apns.maxRequestsPerSecondPerConnection = value
    }
    let settings = DispatcherService.Settings(
        dispatcher: configuration, apns: apns, tokens: tokens,
        postgresURL: env.string("PUSH_PG_URL", default: "postgresql://postgres@127.0.0.1:54329/push"),
        producer: KafkaProducerConfiguration(bootstrapServers: bootstrap))
    let gracePeriod = try env.milliseconds("PUSH_SHUTDOWN_GRACE_MS", default: .seconds(30))
    group = ServiceGroup(
        services: [DispatcherService(settings: settings, logger: logger)],
        configuration: .init(gracePeriod: gracePeriod), logger: logger.with(["component": "lifecycle"]))
} catch {
    logger.critical("dispatcher configuration invalid: \(error)")
    exit(1)
}
do {
    let outcome = try await group.run()
    logger.info("dispatcher exiting", ["outcome": "\(outcome)"])
    exit(outcome.isGraceful ? 0 : 1)
} catch {
    logger.critical("dispatcher failed: \(error)")
    exit(1)
}
