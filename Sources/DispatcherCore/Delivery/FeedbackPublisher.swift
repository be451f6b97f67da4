import Foundation
import Kafka
import PushMessages
import ServiceCore
import Synchronization

/// Publishes feedback events and dead letters, each awaited until Kafka acknowledged it.
public final class FeedbackPublisher: Sendable {
    /// `content-type` header values of what this publisher writes.
    public static let feedbackContentType = "application/x-protobuf; message=push.v1.FeedbackEvent"
    public static let deadLetterContentType = "application/x-protobuf; message=push.v1.DeadLetter"

    /// librdkafka's default `message.max.bytes`: the largest record the producer accepts, in bytes
    /// (key, value and headers).
    public static let defaultMaxRecordBytes = 1_000_000

    private let producer: KafkaProducer
    private let topics: DispatcherConfiguration.Topics
    private let clock: any WallClock
    private let maxRecordBytes: Int
    private let logger: Logger
    private let droppedDeadLetters = Atomic<Int>(0)

    /// - Parameter maxRecordBytes: the producer's `message.max.bytes`; a dead letter whose original
    ///   value would make it larger keeps only a prefix of that value. Default 1,000,000 bytes.
    public init(producer: KafkaProducer, topics: DispatcherConfiguration.Topics, clock: any WallClock,
                maxRecordBytes: Int = FeedbackPublisher.defaultMaxRecordBytes, logger: Logger = Logger(label: "dispatcher.feedback")) {
        self.logger = logger
        self.producer = producer
        self.topics = topics
        self.clock = clock
        self.maxRecordBytes = maxRecordBytes
    }

    /// Wraps `body` in a `FeedbackEvent`.
    ///
    /// Without `id`, the event id is derived from the body with `FeedbackEventID` (a delivery report,
    /// a token invalidation, a request completion), so republishing the same fact repeats its id; a
    /// campaign progress gets a random UUID. A `RequestCompleted` without a status is marked
    /// `REQUEST_STATUS_COMPLETED`.
    /// - Parameters:
    ///   - id: the event id; nil derives it as above.
    ///   - body: the event.
    ///   - traceParent: the send request's W3C `traceparent` text (`SendRequest.trace_parent`); empty: none.
    /// - Returns: the event, stamped with the clock's time.
    public func event(id: String? = nil, _ body: FeedbackEvent.Event, traceParent: String = "") -> FeedbackEvent {
        var body = body
        if case .requestCompleted(var completed) = body, completed.status == .unspecified {
            completed.status = .completed
            body = .requestCompleted(completed)
        }
        var event = FeedbackEvent()
        event.eventID = id ?? Self.derivedID(of: body)
        event.eventTimeMs = clock.nowMilliseconds()
        event.event = body
        event.traceParent = traceParent
        return event
    }

    /// The deterministic id of `body` (docs/contracts.md "Event ids"), or a random UUID.
    static func derivedID(of body: FeedbackEvent.Event) -> String {
        switch body {
        case .deliveryReport(let report):
            FeedbackEventID.deliveryReport(requestID: report.requestID, deviceToken: report.deviceToken)
        case .tokenInvalidated(let invalidated):
            FeedbackEventID.tokenInvalidated(
                deviceToken: invalidated.deviceToken, apnsTimestampMs: invalidated.apnsTimestampMs, requestID: invalidated.requestID)
        case .requestCompleted(let completed):
            FeedbackEventID.requestCompleted(requestID: completed.requestID)
        case .broadcastReport(let report):
            FeedbackEventID.broadcastReport(requestID: report.requestID, channelID: report.channelID)
        case .channelEvent(let event):
            FeedbackEventID.channelEvent(bundleID: event.bundleID, environment: event.environment, name: event.name, kind: event.kind)
        case .campaignProgress:
            UUID.random().lowercasedString
        }
    }

    /// Publishes serialized feedback keyed by `key` (a device token, or a request id).
    /// - Parameter traceParent: the event's W3C `traceparent`, also written as the record's
    ///   `traceparent` header (docs/observability.md "Trace context"); empty: no header.
    /// - Throws: `KafkaError` when Kafka did not acknowledge it.
    public func publish(serialized: [UInt8], key: String, traceParent: String = "") async throws {
        _ = try await producer.send(topic: topics.feedback, key: Array(key.utf8), value: serialized, headers: headers(traceParent))
    }

