import AdminHTTP
import Foundation
import GRPC
import HTTP2
import Kafka
import RegistrationServiceCore
import ServiceCore

// registration-service: push.v1.TokenRegistry over gRPC (and JSON over HTTP/2) → push.token-events.v1.
// One service group: SIGTERM/SIGINT → graceful shutdown (drain calls, flush Kafka), a second signal or
// PUSH_SHUTDOWN_GRACE_MS → cancellation. Exit 0 after a graceful stop, 1 otherwise. See docs/lifecycle.md.
// `registration-service --check-config` validates the environment, prints the effective configuration
// (secrets masked) and exits 0, or 2 naming every bad setting, without binding or connecting.
ProcessSignals.ignoreSIGPIPE()
let logger = Logger(label: "registration-service")
let checking = EnvironmentConfig.checkRequested
let env = EnvironmentConfig(collectingErrors: checking)
let group: ServiceGroup
let admin: AdminServer
do {
    let bootstrap = env.string("PUSH_KAFKA_BOOTSTRAP", default: "127.0.0.1:9092").split(separator: ",").map(String.init)
    var producer = KafkaProducerConfiguration(bootstrapServers: bootstrap)
    producer.additionalProperties = try KafkaSecurity(environment: env).properties
    // A caller waits for Kafka's acknowledgement: fail with UNAVAILABLE rather than hang for minutes.
    producer.messageTimeout = try env.milliseconds("PUSH_KAFKA_MESSAGE_TIMEOUT_MS", default: .seconds(30))
    var http2 = HTTP2Server.Configuration(
        host: env.string("PUSH_GRPC_HOST", default: "0.0.0.0"), port: try env.int("PUSH_GRPC_PORT", default: 50051, in: 0...65535))
    if let certificate = env.string("PUSH_GRPC_TLS_CERT_FILE") {
        let key = try env.required("PUSH_GRPC_TLS_KEY_FILE")
        for (variable, path) in [("PUSH_GRPC_TLS_CERT_FILE", certificate), ("PUSH_GRPC_TLS_KEY_FILE", key)]
        where !path.isEmpty && !FileManager.default.isReadableFile(atPath: path) {
            try env.fail(variable, "cannot read \(path)")
        }
        http2.tls = HTTP2ServerTLS(certificateChainFile: certificate, privateKeyFile: key)
    } else if env.string("PUSH_GRPC_TLS_KEY_FILE") != nil {
        try env.fail("PUSH_GRPC_TLS_CERT_FILE", "is required when PUSH_GRPC_TLS_KEY_FILE is set")
    }
    // PUSH_HTTP2_*: connection, header-list, window and timeout limits (docs/http2-server-limits.md).
    try HTTP2ServerLimits.apply(environment: env, to: &http2.limits, settings: &http2.settings)
    try http2.limits.validate(settings: http2.settings)
    let gracePeriod = try env.milliseconds("PUSH_SHUTDOWN_GRACE_MS", default: .seconds(30))
    var configuration = RegistrationService.Configuration(producer: producer, server: .init(http2: http2))
    configuration.topic = env.string("PUSH_TOPIC_TOKEN_EVENTS", default: "push.token-events.v1")
    // Authentication (docs/registration-auth.md): on unless PUSH_AUTH_DISABLED=true (development only).
    configuration.auth.disabled = try env.bool("PUSH_AUTH_DISABLED", default: false)
    configuration.auth.keysFile = env.string("PUSH_AUTH_KEYS_FILE")
    configuration.auth.keysJSON = env.string("PUSH_AUTH_KEYS")
    configuration.auth.audience = env.string("PUSH_AUTH_AUDIENCE", default: configuration.auth.audience)
    configuration.auth.defaultRatePerSecond = Double(try env.int("PUSH_AUTH_RATE_PER_SECOND", default: 1_000, in: 1...10_000_000))
    configuration.auth.defaultBurst = Double(try env.int("PUSH_AUTH_RATE_BURST", default: 2_000, in: 1...10_000_000))
    configuration.keysReloadInterval = try env.milliseconds("PUSH_AUTH_KEYS_RELOAD_MS", default: .seconds(2))
    configuration.healthProbeInterval = try env.milliseconds("PUSH_HEALTH_PROBE_INTERVAL_MS", default: .seconds(2))
    configuration.fitShutdown(into: gracePeriod)
    if checking {
        print(env.checkReport(program: "registration-service"))
        exit(env.checkExitStatus)
    }
    // HTTP/1.1 admin port: /metrics, /healthz, /readyz (README "Admin port").
    admin = try AdminServer.start(environment: env, defaultPort: 9101, readiness: configuration.readiness)
    logger.info("admin port listening", ["admin_port": "\(admin.port)"])
    group = ServiceGroup(
        services: [RegistrationService(configuration: configuration, logger: logger)],
        configuration: .init(gracePeriod: gracePeriod), logger: logger.with(["component": "lifecycle"]))
} catch {
    if checking {
        try? env.fail("(configuration)", "\(error)")
        print(env.checkReport(program: "registration-service"))
        exit(2)
    }
    logger.critical("registration-service configuration invalid: \(error)")
    exit(1)
}
do {
    let outcome = try await group.run()
    admin.stop()
    exit(outcome.isGraceful ? 0 : 1)
} catch {
    logger.critical("registration-service failed: \(error)")
    exit(1)
}
