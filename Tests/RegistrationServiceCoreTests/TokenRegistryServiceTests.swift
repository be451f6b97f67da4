import Foundation
import Kafka
import PushMessages
import ServiceCore
import Testing

@testable import RegistrationServiceCore

/// Validation: every refusal is `INVALID_ARGUMENT` and names the field.
@Suite struct TokenRegistrationValidatorTests {
    static let token = String(repeating: "ab", count: 32)

    func request(_ edit: (inout Device) -> Void) -> RegisterTokenRequest {
        var device = Device()
        device.deviceToken = Self.token
        device.bundleID = "com.example.app"
        device.environment = .sandbox
        edit(&device)
        return RegisterTokenRequest(device: device)
    }

    @Test func normalizesTheTokenAndDefaultsTheKind() throws {
        let spaced = "<" + stride(from: 0, to: 64, by: 8).map { i in
            String(Self.token.uppercased().dropFirst(i).prefix(8))
        }.joined(separator: " ") + ">"
        let device = try TokenRegistrationValidator.normalizedDevice(of: request { $0.deviceToken = spaced })
        #expect(device.deviceToken == Self.token)
        #expect(device.kind == .standard)
    }

    @Test(arguments: [
        ("abc", "device.device_token"),
        (String(repeating: "zz", count: 32), "device.device_token"),
        (String(repeating: "ab", count: 31), "device.device_token"),
        (String(repeating: "a", count: 65), "device.device_token"),
        (String(repeating: "ab", count: 257), "device.device_token"),
        ("", "device.device_token"),
    ])
    func refusesBadTokens(token: String, field: String) {
        expectInvalid(request { $0.deviceToken = token }, field: field)
    }

    @Test func refusesOtherBadFields() {
        expectInvalid(RegisterTokenRequest(), field: "device")
        expectInvalid(request { $0.bundleID = "" }, field: "device.bundle_id")
        expectInvalid(request { $0.bundleID = "com.example/app" }, field: "device.bundle_id")
        expectInvalid(request { $0.environment = .unspecified }, field: "device.environment")
        expectInvalid(request { $0.kind = .unrecognized(99) }, field: "device.kind")
        expectInvalid(request { $0.userID = String(repeating: "u", count: 300) }, field: "device.user_id")
        expectInvalid(request { $0.attributes = ["locale": String(repeating: "x", count: 300)] }, field: "device.attributes[locale]")
        // A NUL would be cut short by PostgreSQL: "alice\0evil" must not pass for "alice".
        expectInvalid(request { $0.userID = "alice\u{0}evil" }, field: "device.user_id")
        expectInvalid(request { $0.installationID = "phone\u{0}" }, field: "device.installation_id")
        expectInvalid(request { $0.attributes = ["locale": "de\u{0}"] }, field: "device.attributes[locale]")
    }

    @Test func longestTokensAreAccepted() throws {
        let long = String(repeating: "0f", count: 256)
        #expect(try TokenRegistrationValidator.normalizedDevice(of: request { $0.deviceToken = long }).deviceToken == long)
        let eighty = String(repeating: "a1", count: 80)
        #expect(try TokenRegistrationValidator.normalizedDevice(of: request { $0.deviceToken = eighty }).deviceToken == eighty)
    }

    func expectInvalid(_ request: RegisterTokenRequest, field: String, sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            _ = try TokenRegistrationValidator.normalizedDevice(of: request)
            Issue.record("accepted an invalid request (\(field))", sourceLocation: sourceLocation)
        } catch {
            #expect(error.code == .invalidArgument, sourceLocation: sourceLocation)
            #expect(error.message.hasPrefix(field + ":"), "\(error.message)", sourceLocation: sourceLocation)
        }
    }
}

/// The service against librdkafka's Kafka-protocol broker: OK only after Kafka acknowledged the
/// event, keyed by the normalized token, and nothing published for a refused call.
@Suite(.timeLimit(.minutes(1)))
struct TokenRegistryServiceTests {
    init() { ProcessSignals.ignoreSIGPIPE() }

