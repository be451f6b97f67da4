internal import CRdKafka
import ServiceCore
import Synchronization

/// Owner of one consumer `rd_kafka_t` (a consumer-group member).
///
/// `@unchecked Sendable`: librdkafka's API is thread-safe (INTRODUCTION.md), so `commit` on the commit
/// thread may run while the poll thread is inside `rd_kafka_consumer_poll`. The handle is immutable;
/// `deinit` calls `rd_kafka_destroy` (blocking), after `close()` was called on the poll thread.
final class RDKafkaConsumerClient: @unchecked Sendable {
    enum PollResult {
        case nothing
        case message(KafkaMessage)
        /// A consumer error; `at` is the partition and offset it concerns, when librdkafka names them.
        case error(KafkaError, at: (KafkaTopicPartition, KafkaOffset)?)
    }

    private let handle: OpaquePointer
    private let context: RDKafkaContext
    private let cooperative: Bool

    /// Contexts of handles never destroyed (see `deinit`): librdkafka may still call into them.
    private static let leaked = Mutex<[RDKafkaContext]>([])

    init(properties: [(String, String)], context: RDKafkaContext) throws(KafkaError) {
        let conf = try RDKafkaConfig.make(properties, context: context)
        rd_kafka_conf_set_rebalance_cb(conf, rdKafkaRebalanceCallback)
        rd_kafka_conf_set_offset_commit_cb(conf, rdKafkaOffsetCommitCallback)
        self.handle = try RDKafkaConfig.newHandle(RD_KAFKA_CONSUMER, conf: conf)
        self.context = context
        self.cooperative = properties.last { $0.0 == "partition.assignment.strategy" }?.1.contains("cooperative-sticky") ?? false
        // Route the main queue (errors, commit results) to the consumer queue, so that
        // rd_kafka_consumer_poll serves every callback.
        rd_kafka_poll_set_consumer(handle)
    }

    deinit {
        // librdkafka before 2.3.0 aborts (assertion `assignor_state`, librdkafka issue 4312) when a
        // cooperative-sticky consumer is destroyed before its first assignment. The consumer was
        // closed (it left the group); its handle is left alive instead, which costs a few idle
        // threads until the process exits.
        if cooperative, !context.sawAssignment.load(ordering: .acquiring), !KafkaLibrary.hasCooperativeStickyFix {
            context.logger.warning(
                "consumer closed before its first assignment: not destroying it (librdkafka before 2.3.0 aborts)",
                ["librdkafka": KafkaLibrary.version])
            Self.leaked.withLock { $0.append(context) }
            return
        }
        rd_kafka_destroy(handle)
    }

