/// The one error type of the Kafka module.
///
/// `code` is the Kafka protocol error code (positive, see the Kafka protocol guide's error table) or a
/// librdkafka-internal code (negative, such as `queueFull` or `fatal`); `message` is librdkafka's or
/// our own human-readable explanation. Descriptions never contain message payloads.
public struct KafkaError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, as a Kafka or librdkafka error code.
    public let code: Code
    /// A human-readable explanation.
    public let message: String
    /// The underlying error, when another error caused this one.
    public let cause: (any Error & Sendable)?

    /// Creates an error.
    public init(code: Code, message: String, cause: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
    }

    /// Whether retrying the same operation later may succeed (brokers down, leader moving, timeouts).
    public var isRetriable: Bool { code.isRetriable }

    /// Whether the client instance that raised it can no longer be used (`RD_KAFKA_RESP_ERR__FATAL`).
    public var isFatal: Bool { code.isFatal }

    public var description: String {
        var text = "KafkaError(\(code)): \(message)"
        if let cause { text += " (cause: \(cause))" }
        return text
    }
}
