import Foundation
import Kafka
import PushMessages
import ServiceCore

/// The logic behind `push.v1.TokenRegistry`: validate, normalize, publish a `TokenEvent` keyed by
/// the token, and answer only after Kafka acknowledged it (acks=all on an idempotent producer).
public final class TokenRegistryService: Sendable {
    /// The `content-type` header of every token event record.
    public static let tokenEventContentType = "application/x-protobuf; message=push.v1.TokenEvent"

    private let producer: KafkaProducer
    private let topic: String
    private let topicWatch: KafkaTopicWatch?
    private let clock: any WallClock
    private let logger: Logger

    /// - Parameters:
    ///   - producer: an idempotent producer with acks=all.
    ///   - topic: the token events topic (default `push.token-events.v1`).
    ///   - topicWatch: when given and its last check found `topic` missing, calls fail at once with
    ///     `.unavailable` naming the topic.
    public init(producer: KafkaProducer, topic: String = "push.token-events.v1", topicWatch: KafkaTopicWatch? = nil,
                clock: any WallClock = SystemWallClock(), logger: Logger = Logger(label: "registration")) {
        self.producer = producer
        self.topic = topic
        self.topicWatch = topicWatch
        self.clock = clock
        self.logger = logger
    }

    /// Registers or refreshes a token.
    /// - Throws: `RegistrationError` `.invalidArgument` naming the field, or `.unavailable` when
    ///   Kafka did not acknowledge the event (nothing was registered; the caller may retry).
    public func register(_ request: RegisterTokenRequest) async throws(RegistrationError) -> RegisterTokenResponse {
        let device = try TokenRegistrationValidator.normalizedDevice(of: request)
        var event = TokenEvent()
        event.eventID = UUID().uuidString.lowercased()
        event.action = .registered
        event.device = device
        event.eventTimeMs = clock.nowMilliseconds()
        try await publish(event, token: device.deviceToken)
        var response = RegisterTokenResponse()
        response.deviceToken = device.deviceToken
        response.eventID = event.eventID
        response.eventTimeMs = event.eventTimeMs
        return response
    }

    /// Removes a token.
    /// - Throws: as `register(_:)`.
    public func unregister(_ request: UnregisterTokenRequest) async throws(RegistrationError) -> UnregisterTokenResponse {
        let (token, bundleID) = try TokenRegistrationValidator.normalizedUnregistration(request)
        var device = Device()
        device.deviceToken = token
        device.bundleID = bundleID
        var event = TokenEvent()
        event.eventID = UUID().uuidString.lowercased()
        event.action = .unregistered
        event.device = device
        event.eventTimeMs = clock.nowMilliseconds()
        event.reason = request.reason
        try await publish(event, token: token)
        var response = UnregisterTokenResponse()
        response.deviceToken = token
        response.eventID = event.eventID
        response.eventTimeMs = event.eventTimeMs
        return response
    }

    private func publish(_ event: TokenEvent, token: String) async throws(RegistrationError) {
        if let topicWatch, topicWatch.missingTopics.contains(topic) {
            throw RegistrationError(code: .unavailable, message: "Kafka topic \(topic) does not exist; an operator must create it")
        }
        do {
            _ = try await producer.send(
                topic: topic, key: Array(token.utf8), value: event.serializedBytes(),
                headers: [KafkaHeader(name: "content-type", value: Self.tokenEventContentType)])
        } catch {
            logger.error("token event not acknowledged by Kafka", ["error": "\(error)", "event_id": event.eventID])
            if let kafka = error as? KafkaError, kafka.code == .unknownTopic || kafka.code == .unknownTopicOrPartition {
                throw RegistrationError(code: .unavailable, message: "Kafka topic \(topic) does not exist; an operator must create it", cause: error)
            }
            throw RegistrationError(code: .unavailable, message: "the token event was not acknowledged by Kafka; retry", cause: error)
        }
    }
}
