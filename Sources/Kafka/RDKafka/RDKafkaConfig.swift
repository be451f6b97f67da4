internal import CRdKafka
import ServiceCore
import Synchronization

/// Callbacks of one `rd_kafka_t`, reached from librdkafka's C callbacks through the configuration's
/// opaque pointer (`rd_kafka_conf_set_opaque`). The pointer is unretained: the owner of the handle
/// (`RDKafkaProducerClient`, `RDKafkaConsumerClient`, `KafkaMockCluster`) keeps this object in a stored
/// property and destroys the handle in its `deinit` body, before stored properties are released, so
/// the context outlives every callback.
final class RDKafkaContext: Sendable {
    let logger: Logger
    /// Producer: a delivery report for the record whose per-message opaque is `id`.
    let onDelivery: (@Sendable (_ id: UInt64, _ result: Result<(KafkaPartition, KafkaOffset), KafkaError>) -> Void)?
    /// Any client: an error from `error_cb` (`fatal` included).
    let onError: (@Sendable (KafkaError) -> Void)?
    /// Consumer: a rebalance, called on the polling thread; may block (revocations wait for the
    /// application). Assigned: returns whether the new partitions must be paused right away. Revoked:
    /// returns whether some of them were paused (their pause flag is cleared after the unassignment).
    let onRebalance: (@Sendable (RDKafkaRebalance) -> Bool)?
    /// Any client: a statistics document from `stats_cb` (every `statistics.interval.ms`), on the
    /// polling thread; the bytes are valid only during the call.
    let onStatistics: (@Sendable (UnsafeRawBufferPointer) -> Void)?
    /// Consumer: set once librdkafka handed this member an assignment (possibly empty).
    let sawAssignment = Atomic<Bool>(false)

    init(
        logger: Logger,
        onDelivery: (@Sendable (UInt64, Result<(KafkaPartition, KafkaOffset), KafkaError>) -> Void)? = nil,
        onError: (@Sendable (KafkaError) -> Void)? = nil,
        onRebalance: (@Sendable (RDKafkaRebalance) -> Bool)? = nil,
        onStatistics: (@Sendable (UnsafeRawBufferPointer) -> Void)? = nil
    ) {
        self.logger = logger
        self.onStatistics = onStatistics
        self.onDelivery = onDelivery
        self.onError = onError
        self.onRebalance = onRebalance
    }

    static func from(_ opaque: UnsafeMutableRawPointer?) -> RDKafkaContext? {
        guard let opaque else { return nil }
        return Unmanaged<RDKafkaContext>.fromOpaque(opaque).takeUnretainedValue()
    }
}

/// A rebalance as librdkafka reports it to `rebalance_cb`.
struct RDKafkaRebalance: Sendable {
    enum Kind: Sendable { case assigned, revoked }
    var kind: Kind
    var partitions: [KafkaTopicPartition]
    /// `rd_kafka_rebalance_protocol` is `COOPERATIVE`: only these partitions move.
    var isCooperative: Bool
    /// `rd_kafka_assignment_lost`: the partitions were lost (session timeout) rather than revoked.
    var isLost: Bool
}

/// Builds `rd_kafka_conf_t` objects. The returned pointer is owned by the caller until it is handed
/// to `rd_kafka_new` (which takes it over on success).
enum RDKafkaConfig {
    static func make(_ properties: [(String, String)], context: RDKafkaContext) throws(KafkaError) -> OpaquePointer {
        guard let conf = rd_kafka_conf_new() else {
            throw KafkaError(code: .invalidArgument, message: "rd_kafka_conf_new failed")
        }
        var errstr = [CChar](repeating: 0, count: 512)
        for (key, value) in properties {
            if rd_kafka_conf_set(conf, key, value, &errstr, errstr.count) != RD_KAFKA_CONF_OK {
                rd_kafka_conf_destroy(conf)
                throw KafkaError(code: .invalidArgument, message: "property \(key): \(String(cBuffer: errstr))")
            }
        }
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(context).toOpaque())
        rd_kafka_conf_set_log_cb(conf, rdKafkaLogCallback)
        rd_kafka_conf_set_error_cb(conf, rdKafkaErrorCallback)
        if context.onStatistics != nil { rd_kafka_conf_set_stats_cb(conf, rdKafkaStatisticsCallback) }
        return conf
    }

    /// `rd_kafka_new` of `type` with `conf` (consumed on success, destroyed on failure).
    static func newHandle(_ type: rd_kafka_type_t, conf: OpaquePointer) throws(KafkaError) -> OpaquePointer {
        var errstr = [CChar](repeating: 0, count: 512)
        guard let handle = rd_kafka_new(type, conf, &errstr, errstr.count) else {
            rd_kafka_conf_destroy(conf)
            throw KafkaError(code: .invalidArgument, message: "rd_kafka_new: \(String(cBuffer: errstr))")
        }
        return handle
    }
}

