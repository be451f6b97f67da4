import AdminHTTP
import Foundation
import GRPC
import HTTP2
import Kafka
import PushDomain
import ServiceCore

/// The `registration-service` executable: push.v1.TokenRegistry over gRPC (and JSON over HTTP/2) →
/// push.token-events.v1. Its settings (README "Settings") are read here, once, for `--help`,
/// `--check-config` and start alike (`ServiceMain`).
public enum RegistrationProgram {
    /// What `registration-service --help` prints before the settings.
    public static let usage = """
        usage: registration-service [--check-config | --help]

        Serves push.v1.TokenRegistry (gRPC, and JSON over HTTP/2) on PUSH_GRPC_PORT and publishes token
        events to Kafka. Callers authenticate with an API key or a registration JWT from
        PUSH_AUTH_KEYS_FILE (docs/registration-auth.md). SIGTERM/SIGINT: graceful shutdown (drain calls,
        flush Kafka); a second signal or PUSH_SHUTDOWN_GRACE_MS: cancellation. Exit 0 after a graceful
        stop, 1 otherwise (docs/lifecycle.md). The admin port (PUSH_ADMIN_PORT) serves /metrics,
        /healthz and /readyz.
        """

    /// The program: `RegistrationProgram.main.run()` is the whole of `main.swift`.
    public static let main = ServiceMain(program: "registration-service", usage: usage, load: load)

    /// Reads every setting the registration service starts with, including the key file as start
    /// reads it; problems are reported through `env`.
    /// - Throws: `EnvironmentConfig.Error` at the first bad setting unless `env` collects errors.
    public static func load(_ env: EnvironmentConfig) throws -> ServiceMain.Launch {
        let bootstrap = env.string("PUSH_KAFKA_BOOTSTRAP", default: "127.0.0.1:9092").split(separator: ",").map(String.init)
        var producer = KafkaProducerConfiguration(bootstrapServers: bootstrap)
        producer.additionalProperties = try KafkaSecurity(environment: env).properties
        // A caller waits for Kafka's acknowledgement: fail with UNAVAILABLE rather than hang for minutes.
        producer.messageTimeout = try env.milliseconds("PUSH_KAFKA_MESSAGE_TIMEOUT_MS", default: .seconds(30))
        // Each answer waits for its record's acknowledgement, so a lone registration waits the whole
        // linger; above the brokers' round trip nothing spins (docs/capacity.md "Produce round trips").
        producer.linger = .milliseconds(try env.int("PUSH_KAFKA_LINGER_MS", default: 5, in: 0...900_000))
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
        _ = try env.attempt("PUSH_HTTP2_*") { try http2.limits.validate(settings: http2.settings) }
        let gracePeriod = try env.milliseconds("PUSH_SHUTDOWN_GRACE_MS", default: .seconds(30))
        var configuration = RegistrationService.Configuration(producer: producer, server: .init(http2: http2))
        configuration.topic = env.string("PUSH_TOPIC_TOKEN_EVENTS", default: PushTopic.tokenEvents.name)
        configuration.auth = try auth(env)
        configuration.producerMetrics = KafkaProducerMetrics(role: "token-event")
        configuration.keysReloadInterval = try env.milliseconds("PUSH_AUTH_KEYS_RELOAD_MS", default: .seconds(2))
        configuration.healthProbeInterval = try env.milliseconds("PUSH_HEALTH_PROBE_INTERVAL_MS", default: .seconds(2))
        configuration.fitShutdown(into: gracePeriod)
        let admin = try AdminServer.Settings(environment: env, defaultPort: 9101)
        let service = configuration
        return ServiceMain.Launch(gracePeriod: gracePeriod) { logger in
            ServiceMain.Start(
                services: [RegistrationService(configuration: service, logger: logger)],
                infrastructure: [AdminService(settings: admin, readiness: service.readiness, logger: logger)])
        }
    }

    /// Authentication (docs/registration-auth.md): on unless `PUSH_AUTH_DISABLED=true` (development
    /// only). The keys are loaded as start loads them, so a missing, unreadable or malformed key file
    /// is named here.
    static func auth(_ env: EnvironmentConfig) throws -> RegistrationAuthenticator.Configuration {
        var auth = RegistrationAuthenticator.Configuration()
        auth.disabled = try env.bool("PUSH_AUTH_DISABLED", default: false)
        auth.keysFile = env.string("PUSH_AUTH_KEYS_FILE")
        auth.keysJSON = env.string("PUSH_AUTH_KEYS")
        auth.audience = env.string("PUSH_AUTH_AUDIENCE", default: auth.audience)
        auth.defaultRatePerSecond = Double(try env.int("PUSH_AUTH_RATE_PER_SECOND", default: 1_000, in: 1...10_000_000))
        auth.defaultBurst = Double(try env.int("PUSH_AUTH_RATE_BURST", default: 2_000, in: 1...10_000_000))
        if !auth.disabled {
            let variable = auth.keysFile == nil && auth.keysJSON != nil ? "PUSH_AUTH_KEYS" : "PUSH_AUTH_KEYS_FILE"
            _ = try env.attempt(variable) {
                try RegistrationAuthenticator(configuration: auth, logger: Logger(label: "registration.auth", logLevel: .critical))
            }
        }
        return auth
    }
}