    /// Publishes serialized feedback without waiting: `onAcknowledged` is called once, with nil when
    /// Kafka acknowledged the record or with the `KafkaError` that ended it, on the producer's poll
    /// thread (it must not block). No task is created per record.
    public func publish(serialized: [UInt8], key: String, traceParent: String, onAcknowledged: @escaping @Sendable ((any Error)?) -> Void) {
        producer.send(topic: topics.feedback, key: Array(key.utf8), value: serialized, headers: headers(traceParent)) { result in
            switch result {
            case .success: onAcknowledged(nil)
            case .failure(let error): onAcknowledged(error)
            }
        }
    }

    private func headers(_ traceParent: String) -> [KafkaHeader] {
        var headers = [KafkaHeader(name: "content-type", value: Self.feedbackContentType)]
        if !traceParent.isEmpty { headers.append(KafkaHeader(name: TraceParent.headerName, value: Array(traceParent.utf8))) }
        return headers
    }

    /// Publishes a feedback event keyed by `key`, with its `trace_parent` as the `traceparent` header.
    /// - Throws: `KafkaError` when Kafka did not acknowledge it.
    public func publish(_ event: FeedbackEvent, key: String) async throws {
        try await publish(serialized: event.serializedBytes(), key: key, traceParent: event.traceParent)
    }

    /// Keeps `message` on the dead-letter topic with `error`, under its original key, with the
    /// original value's size and SHA-256; when the whole value would make the dead letter larger
    /// than `maxRecordBytes`, only its first bytes are kept and `original_value_truncated` is set.
    /// A record the Kafka client could not read (`KafkaMessage.unreadableError`) is kept by its offset,
    /// with `unreadable_by_client` set and nothing of its content.
    /// - Throws: `KafkaError` when Kafka did not acknowledge it.
    public func deadLetter(_ message: KafkaMessage, error: String, rejectedBy: String) async throws {
        var letter = DeadLetter()
        letter.unreadableByClient = message.unreadableError != nil
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
        letter.originalValueSize = UInt64(message.oversizedValueBytes ?? message.value.count)
        // An oversized value arrives as a prefix with the whole value's size and digest.
        letter.originalValueSha256 = message.oversizedValueSHA256 ?? Digest.sha256(message.value)
        letter.originalValueTruncated = message.oversizedValueBytes != nil
        // Room for the value: the limit less the key, the header, the rest of the letter and the
        // value's own tag and length (at most 1 + 5 bytes), with a margin for librdkafka's framing.
        var rest = letter
        rest.originalValue = []
        rest.originalValueTruncated = true
        let overhead = (message.key?.count ?? 0) + "content-type".utf8.count + Self.deadLetterContentType.utf8.count
            + rest.serializedBytes().count + 6 + 1024
        let room = max(0, maxRecordBytes - overhead)
        if message.value.count > room {
            letter.originalValue = Array(message.value.prefix(room))
            letter.originalValueTruncated = true
        }
        let headers = [KafkaHeader(name: "content-type", value: Self.deadLetterContentType)]
        do {
            _ = try await producer.send(topic: topics.deadLetter, key: message.key, value: letter.serializedBytes(), headers: headers)
        } catch let error as KafkaError where error.code == .messageSizeTooLarge {
            // Still too large for the broker (a topic with a smaller max.message.bytes): keep the
            // description without the value. Failing that, log and count it: a dead letter never
            // blocks the partition.
            letter.originalValue = []
            letter.originalValueTruncated = true
            do {
                _ = try await producer.send(topic: topics.deadLetter, key: message.key, value: letter.serializedBytes(), headers: headers)
            } catch let error as KafkaError where error.code == .messageSizeTooLarge {
                droppedDeadLetters.add(1, ordering: .relaxed)
                logger.error("dead letter refused as too large even without its value; dropped", [
                    "topic": message.topic, "partition": "\(message.partition)", "offset": "\(message.offset)",
                    "original_size": "\(message.value.count)", "error": "\(error)",
                ])
            }
        }
    }

    /// Dead letters Kafka refused as too large even with their value emptied (logged, then dropped).
    public var deadLettersDropped: Int { droppedDeadLetters.load(ordering: .relaxed) }
}