/// `log_cb`: librdkafka's syslog levels to our logger. Called from librdkafka's internal threads.
private func rdKafkaLogCallback(_ rk: OpaquePointer?, _ level: Int32, _ facility: UnsafePointer<CChar>?, _ message: UnsafePointer<CChar>?) {
    guard let rk, let context = RDKafkaContext.from(rd_kafka_opaque(rk)) else { return }
    let mapped: Logger.Level =
        switch level {
        case ...2: .critical
        case 3: .error
        case 4: .warning
        case 5: .notice
        case 6: .info
        default: .debug
        }
    guard mapped >= context.logger.logLevel else { return }
    context.logger.log(
        mapped, message.map { String(cString: $0) } ?? "",
        ["facility": facility.map { String(cString: $0) } ?? "", "client": String(cString: rd_kafka_name(rk))])
}

/// `error_cb`: client-level errors (all brokers down, fatal errors). Served by `rd_kafka_poll` /
/// `rd_kafka_consumer_poll` on the polling thread.
private func rdKafkaErrorCallback(_ rk: OpaquePointer?, _ err: Int32, _ reason: UnsafePointer<CChar>?, _ opaque: UnsafeMutableRawPointer?) {
    guard let context = RDKafkaContext.from(opaque) else { return }
    let code = KafkaError.Code(rawValue: err)
    let message = reason.map { String(cString: $0) } ?? code.name
    context.onError?(KafkaError(code: code, message: message))
}

/// `stats_cb`: librdkafka's statistics JSON (STATISTICS.md), served by the polling call. Returns 0:
/// librdkafka frees the buffer after the call.
private func rdKafkaStatisticsCallback(_ rk: OpaquePointer?, _ json: UnsafeMutablePointer<CChar>?, _ length: Int, _ opaque: UnsafeMutableRawPointer?) -> Int32 {
    guard let json, let context = RDKafkaContext.from(opaque) else { return 0 }
    context.onStatistics?(UnsafeRawBufferPointer(start: json, count: length))
    return 0
}

extension String {
    /// The NUL-terminated text in `buffer` (an `errstr` buffer filled by librdkafka).
    init(cBuffer buffer: [CChar]) {
        self = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }
}

/// `rd_kafka_version()` and `rd_kafka_version_str()` of the loaded library.
enum RDKafkaVersion {
    /// 0xMMmmrrxx: major, minor, revision, pre-release id.
    static var number: Int32 { rd_kafka_version() }
    static var text: String { String(cString: rd_kafka_version_str()) }
}

extension RDKafkaConfig {
    /// `rd_kafka_conf_set(name, value)` on a scratch configuration: `nil` when accepted, else the
    /// reason librdkafka gives.
    static func check(_ name: String, _ value: String) -> String? {
        guard let conf = rd_kafka_conf_new() else { return "rd_kafka_conf_new failed" }
        defer { rd_kafka_conf_destroy(conf) }
        var errstr = [CChar](repeating: 0, count: 512)
        guard rd_kafka_conf_set(conf, name, value, &errstr, errstr.count) == RD_KAFKA_CONF_OK else {
            return String(cBuffer: errstr)
        }
        return nil
    }
}