    /// `rd_kafka_subscribe` to `topics`.
    func subscribe(_ topics: [String]) throws(KafkaError) {
        let list = rd_kafka_topic_partition_list_new(Int32(topics.count))!
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for topic in topics { rd_kafka_topic_partition_list_add(list, topic, RD_KAFKA_PARTITION_UA) }
        let err = rd_kafka_subscribe(handle, list)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err) }
    }

    /// One `rd_kafka_consumer_poll`: serves callbacks (rebalances, commit results, errors) and returns
    /// at most one message. Blocks up to `timeoutMilliseconds`.
    /// A value larger than `maxValueBytes` is not copied: the message carries its size instead.
    func poll(timeoutMilliseconds: Int32, maxValueBytes: Int = .max) -> PollResult {
        guard let message = rd_kafka_consumer_poll(handle, timeoutMilliseconds) else { return .nothing }
        defer { rd_kafka_message_destroy(message) }
        let m = message.pointee
        if m.err != RD_KAFKA_RESP_ERR_NO_ERROR {
            var text = String(cString: rd_kafka_err2str(m.err))
            if let payload = m.payload, m.len > 0 {
                text = String(decoding: UnsafeRawBufferPointer(start: payload, count: m.len), as: UTF8.self)
            }
            var at: (KafkaTopicPartition, KafkaOffset)?
            if let rkt = m.rkt {
                let topic = String(cString: rd_kafka_topic_name(rkt))
                text += " (\(topic)[\(m.partition)] at offset \(m.offset))"
                if m.partition >= 0 { at = (KafkaTopicPartition(topic: topic, partition: KafkaPartition(rawValue: m.partition)), KafkaOffset(rawValue: m.offset)) }
            }
            return .error(KafkaError(m.err, text), at: at)
        }
        let topic = m.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
        let key = m.key.map { Array(UnsafeRawBufferPointer(start: $0, count: m.key_len)) }
        let oversized = m.len > maxValueBytes
        let value = m.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: min(m.len, maxValueBytes))) } ?? []
        var headers: [KafkaHeader] = []
        var list: OpaquePointer?
        if rd_kafka_message_headers(message, &list) == RD_KAFKA_RESP_ERR_NO_ERROR, let list {
            var index = 0
            var name: UnsafePointer<CChar>?
            var bytes: UnsafeRawPointer?
            var size = 0
            while rd_kafka_header_get_all(list, index, &name, &bytes, &size) == RD_KAFKA_RESP_ERR_NO_ERROR {
                let headerValue = bytes.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) }
                headers.append(KafkaHeader(name: name.map { String(cString: $0) } ?? "", value: headerValue))
                index += 1
            }
        }
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let timestamp = rd_kafka_message_timestamp(message, &timestampType)
        var record = KafkaMessage(
            topic: topic, partition: KafkaPartition(rawValue: m.partition), offset: KafkaOffset(rawValue: m.offset),
            key: key, value: value, headers: headers,
            timestamp: timestampType == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? nil : timestamp)
        if oversized {
            record.oversizedValueBytes = m.len
            record.oversizedValueSHA256 = m.payload.map { Digest.sha256(UnsafeRawBufferPointer(start: $0, count: m.len)) }
        }
        return .message(record)
    }

    /// Commits explicit offsets (`rd_kafka_commit`). Blocking when `async` is `false`; then per-partition
    /// errors are reported too. With `async`, the outcome is only logged (offset_commit_cb).
    func commit(_ offsets: [(KafkaTopicPartition, KafkaOffset)], async: Bool) throws(KafkaError) {
        let list = Self.makeList(offsets.map(\.0))
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for (index, (_, offset)) in offsets.enumerated() {
            list.pointee.elems[index].offset = offset.rawValue
        }
        let err = rd_kafka_commit(handle, list, async ? 1 : 0)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err) }
        if !async {
            for index in 0..<Int(list.pointee.cnt) where list.pointee.elems[index].err != RD_KAFKA_RESP_ERR_NO_ERROR {
                let element = list.pointee.elems[index]
                throw KafkaError(element.err, "commit \(String(cString: element.topic))[\(element.partition)]: \(String(cString: rd_kafka_err2str(element.err)))")
            }
        }
    }

    /// `rd_kafka_offsets_store`: stores the next offsets to read for the next auto-commit. Non-blocking
    /// (it only takes the partitions' locks). librdkafka (since 1.9.0, so in 2.0.2) refuses partitions
    /// that are not assigned right now with `_STATE`, and partitions this client has no state for with
    /// `_UNKNOWN_PARTITION`: both are reported as `.notAssigned`. Results are in the order of `offsets`.
    func storeOffsets(_ offsets: [(KafkaTopicPartition, KafkaOffset)]) -> [KafkaStoreResult] {
        guard !offsets.isEmpty else { return [] }
        let list = Self.makeList(offsets.map(\.0))
        defer { rd_kafka_topic_partition_list_destroy(list) }
        for (index, (_, offset)) in offsets.enumerated() {
            list.pointee.elems[index].offset = offset.rawValue
        }
        let err = rd_kafka_offsets_store(handle, list)
        if err == RD_KAFKA_RESP_ERR__INVALID_ARG {
            // enable.auto.offset.store is on (only through additionalProperties): nothing was stored.
            let error = KafkaError(err, "offsets cannot be stored: enable.auto.offset.store is true")
            return offsets.map { _ in .failed(error) }
        }
        // Per-partition outcomes are in each element's .err, whatever the overall result.
        return (0..<offsets.count).map { index in
            let element = list.pointee.elems[index]
            switch element.err {
            case RD_KAFKA_RESP_ERR_NO_ERROR: return .stored
            case RD_KAFKA_RESP_ERR__STATE, RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION: return .notAssigned
            default:
                return .failed(KafkaError(element.err, "store \(offsets[index].0): \(String(cString: rd_kafka_err2str(element.err)))"))
            }
        }
    }

    /// `rd_kafka_committed`: asks the group coordinator for the committed offsets of `partitions`.
    /// Blocks up to `timeoutMilliseconds`. A partition without a committed offset maps to `nil`.
    func committed(_ partitions: [KafkaTopicPartition], timeoutMilliseconds: Int32) throws(KafkaError) -> [KafkaTopicPartition: KafkaOffset?] {
        guard !partitions.isEmpty else { return [:] }
        let list = Self.makeList(partitions)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let err = rd_kafka_committed(handle, list, timeoutMilliseconds)
        if err != RD_KAFKA_RESP_ERR_NO_ERROR { throw KafkaError(err) }
        var result: [KafkaTopicPartition: KafkaOffset?] = [:]
        for index in 0..<Int(list.pointee.cnt) {
            let element = list.pointee.elems[index]
            let partition = KafkaTopicPartition(topic: String(cString: element.topic), partition: KafkaPartition(rawValue: element.partition))
            if element.err != RD_KAFKA_RESP_ERR_NO_ERROR {
                throw KafkaError(element.err, "committed \(partition): \(String(cString: rd_kafka_err2str(element.err)))")
            }
            result[partition] = element.offset >= 0 ? KafkaOffset(rawValue: element.offset) : .some(nil)
        }
        return result
    }

    /// `rd_kafka_seek_partitions`: the partition's next fetch starts at `offset`. Waits up to
    /// `timeoutMilliseconds` for the fetcher to apply it, so that nothing fetched from the old position
    /// is returned afterwards.
    func seek(_ partition: KafkaTopicPartition, to offset: KafkaOffset, timeoutMilliseconds: Int32) -> KafkaError? {
        let list = Self.makeList([partition])
        defer { rd_kafka_topic_partition_list_destroy(list) }
        list.pointee.elems[0].offset = offset.rawValue
        if let error = rd_kafka_seek_partitions(handle, list, timeoutMilliseconds) { return KafkaError.consuming(error) }
        let element = list.pointee.elems[0]
        return element.err == RD_KAFKA_RESP_ERR_NO_ERROR ? nil : KafkaError(element.err)
    }

    /// `rd_kafka_pause_partitions`: stop fetching; the fetch position stays at the next undelivered record.
    func pause(_ partitions: [KafkaTopicPartition]) {
        guard !partitions.isEmpty else { return }
        let list = Self.makeList(partitions)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        rd_kafka_pause_partitions(handle, list)
    }

    /// `rd_kafka_resume_partitions`.
    func resume(_ partitions: [KafkaTopicPartition]) {
        guard !partitions.isEmpty else { return }
        let list = Self.makeList(partitions)
        defer { rd_kafka_topic_partition_list_destroy(list) }
        rd_kafka_resume_partitions(handle, list)
    }

    /// The current assignment (`rd_kafka_assignment`).
    func assignment() -> [KafkaTopicPartition] {
        var list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
        guard rd_kafka_assignment(handle, &list) == RD_KAFKA_RESP_ERR_NO_ERROR, let list else { return [] }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        return Self.partitions(of: list)
    }

    /// `rd_kafka_consumer_close`: revokes the assignment (serving the rebalance callback on this thread)
    /// and leaves the group. Blocks.
    func close() -> KafkaError? {
        let err = rd_kafka_consumer_close(handle)
        return err == RD_KAFKA_RESP_ERR_NO_ERROR ? nil : KafkaError(err)
    }

    static func makeList(_ partitions: [KafkaTopicPartition]) -> UnsafeMutablePointer<rd_kafka_topic_partition_list_t> {
        let list = rd_kafka_topic_partition_list_new(Int32(max(1, partitions.count)))!
        for item in partitions { rd_kafka_topic_partition_list_add(list, item.topic, item.partition.rawValue) }
        return list
    }

    static func partitions(of list: UnsafePointer<rd_kafka_topic_partition_list_t>) -> [KafkaTopicPartition] {
        (0..<Int(list.pointee.cnt)).map { index in
            let element = list.pointee.elems[index]
            return KafkaTopicPartition(topic: String(cString: element.topic), partition: KafkaPartition(rawValue: element.partition))
        }
    }
}

