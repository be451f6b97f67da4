internal import CRdKafka
import ServiceCore

/// Owner of one producer `rd_kafka_t` used only for metadata requests (`rd_kafka_metadata`).
///
/// `@unchecked Sendable`: librdkafka's API is thread-safe (INTRODUCTION.md); the handle is immutable
/// and only `KafkaTopicWatch`'s dedicated thread calls it. `deinit` destroys the handle before the
/// context is released.
final class RDKafkaMetadataClient: @unchecked Sendable {
    private let handle: OpaquePointer
    private let context: RDKafkaContext

    init(properties: [(String, String)], logger: Logger) throws(KafkaError) {
        let context = RDKafkaContext(logger: logger)
        let conf = try RDKafkaConfig.make(properties, context: context)
        self.handle = try RDKafkaConfig.newHandle(RD_KAFKA_PRODUCER, conf: conf)
        self.context = context
    }

    deinit { rd_kafka_destroy(handle) }

    /// The names of every topic the cluster reports (`rd_kafka_metadata` for all topics). Blocks up to
    /// `timeout`.
    /// - Throws: `KafkaError` when the brokers do not answer in time.
    func topicNames(timeout: Duration) throws(KafkaError) -> Set<String> {
        var metadata: UnsafePointer<rd_kafka_metadata>?
        let err = rd_kafka_metadata(handle, 1, nil, &metadata, Int32(clamping: timeout.wholeMilliseconds))
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else {
            let code = KafkaError.Code(rawValue: err.rawValue)
            throw KafkaError(code: code, message: "metadata request failed: \(String(cString: rd_kafka_err2str(err)))")
        }
        defer { rd_kafka_metadata_destroy(metadata) }
        var names = Set<String>()
        for index in 0..<Int(metadata.pointee.topic_cnt) {
            let topic = metadata.pointee.topics[index]
            if topic.err == RD_KAFKA_RESP_ERR_NO_ERROR, let name = topic.topic { names.insert(String(cString: name)) }
        }
        return names
    }
}
