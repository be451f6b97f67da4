import Foundation
import ServiceCore
import Testing

@testable import Kafka

/// Clients never create topics, a missing topic is named by `KafkaTopicWatch`, and the security
/// settings every executable reads. (The dev broker, librdkafka 2.0.2's mock cluster, creates a topic
/// a producer asks about whatever `allow.auto.create.topics` says, so the producer side of a missing
/// topic is shown against the registration service's fast path instead.)
@Suite struct KafkaTopicsAndSecurityTests {
    @Test(.timeLimit(.minutes(2))) func aMissingTopicIsNamedUntilItIsCreated() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: TestSupport.logger)
        let present = TestSupport.unique("present"), absent = TestSupport.unique("absent")
        try cluster.createTopic(present, partitions: 2)
        let watch = KafkaTopicWatch(topics: [present, absent], bootstrapServers: [cluster.bootstrapServers], logger: TestSupport.logger)
        #expect(watch.status == .unknown)
        #expect(try await watch.check() == [absent])
        #expect(watch.problem == "topic \(absent) does not exist")

        // Asking again does not create it (the check lists all topics; it never names one).
        #expect(try await watch.check() == [absent])

        try cluster.createTopic(absent, partitions: 1)
        #expect(try await watch.check() == [])
        #expect(watch.status == .ready)
        #expect(watch.problem == nil)
    }

    @Test func everyClientDisallowsTopicCreationWhateverItsAdditionalProperties() {
        var producer = KafkaProducerConfiguration(bootstrapServers: ["b:9092"])
        producer.additionalProperties["allow.auto.create.topics"] = "true"
        #expect(producer.properties.last { $0.0 == "allow.auto.create.topics" }?.1 == "false")
        var consumer = KafkaConsumerConfiguration(bootstrapServers: ["b:9092"], groupID: "g", topics: ["t"])
        consumer.additionalProperties["allow.auto.create.topics"] = "true"
        #expect(consumer.properties.last { $0.0 == "allow.auto.create.topics" }?.1 == "false")
    }

    @Test func securityFromTheEnvironment() throws {
        let passwordFile = FileManager.default.temporaryDirectory.appendingPathComponent(TestSupport.unique("kafka-pw")).path
        try "s3cret\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: passwordFile) }
        let env = EnvironmentConfig([
            "PUSH_KAFKA_SECURITY_PROTOCOL": "sasl_ssl", "PUSH_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "PUSH_KAFKA_SASL_USERNAME": "push", "PUSH_KAFKA_SASL_PASSWORD_FILE": passwordFile,
            "PUSH_KAFKA_PROPERTY_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM": "https",
        ])
        let security = try KafkaSecurity(environment: env)
        #expect(security.properties == [
            "security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "push",
            "sasl.password": "s3cret", "ssl.endpoint.identification.algorithm": "https",
        ])
        #expect(!env.checkReport(program: "t").contains("s3cret"))
        #expect(KafkaSecurity.propertyName(ofVariable: "PUSH_KAFKA_PROPERTY_SOCKET_KEEPALIVE_ENABLE") == "socket.keepalive.enable")
    }

    @Test func badSecuritySettingsAreEachNamed() throws {
        let env = EnvironmentConfig(
            [
                "PUSH_KAFKA_SECURITY_PROTOCOL": "sasl_plaintext", "PUSH_KAFKA_SASL_MECHANISM": "GSSAPI-ish",
                "PUSH_KAFKA_CA_FILE": "/nonexistent/ca.pem", "PUSH_KAFKA_PROPERTY_NO_SUCH_PROPERTY": "1",
                "PUSH_KAFKA_PROPERTY_LINGER_MS": "not-a-number",
            ], collectingErrors: true)
        _ = try KafkaSecurity(environment: env)
        let named = Set(env.errors.map(\.variable))
        #expect(named == [
            "PUSH_KAFKA_SASL_MECHANISM", "PUSH_KAFKA_CA_FILE", "PUSH_KAFKA_SASL_USERNAME", "PUSH_KAFKA_SASL_PASSWORD_FILE",
            "PUSH_KAFKA_PROPERTY_NO_SUCH_PROPERTY", "PUSH_KAFKA_PROPERTY_LINGER_MS",
        ])
        let plain = EnvironmentConfig(["PUSH_KAFKA_SASL_USERNAME": "u", "PUSH_KAFKA_SECURITY_PROTOCOL": "tls"], collectingErrors: true)
        _ = try KafkaSecurity(environment: plain)
        #expect(Set(plain.errors.map(\.variable)) == ["PUSH_KAFKA_SECURITY_PROTOCOL", "PUSH_KAFKA_SASL_USERNAME"])
    }
}
