import Foundation
import Kafka
import PushMessages
import ServiceCore

/// Publishes feedback events and dead letters, each awaited until Kafka acknowledged it.
public final class FeedbackPublisher: Sendable {
    /// `content-type` header values of what this publisher writes.
    public static let feedbackContentType = "application/x-protobuf; message=push.v1.FeedbackEvent"
    public static let deadLetterContentType = "application/x-protobuf; message=push.v1.DeadLetter"

    private let producer: KafkaProducer
    private let topics: DispatcherConfiguration.Topics
    private let clock: any WallClock

    public init(producer: KafkaProducer, topics: DispatcherConfiguration.Topics, clock: any WallClock) {
        self.producer = producer
        self.topics = topics
        self.clock = clock
    }

    /// Wraps `body` in a `FeedbackEvent` with a new event id (the same id as a delivery report's).
    public func event(id: String = UUID().uuidString.lowercased(), _ body: FeedbackEvent.Event) -> FeedbackEvent {
        var event = FeedbackEvent()
        event.eventID = id
        event.eventTimeMs = clock.nowMilliseconds()
        event.event = body
        return event
    }

    /// Publishes serialized feedback keyed by `key` (a device token, or a request id).
    /// - Throws: `KafkaError` when Kafka did not acknowledge it.
    public func publish(serialized: [UInt8], key: String) async throws {
        _ = try await producer.send(
            topic: topics.feedback, key: Array(key.utf8), value: serialized,
            headers: [KafkaHeader(name: "content-type", value: Self.feedbackContentType)])
    }

    /// Publishes a feedback event keyed by `key`.
    /// - Throws: `KafkaError` when Kafka did not acknowledge it.
    public func publish(_ event: FeedbackEvent, key: String) async throws {
        try await publish(serialized: event.serializedBytes(), key: key)
    }

    /// Keeps `message` on the dead-letter topic with `error`, under its original key.
    /// - Throws: `KafkaError` when Kafka did not acknowledge it.
    public func deadLetter(_ message: KafkaMessage, error: String, rejectedBy: String) async throws {
        var letter = DeadLetter()
        letter.sourceTopic = message.topic
        letter.sourcePartition = message.partition.rawValue
        letter.sourceOffset = message.offset.rawValue
        letter.originalKey = message.key ?? []
        letter.originalValue = message.value
        letter.originalHeaders = message.headers.map { header in
            var copy = DeadLetter.Header()
            copy.key = header.name
            copy.value = header.value ?? []
            return copy
        }
        letter.error = error
        letter.rejectedBy = rejectedBy
        letter.rejectedAtMs = clock.nowMilliseconds()
        _ = try await producer.send(
            topic: topics.deadLetter, key: message.key, value: letter.serializedBytes(),
            headers: [KafkaHeader(name: "content-type", value: Self.deadLetterContentType)])
    }
}
