import GRPC
import Kafka
import PushDomain
import ServiceCore

extension RegistrationService {
    /// What the registration service connects to, where it listens, and its shutdown bounds.
    public struct Configuration: Sendable {
        /// The token-event producer (idempotent, acks=all by default).
        public var producer: KafkaProducerConfiguration
        /// The token events topic. Default `push.token-events.v1`.
        public var topic: String = PushTopic.tokenEvents.name
        /// Address, TLS and limits of the gRPC/JSON server.
        public var server: GRPCServer.Configuration
        /// Credentials and rate limits (docs/registration-auth.md). Default: on, with no keys (which
        /// refuses to start); set `auth.keysFile`, `auth.keysJSON` or `auth.disabled`.
        public var auth = RegistrationAuthenticator.Configuration()
        /// How often the key file's modification time and size are checked for a reload (SIGHUP
        /// reloads at once). Default 2 seconds.
        public var keysReloadInterval: Duration = .seconds(2)
        /// How often the health service asks Kafka for metadata; NOT_SERVING while no broker answers
        /// within the same interval (at least 1 s). Default 2 seconds.
        public var healthProbeInterval: Duration = .seconds(2)
        /// How long calls in progress may take to finish after graceful shutdown began; connections
        /// still open afterwards are dropped. Keep `drainTimeout + flushTimeout` below the group's
        /// grace period so that a slow drain still ends gracefully. Default 20 seconds.
        public var drainTimeout: Duration = .seconds(20)
        /// How long the producer may take to deliver what is still queued once the server stopped.
        /// Default 5 seconds.
        public var flushTimeout: Duration = .seconds(5)
        /// Where the service leaves what `/readyz` decides from (the producer's cached health, the
        /// phase); the executable hands the same object to its admin port.
        public var readiness = ReadinessState()
        /// Where the token-event producer's `push_kafka_produce*` families read it from while the
        /// service runs; nil: not exported. The executable sets one registered in the shared registry.
        public var producerMetrics: KafkaProducerMetrics?

        /// Creates a configuration.
        /// - Parameters:
        ///   - producer: the Kafka producer's configuration.
        ///   - server: the server's configuration.
        public init(producer: KafkaProducerConfiguration, server: GRPCServer.Configuration) {
            self.producer = producer
            self.server = server
        }

        /// Splits a grace period between draining calls (80 %) and flushing the producer (10 %),
        /// leaving 10 % as margin before a `ServiceGroup` with the same grace period escalates.
        /// - Parameter gracePeriod: the process's graceful-shutdown bound (`PUSH_SHUTDOWN_GRACE_MS`).
        public mutating func fitShutdown(into gracePeriod: Duration) {
            drainTimeout = gracePeriod / 10 * 8
            flushTimeout = gracePeriod / 10
        }
    }
}
