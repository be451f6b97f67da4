import Foundation
import GRPC
import HTTP2
import Kafka
import RegistrationServiceCore
import ServiceCore

// registration-service: push.v1.TokenRegistry over gRPC (and JSON over HTTP/2) → push.token-events.v1.
ProcessSignals.ignoreSIGPIPE()
let logger = Logger(label: "registration-service")
do {
    let env = EnvironmentConfig()
    let bootstrap = env.string("PUSH_KAFKA_BOOTSTRAP", default: "127.0.0.1:9092").split(separator: ",").map(String.init)
    var producerConfiguration = KafkaProducerConfiguration(bootstrapServers: bootstrap)
    // A caller waits for Kafka's acknowledgement: fail with UNAVAILABLE rather than hang for minutes.
    producerConfiguration.messageTimeout = try env.milliseconds("PUSH_KAFKA_MESSAGE_TIMEOUT_MS", default: .seconds(30))
    let producer = try KafkaProducer(configuration: producerConfiguration, logger: logger.with(["component": "kafka.producer"]))
    let service = TokenRegistryService(
        producer: producer, topic: env.string("PUSH_TOPIC_TOKEN_EVENTS", default: "push.token-events.v1"), logger: logger)
    var http2 = HTTP2Server.Configuration(
        host: env.string("PUSH_GRPC_HOST", default: "0.0.0.0"), port: try env.int("PUSH_GRPC_PORT", default: 50051))
    if let certificate = env.string("PUSH_GRPC_TLS_CERT_FILE") {
        http2.tls = HTTP2ServerTLS(certificateChainFile: certificate, privateKeyFile: try env.required("PUSH_GRPC_TLS_KEY_FILE"))
    }
    let server = try RegistrationServer.start(service: service, configuration: .init(http2: http2))
    logger.info("registration-service ready", ["port": "\(server.port)", "tls": http2.tls == nil ? "off" : "on"])
    let signal = await ProcessSignals.waitForTermination()
    logger.info("registration-service stopping", ["signal": "\(signal)"])
    await server.shutdown()
    await producer.shutdown()
} catch {
    logger.critical("registration-service failed to start: \(error)")
    exit(1)
}
