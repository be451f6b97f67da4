import APNs
import DispatcherCore
import Foundation
import Kafka
import Postgres
import ServiceCore

// dispatcher: token events and send requests from Kafka → PostgreSQL and APNs → feedback.
ProcessSignals.ignoreSIGPIPE()
let logger = Logger(label: "dispatcher")
do {
    let env = EnvironmentConfig()
    let bootstrap = env.string("PUSH_KAFKA_BOOTSTRAP", default: "127.0.0.1:9092").split(separator: ",").map(String.init)
    var configuration = DispatcherConfiguration(
        bootstrapServers: bootstrap, instanceID: env.string("PUSH_INSTANCE_ID", default: ProcessInfo.processInfo.hostName))
    configuration.consumerGroup = env.string("PUSH_CONSUMER_GROUP", default: configuration.consumerGroup)
    configuration.sessionTimeout = try env.milliseconds("PUSH_KAFKA_SESSION_TIMEOUT_MS", default: configuration.sessionTimeout)
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
    apns.connectionsPerPool = try env.int("PUSH_APNS_CONNECTIONS", default: apns.connectionsPerPool)
    apns.requestTimeout = try env.milliseconds("PUSH_APNS_REQUEST_TIMEOUT_MS", default: apns.requestTimeout)
    apns.retry.maxAttempts = try env.int("PUSH_APNS_MAX_ATTEMPTS", default: apns.retry.maxAttempts)
    if let cap = env.string("PUSH_APNS_MAX_REQUESTS_PER_SECOND_PER_CONNECTION") {
        guard let value = Int(cap), value > 0 else {
            throw EnvironmentConfig.Error(variable: "PUSH_APNS_MAX_REQUESTS_PER_SECOND_PER_CONNECTION", problem: "expected a positive integer, got \"\(cap)\"")
        }
        apns.maxRequestsPerSecondPerConnection = value
    }
    let client = APNsClient(configuration: apns, tokens: tokens, logger: logger.with(["component": "apns"]))

    let pool = PostgresPool(
        configuration: .init(conninfo: env.string("PUSH_PG_URL", default: "postgresql://postgres@127.0.0.1:54329/push")),
        logger: logger.with(["component": "postgres"]))
    try await pool.start()
    let producer = try KafkaProducer(configuration: .init(bootstrapServers: bootstrap), logger: logger.with(["component": "kafka.producer"]))
    let dispatcher = Dispatcher(
        configuration: configuration, store: TokenStore(pool: pool), sender: client, producer: producer, logger: logger)

    let run = Task { try await dispatcher.run() }
    let stop = Task {
        let signal = await ProcessSignals.waitForTermination()
        logger.info("dispatcher stopping", ["signal": "\(signal)"])
        run.cancel()
    }
    do {
        try await run.value
    } catch {
        logger.critical("dispatcher failed: \(error)")
        exit(1)
    }
    stop.cancel()
    await producer.shutdown()
    await client.shutdown()
    await pool.close()
    logger.info("dispatcher stopped")
} catch {
    logger.critical("dispatcher failed to start: \(error)")
    exit(1)
}