/// `rebalance_cb`, served by `rd_kafka_consumer_poll` (or `rd_kafka_consumer_close`) on the poll thread.
/// Tells the owner first (a revocation may wait there for the application to drain), then applies the
/// change with `rd_kafka_assign` (eager) or `rd_kafka_incremental_assign`/`_unassign` (cooperative).
/// While the owner waits in a revocation the partitions are still assigned, so offsets stored then are
/// accepted; with `enable.auto.commit` librdkafka commits them when the unassignment is served.
/// librdkafka keeps a partition's pause flag across unassign and re-assign, so revoked partitions that
/// were paused are resumed once unassigned (they fetch nothing any more).
private func rdKafkaRebalanceCallback(
    _ rk: OpaquePointer?, _ err: rd_kafka_resp_err_t, _ partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?,
    _ opaque: UnsafeMutableRawPointer?
) {
    guard let rk, let partitions else { return }
    let context = RDKafkaContext.from(opaque)
    let cooperative = rd_kafka_rebalance_protocol(rk).map { String(cString: $0) == "COOPERATIVE" } ?? false
    let list = RDKafkaConsumerClient.partitions(of: partitions)
    var failure: KafkaError?
    switch err {
    case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
        context?.sawAssignment.store(true, ordering: .releasing)
        if cooperative {
            if let error = rd_kafka_incremental_assign(rk, partitions) { failure = KafkaError.consuming(error) }
        } else {
            let result = rd_kafka_assign(rk, partitions)
            if result != RD_KAFKA_RESP_ERR_NO_ERROR { failure = KafkaError(result) }
        }
        let pause = context?.onRebalance?(RDKafkaRebalance(kind: .assigned, partitions: list, isCooperative: cooperative, isLost: false)) ?? false
        if pause, !list.isEmpty { rd_kafka_pause_partitions(rk, partitions) }
    case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
        let lost = rd_kafka_assignment_lost(rk) != 0
        let wasPaused = context?.onRebalance?(RDKafkaRebalance(kind: .revoked, partitions: list, isCooperative: cooperative, isLost: lost)) ?? false
        if cooperative {
            if let error = rd_kafka_incremental_unassign(rk, partitions) { failure = KafkaError.consuming(error) }
        } else {
            let result = rd_kafka_assign(rk, nil)
            if result != RD_KAFKA_RESP_ERR_NO_ERROR { failure = KafkaError(result) }
        }
        if wasPaused, !list.isEmpty { rd_kafka_resume_partitions(rk, partitions) }
    default:
        failure = KafkaError(err, "rebalance error: \(String(cString: rd_kafka_err2str(err)))")
        _ = rd_kafka_assign(rk, nil)
    }
    if let failure { context?.logger.error("rebalance failed", ["error": "\(failure)"]) }
}

/// `offset_commit_cb`: outcome of asynchronous commits, logged.
private func rdKafkaOffsetCommitCallback(
    _ rk: OpaquePointer?, _ err: rd_kafka_resp_err_t, _ offsets: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?,
    _ opaque: UnsafeMutableRawPointer?
) {
    guard err != RD_KAFKA_RESP_ERR_NO_ERROR, err != RD_KAFKA_RESP_ERR__NO_OFFSET, let context = RDKafkaContext.from(opaque) else { return }
    context.logger.warning("offset commit failed", ["error": String(cString: rd_kafka_err2str(err))])
}
