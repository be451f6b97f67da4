internal import CRdKafka
import Foundation
import ServiceCore

/// A record as the producer keeps it until the broker acknowledged it (re-sent after a fatal error).
struct OutgoingRecord: Sendable {
    var topic: String
    var key: [UInt8]?
    var value: [UInt8]
    var headers: [KafkaHeader]
}

/// Owner of one producer `rd_kafka_t`.
///
/// `@unchecked Sendable`: librdkafka documents its API as thread-safe ("all public APIs are
/// thread-safe" unless noted, INTRODUCTION.md), so `produce` from any thread and `poll` on the poll
/// thread may run concurrently. The handle is immutable; `deinit` calls `rd_kafka_destroy`, which
/// blocks, and must therefore run on the producer's poll thread (which holds the last reference).
final class RDKafkaProducerClient: @unchecked Sendable {
    private let handle: OpaquePointer
    private let context: RDKafkaContext
    /// Which incarnation of the producer this is (0, then +1 after every fatal-error recovery).
    let generation: Int

    init(properties: [(String, String)], generation: Int, context: RDKafkaContext) throws(KafkaError) {
        let conf = try RDKafkaConfig.make(properties, context: context)
        rd_kafka_conf_set_dr_msg_cb(conf, rdKafkaDeliveryCallback)
        self.handle = try RDKafkaConfig.newHandle(RD_KAFKA_PRODUCER, conf: conf)
        self.context = context
        self.generation = generation
    }

    deinit {
        // Messages still queued get a _PURGE_QUEUE delivery report that nobody polls any more:
        // the owner re-sent or failed them already.
        rd_kafka_purge(handle, Int32(RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT | RD_KAFKA_PURGE_F_NON_BLOCKING))
        rd_kafka_destroy(handle)
    }

    /// Whether a broker answers a metadata request (`rd_kafka_metadata`) within `timeoutMilliseconds`.
    /// Blocks up to that long: call it on a thread of its own.
    func brokersReachable(timeoutMilliseconds: Int32) -> Bool {
        var metadata: UnsafePointer<rd_kafka_metadata>?
        let error = rd_kafka_metadata(handle, 0, nil, &metadata, timeoutMilliseconds)
        if let metadata { rd_kafka_metadata_destroy(metadata) }
        return error == RD_KAFKA_RESP_ERR_NO_ERROR
    }

    /// Enqueues `record` with `rd_kafka_produceva` (copying key, value and headers); its delivery report
    /// carries `id`. Returns `nil` when enqueued, else the error (`queueFull`, `fatal`, …). Non-blocking.
    func produce(id: UInt64, _ record: OutgoingRecord) -> KafkaError? {
        // One flat buffer of header values, plus a sentinel byte so that empty values get a non-NULL
        // pointer (a NULL pointer means a null header value).
        var headerBytes: [UInt8] = []
        var headerRanges: [Range<Int>?] = []
        for header in record.headers {
            if let value = header.value {
                headerRanges.append(headerBytes.count..<(headerBytes.count + value.count))
                headerBytes.append(contentsOf: value)
            } else {
                headerRanges.append(nil)
            }
        }
        headerBytes.append(0)
        let topic = strdup(record.topic)
        let names = record.headers.map { strdup($0.name) }
        defer {
            free(topic)
            names.forEach { free($0) }
        }
        return record.value.withUnsafeBytes { value in
            withOptionalBytes(record.key) { key in
                headerBytes.withUnsafeBytes { headerBase in
                    var vus: [rd_kafka_vu_t] = []
                    vus.reserveCapacity(6 + names.count)
                    var vu = rd_kafka_vu_t()
                    vu.vtype = RD_KAFKA_VTYPE_TOPIC
                    vu.u.cstr = UnsafePointer(topic)
                    vus.append(vu)
                    if let key {
                        vu = rd_kafka_vu_t()
                        vu.vtype = RD_KAFKA_VTYPE_KEY
                        vu.u.mem.ptr = UnsafeMutableRawPointer(mutating: key.baseAddress ?? headerBase.baseAddress!)
                        vu.u.mem.size = key.count
                        vus.append(vu)
                    }
                    vu = rd_kafka_vu_t()
                    vu.vtype = RD_KAFKA_VTYPE_VALUE
                    vu.u.mem.ptr = UnsafeMutableRawPointer(mutating: value.baseAddress ?? headerBase.baseAddress!)
                    vu.u.mem.size = value.count
                    vus.append(vu)
                    for (index, name) in names.enumerated() {
                        vu = rd_kafka_vu_t()
                        vu.vtype = RD_KAFKA_VTYPE_HEADER
                        vu.u.header.name = UnsafePointer(name)
                        if let range = headerRanges[index] {
                            vu.u.header.val = UnsafeRawPointer(headerBase.baseAddress! + range.lowerBound)
                            vu.u.header.size = range.count
                        } else {
                            vu.u.header.val = nil
                            vu.u.header.size = 0
                        }
                        vus.append(vu)
                    }
                    vu = rd_kafka_vu_t()
                    vu.vtype = RD_KAFKA_VTYPE_OPAQUE
                    vu.u.ptr = UnsafeMutableRawPointer(bitPattern: UInt(id))
                    vus.append(vu)
                    vu = rd_kafka_vu_t()
                    vu.vtype = RD_KAFKA_VTYPE_MSGFLAGS
                    vu.u.i = RD_KAFKA_MSG_F_COPY
                    vus.append(vu)
                    guard let error = rd_kafka_produceva(handle, vus, vus.count) else { return nil }
                    let failure = KafkaError.consuming(error)
                    // After a fatal error, produce fails with the fatal error's underlying code
                    // (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER), not _FATAL: report it as _FATAL.
                    if rd_kafka_fatal_error(handle, nil, 0) != RD_KAFKA_RESP_ERR_NO_ERROR {
                        return KafkaError(code: .fatal, message: failure.message)
                    }
                    return failure
                }
            }
        }
    }