    @Test func publishesTokenEventsKeyedByTokenAndNothingForRefusedCalls() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let topic = "token-events-\(UUID().uuidString.prefix(8))"
        try cluster.createTopic(topic, partitions: 3)
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: [cluster.bootstrapServers]))
        let clock = ManualWallClock(milliseconds: 1_700_000_000_000)
        let service = TokenRegistryService(producer: producer, topic: topic, clock: clock)

        var bad = Device()
        bad.deviceToken = "not-hex"
        bad.bundleID = "com.example.app"
        bad.environment = .production
        await #expect(throws: RegistrationError.self) { try await service.register(RegisterTokenRequest(device: bad)) }

        let token = String(repeating: "c3", count: 32)
        var device = bad
        device.deviceToken = token.uppercased()
        device.userID = "user-1"
        device.attributes = ["locale": "de_DE"]
        let reply = try await service.register(RegisterTokenRequest(device: device))
        #expect(reply.deviceToken == token)
        #expect(reply.eventTimeMs == 1_700_000_000_000)

        clock.advance(by: .seconds(1))
        let removed = try await service.unregister(UnregisterTokenRequest(deviceToken: token, bundleID: "com.example.app", reason: "user_signed_out"))
        #expect(removed.eventTimeMs == 1_700_000_001_000)

        var config = KafkaConsumerConfiguration(bootstrapServers: [cluster.bootstrapServers], groupID: "g-\(UUID())", topics: [topic])
        config.sessionTimeout = .seconds(6)
        let consumer = try KafkaConsumer(configuration: config)
        var records: [KafkaMessage] = []
        for await message in consumer.messages {
            records.append(message)
            if records.count == 2 { break }
        }
        await consumer.close()

        #expect(records.map { $0.key.map { String(decoding: $0, as: UTF8.self) } } == [token, token])
        #expect(Set(records.map(\.partition)).count == 1)
        #expect(records.allSatisfy { $0.header("content-type").map { String(decoding: $0, as: UTF8.self) } == TokenRegistryService.tokenEventContentType })
        let events = try records.map { try TokenEvent(protobufBytes: $0.value) }
        #expect(events.map(\.action) == [.registered, .unregistered])
        #expect(events[0].device?.deviceToken == token)
        #expect(events[0].device?.userID == "user-1")
        #expect(events[0].device?.attributes == ["locale": "de_DE"])
        #expect(events[0].eventID == reply.eventID)
        #expect(events[1].reason == "user_signed_out")
        await producer.shutdown()
    }

    @Test func answersUnavailableWhenKafkaDoesNotAcknowledge() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let topic = "token-events-\(UUID().uuidString.prefix(8))"
        try cluster.createTopic(topic, partitions: 1)
        var configuration = KafkaProducerConfiguration(bootstrapServers: [cluster.bootstrapServers])
        configuration.messageTimeout = .seconds(2)
        let producer = try KafkaProducer(configuration: configuration)
        let service = TokenRegistryService(producer: producer, topic: topic)
        try cluster.setBrokerDown(1)
        var device = Device()
        device.deviceToken = String(repeating: "d4", count: 32)
        device.bundleID = "com.example.app"
        device.environment = .sandbox
        let started = ContinuousClock.now
        do {
            _ = try await service.register(RegisterTokenRequest(device: device))
            Issue.record("registered although no broker was up")
        } catch {
            #expect(error.code == .unavailable)
        }
        #expect(ContinuousClock.now - started < .seconds(20))
        try cluster.setBrokerUp(1)
        await producer.shutdown()
    }

    @Test func aMissingTopicIsNamedAtOnceAndNothingIsProduced() async throws {
        let cluster = try KafkaMockCluster(brokers: 1)
        let topic = "token-events-\(UUID().uuidString.prefix(8))"
        let watch = KafkaTopicWatch(topics: [topic], bootstrapServers: [cluster.bootstrapServers], logger: Logger(label: "test", logLevel: .critical))
        #expect(try await watch.check() == [topic])
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: [cluster.bootstrapServers]))
        let service = TokenRegistryService(producer: producer, topic: topic, topicWatch: watch)
        var device = Device()
        device.deviceToken = String(repeating: "e5", count: 32)
        device.bundleID = "com.example.app"
        device.environment = .sandbox
        let started = ContinuousClock.now
        do {
            _ = try await service.register(RegisterTokenRequest(device: device))
            Issue.record("registered although the topic does not exist")
        } catch {
            #expect(error.code == .unavailable)
            #expect(error.message.contains(topic), "the error does not name the topic: \(error)")
        }
        // At once, not after Kafka's metadata timeout (30 s).
        #expect(ContinuousClock.now - started < .seconds(5))
        // Nothing was produced: the (test) broker never heard of the topic.
        #expect(try await watch.check() == [topic])

        try cluster.createTopic(topic, partitions: 1)
        try await watch.check()
        _ = try await service.register(RegisterTokenRequest(device: device))
        await producer.shutdown()
    }
}