    /// Serves delivery reports and error callbacks for up to `timeoutMilliseconds` (`rd_kafka_poll`). Blocks.
    func poll(timeoutMilliseconds: Int32) {
        rd_kafka_poll(handle, timeoutMilliseconds)
    }

    /// The effective `message.max.bytes` of this instance (after every property was applied), in bytes.
    var maxMessageBytes: Int {
        guard let conf = rd_kafka_conf(handle) else { return 1_000_000 }
        var buffer = [CChar](repeating: 0, count: 32)
        var size = buffer.count
        guard rd_kafka_conf_get(conf, "message.max.bytes", &buffer, &size) == RD_KAFKA_CONF_OK else { return 1_000_000 }
        return Int(String(cBuffer: buffer)) ?? 1_000_000
    }

    /// Records queued or in flight inside librdkafka (`rd_kafka_outq_len`).
    var outQueueLength: Int { Int(rd_kafka_outq_len(handle)) }

    /// The fatal error raised on this instance, if any (`rd_kafka_fatal_error`).
    var fatalError: KafkaError? {
        var errstr = [CChar](repeating: 0, count: 512)
        let err = rd_kafka_fatal_error(handle, &errstr, errstr.count)
        guard err != RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
        return KafkaError(code: .fatal, message: "\(KafkaError.Code(err).name): \(String(cBuffer: errstr))")
    }

    /// Raises a fatal error on this instance, as librdkafka's own tests do (`rd_kafka_test_fatal_error`).
    func raiseFatalErrorForTesting(reason: String) {
        _ = rd_kafka_test_fatal_error(handle, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, reason)
    }
}

private func withOptionalBytes<R>(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> R) -> R {
    guard let bytes else { return body(nil) }
    return bytes.withUnsafeBytes { body($0) }
}

/// `dr_msg_cb`: one call per record, served by `rd_kafka_poll` on the poll thread.
private func rdKafkaDeliveryCallback(_ rk: OpaquePointer?, _ message: UnsafePointer<rd_kafka_message_t>?, _ opaque: UnsafeMutableRawPointer?) {
    guard let message, let context = RDKafkaContext.from(opaque) else { return }
    let id = UInt64(UInt(bitPattern: message.pointee._private))
    let err = message.pointee.err
    if err == RD_KAFKA_RESP_ERR_NO_ERROR {
        context.onDelivery?(id, .success((KafkaPartition(rawValue: message.pointee.partition), KafkaOffset(rawValue: message.pointee.offset))))
    } else if let rk, rd_kafka_fatal_error(rk, nil, 0) != RD_KAFKA_RESP_ERR_NO_ERROR {
        // The instance failed fatally (librdkafka raises it before failing the records, e.g. with
        // OUT_OF_ORDER_SEQUENCE_NUMBER): the record's failure is the instance's, not its own.
        context.onDelivery?(id, .failure(KafkaError(code: .fatal, message: "instance failed fatally; record failed with \(KafkaError.Code(err).name)")))
    } else {
        context.onDelivery?(id, .failure(KafkaError(err)))
    }
}
