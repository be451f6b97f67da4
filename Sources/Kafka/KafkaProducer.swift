import Foundation
import ServiceCore
import Synchronization

/// An idempotent Kafka producer (acks=all by default) whose `send` resolves once the broker
/// acknowledged the record.
///
/// - Delivery reports are served by `rd_kafka_poll` on a thread of the producer's own
///   (`kafka-producer-poll`), never on Swift's cooperative pool; `send` itself only enqueues
///   (non-blocking `rd_kafka_produceva`) and suspends.
/// - Back-pressure: when librdkafka's local queue is full (`_QUEUE_FULL`), records wait in an
///   in-memory backlog, in `send` order, and are enqueued as room appears; `send` keeps waiting
///   rather than failing. Memory therefore grows with the number of concurrent `send` calls.
/// - Fatal errors (`_FATAL`, e.g. the idempotent producer's sequence desynchronisation in
///   librdkafka 2.0.2): the poll thread destroys the `rd_kafka_t`, creates a new one and re-sends
///   every record not yet acknowledged, in `send` order; callers only see a longer wait. A record
///   that the broker had written but whose acknowledgement was lost with the old instance is
///   written again (at-least-once).
/// - Ordering: records of one key keep `send` order as long as no fatal-error recovery intervenes.
public final class KafkaProducer: Sendable {
    private let core: ProducerCore

    /// Creates the producer and starts its poll thread.
    /// - Throws: `KafkaError` with code `invalidArgument` when librdkafka rejects a property.
    public init(configuration: KafkaProducerConfiguration, logger: Logger = Logger(label: "kafka.producer")) throws(KafkaError) {
        core = try ProducerCore(configuration: configuration, logger: logger)
        core.startPollThread()
    }

    deinit { core.requestStop() }

    /// Sends one record and waits until the broker acknowledged it (with `acks=all`: every in-sync
    /// replica), however long outages, a full local queue or fatal-error recovery take.
    ///
    /// Cancelling the calling task does not withdraw the record; the call still waits for its outcome.
    /// - Parameters:
    ///   - topic: the topic name.
    ///   - key: the record key; records with equal keys go to the same partition. `nil` for none.
    ///   - value: the record value bytes.
    ///   - headers: record headers, kept in this order.
    /// - Returns: the partition and offset the broker assigned.
    /// - Throws: `KafkaError`: `messageTimedOut` after `messageTimeout`, `messageSizeTooLarge` (the
    ///   record exceeds `maxMessageBytes`, found by librdkafka before sending, or the broker's limit,
    ///   found in the delivery report),
    ///   `unknownTopicOrPartition`, `shutdown` after `shutdown()`, `fatal` when recovery is disabled.
    public func send(topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader] = []) async throws -> KafkaDeliveryReport {
        try await withCheckedThrowingContinuation { continuation in
            send(topic: topic, key: key, value: value, headers: headers) { continuation.resume(with: $0) }
        }
    }

    /// Sends one record without waiting: `onAcknowledged` is called once with the broker's
    /// acknowledgement or the error that ends the record (the same errors as
    /// `send(topic:key:value:headers:)`). It runs on the producer's poll thread (or on the caller's,
    /// for a failure found at once) and must not block; no task is created per record.
    public func send(topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader] = [],
                     onAcknowledged: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void) {
        core.send(OutgoingRecord(topic: topic, key: key, value: value, headers: headers)) { result in
            switch result {
            case .success(let (partition, offset)):
                onAcknowledged(.success(KafkaDeliveryReport(topic: topic, partition: partition, offset: offset)))
            case .failure(let error) where error.code == .unknownTopic || error.code == .unknownTopicOrPartition:
                onAcknowledged(.failure(KafkaError(code: error.code, message: "topic \"\(topic)\" does not exist (\(error.message))", cause: error)))
            case .failure(let error):
                onAcknowledged(.failure(error))
            }
        }
    }

    /// Sends one record whose key is the UTF-8 encoding of `key`. See `send(topic:key:value:headers:)`.
    public func send(topic: String, key: String, value: [UInt8], headers: [KafkaHeader] = []) async throws -> KafkaDeliveryReport {
        try await send(topic: topic, key: Array(key.utf8), value: value, headers: headers)
    }

    /// The settings the producer was created with.
    public var configuration: KafkaProducerConfiguration { core.configuration }

    /// What the producer's callbacks last reported (poll age, last error, broker states from the
    /// statistics), without any I/O. See `KafkaClientHealth`.
    public var health: KafkaClientHealth { core.health }

    /// Waits until every record sent so far was acknowledged (or failed).
    ///
    /// The deadline is a child task of a task group inside this call, cancelled as soon as the wait is
    /// served; no task outlives the call.
    /// - Parameter timeout: how long to wait at most (`.zero`: only report whether anything is pending).
    /// - Throws: `KafkaError` with code `timedOut` when records are still pending after `timeout`, or
    ///   when the producer stopped first; `CancellationError` when the calling task is cancelled while
    ///   records are pending (the wait then ends at once; the records stay pending).
    public func flush(timeout: Duration) async throws {
        guard await core.flush(timeout: timeout) else {
            try Task.checkCancellation()
            throw KafkaError(code: .timedOut, message: "\(core.pendingCount) records still unacknowledged after \(timeout)")
        }
    }

    /// Flushes for up to `timeout`, fails what is still pending with `shutdown`, then destroys the
    /// librdkafka instance and ends the poll thread. Later `send` calls throw `shutdown`. Idempotent.
    ///
    /// When the calling task is cancelled (escalation), the flush ends at once, as if `timeout` had
    /// passed, and the rest of the shutdown proceeds.
    public func shutdown(timeout: Duration = .seconds(10)) async {
        _ = await core.flush(timeout: timeout)
        await core.stop()
    }

    /// Records sent but not yet acknowledged or failed.
    public var pendingCount: Int { core.pendingCount }

    /// Whether a broker of the cluster answers a metadata request within `timeout`, and the producer
    /// is not failed for good: the readiness signal of a service that produces (health checks).
    /// Blocks the calling thread up to `timeout` (`rd_kafka_metadata`): call it on a `DedicatedThread`,
    /// never on the cooperative pool.
    public func brokersReachable(timeout: Duration) -> Bool {
        core.brokersReachable(timeoutMilliseconds: Int32(clamping: timeout.wholeMilliseconds))
    }

    /// The largest record this producer accepts, in bytes: librdkafka's effective `message.max.bytes`
    /// (`KafkaProducerConfiguration.maxMessageBytes` or an `additionalProperties` override; librdkafka's
    /// default is 1,000,000). Key, value and headers plus a per-record overhead of a few dozen bytes
    /// must fit; a larger `send` throws a `KafkaError` with code `messageSizeTooLarge`.
    public var maxMessageBytes: Int { core.maxMessageBytes }

    /// How many times the producer recreated its librdkafka instance after a fatal error.
    public var fatalErrorRecoveries: Int { core.recoveries }

    /// Raises a fatal error inside librdkafka (`rd_kafka_test_fatal_error`), for recovery tests.
    func raiseFatalErrorForTesting(reason: String) { core.raiseFatalErrorForTesting(reason: reason) }
}

/// The producer's state and poll thread. All mutable state lives in `state`; continuations are resumed
/// after the lock is released.
final class ProducerCore: Sendable {
    /// Called once with a record's fate: the broker's acknowledgement or the error that ends it.
    typealias Completion = @Sendable (Result<(KafkaPartition, KafkaOffset), KafkaError>) -> Void

    fileprivate struct Pending {
        var record: OutgoingRecord
        /// Called on the poll thread (or the sender's, for an immediate failure), outside the lock.
        var completion: Completion
        /// The generation of the producer instance it was last enqueued on; `nil` while in the backlog.
        var generation: Int?
    }

    /// A `flush` call, from the moment it took its id until it is served or expires.
    fileprivate enum FlushWaiter {
        /// Has an id but has not suspended yet.
        case announced
        /// Suspended until nothing is pending (resumed with `true`), its deadline passes or the producer
        /// stops (`false`).
        case waiting(CheckedContinuation<Bool, Never>)
        /// The deadline passed (or the caller was cancelled) before it suspended: it returns `false` at once.
        case expired
    }

    fileprivate struct State {
        var client: RDKafkaProducerClient?
        var maxMessageBytes = 1_000_000
        var generation = 0
        var nextID: UInt64 = 1
        var pending: [UInt64: Pending] = [:]
        /// Ids waiting to be enqueued (queue full, or waiting for a new instance), in send order.
        var backlog: [UInt64] = []
        var fatal: KafkaError?
        /// Set when recovery is disabled and a fatal error happened: every later send fails with it.
        var failedPermanently: KafkaError?
        var stopping = false
        var stopped = false
        var recoveries = 0
        var lastRecovery: ContinuousClock.Instant?
        var consecutiveFatal = 0
        var nextWaiterID: UInt64 = 0
        var flushWaiters: [UInt64: FlushWaiter] = [:]
        var stopWaiters: [CheckedContinuation<Void, Never>] = []
    }

    let configuration: KafkaProducerConfiguration
    private let logger: Logger
    private let state = Mutex(State())
    /// Errors, statistics and the poll thread's heartbeat (`kafka-producer-poll`).
    let monitor = KafkaClientMonitor(heartbeatName: "kafka-producer-poll")

    init(configuration: KafkaProducerConfiguration, logger: Logger) throws(KafkaError) {
        self.configuration = configuration
        self.logger = logger
        let client: RDKafkaProducerClient
        do {
            client = try makeClient(generation: 0)
        } catch {
            Heartbeats.shared.remove(monitor.heartbeat)
            throw error
        }
        state.withLock { s in
            s.maxMessageBytes = client.maxMessageBytes
            s.client = client
        }
    }

    func brokersReachable(timeoutMilliseconds: Int32) -> Bool {
        guard let client = state.withLock({ s in s.failedPermanently == nil && !s.stopping ? s.client : nil }) else { return false }
        return client.brokersReachable(timeoutMilliseconds: timeoutMilliseconds)
    }

    /// The first instance's effective `message.max.bytes` (replacements use the same properties).
    var maxMessageBytes: Int { state.withLock { $0.maxMessageBytes } }

    private func makeClient(generation: Int) throws(KafkaError) -> RDKafkaProducerClient {
        let context = RDKafkaContext(
            logger: logger.with(["generation": String(generation)]),
            onDelivery: { [weak self] id, result in self?.delivered(generation: generation, id: id, result: result) },
            onError: { [weak self] error in self?.clientError(generation: generation, error: error) },
            onStatistics: { [monitor] json in monitor.recordStatistics(json) })
        return try RDKafkaProducerClient(properties: configuration.properties, generation: generation, context: context)
    }

    func startPollThread() {
        NamedThread.start(name: "kafka-prod-poll") { [self] in pollLoop() }
    }

    var pendingCount: Int { state.withLock { $0.pending.count } }
    var health: KafkaClientHealth { monitor.snapshot(joined: true, assignedPartitions: 0) }
    var recoveries: Int { state.withLock { $0.recoveries } }

    func raiseFatalErrorForTesting(reason: String) {
        state.withLock { $0.client?.raiseFatalErrorForTesting(reason: reason) }
    }

    // MARK: Sending

    /// Enqueues `record`; `completion` is called once, when Kafka acknowledged it or it failed. It runs
    /// on the poll thread (or on the caller's, for a failure found at once) and must not block.
    func send(_ record: OutgoingRecord, completion: @escaping Completion) {
        let failure: KafkaError? = state.withLock { s in
            if s.stopping { return KafkaError(code: .shutdown, message: "producer is shut down") }
            if let error = s.failedPermanently { return error }
            let id = s.nextID
            s.nextID += 1
            s.pending[id] = Pending(record: record, completion: completion, generation: nil)
            guard s.backlog.isEmpty, s.fatal == nil, let client = s.client else {
                s.backlog.append(id)
                return nil
            }
            guard let error = client.produce(id: id, record) else {
                s.pending[id]!.generation = client.generation
                return nil
            }
            switch error.code {
            case .queueFull:
                s.backlog.append(id)
            case .fatal:
                s.fatal = s.fatal ?? error
                s.backlog.append(id)
            default:
                s.pending[id] = nil
                return error
            }
            return nil
        }
        if let failure { completion(.failure(failure)) }
    }

    /// Delivery report callback (poll thread).
    private func delivered(generation: Int, id: UInt64, result: Result<(KafkaPartition, KafkaOffset), KafkaError>) {
        let (resolved, waiters) = state.withLock { s -> ((Pending, Result<(KafkaPartition, KafkaOffset), KafkaError>)?, [CheckedContinuation<Bool, Never>]) in
            guard let pending = s.pending[id] else { return (nil, []) }  // already acknowledged: a re-sent duplicate
            switch result {
            case .success(let position):
                s.pending[id] = nil
                return (((pending, .success(position))), s.takeFlushWaitersIfIdle())
            case .failure(let error):
                // A failure of an attempt that was superseded by a re-send is not the record's outcome.
                guard pending.generation == generation else { return (nil, []) }
                if ProducerCore.needsRecovery(error.code, idempotent: configuration.enableIdempotence), configuration.recoverFromFatalErrors {
                    s.fatal = s.fatal ?? error
                    return (nil, [])  // stays pending: re-sent after recovery
                }
                s.pending[id] = nil
                return ((pending, .failure(error)), s.takeFlushWaitersIfIdle())
            }
        }
        if let (pending, result) = resolved { pending.completion(result) }
        waiters.forEach { $0.resume(returning: true) }
    }

    /// Record failures that mean the instance must be replaced rather than the record failed: the
    /// fatal error itself, purges (our own, while replacing), and the idempotence errors that
    /// librdkafka 2.0.2 turns into fatal errors (sequence desynchronisation).
    static func needsRecovery(_ code: KafkaError.Code, idempotent: Bool) -> Bool {
        switch code {
        case .fatal, .purgedFromQueue, .purgedInFlight: true
        case .outOfOrderSequenceNumber, .unknownProducerID, .invalidProducerEpoch: idempotent
        default: false
        }
    }

    /// `error_cb` (poll thread).
    private func clientError(generation: Int, error: KafkaError) {
        // A fatal error is recovered from by replacing the instance, unless recovery is off.
        monitor.recordError(error, fatal: error.isFatal && !configuration.recoverFromFatalErrors)
        if error.code == .fatal {
            logger.error("producer fatal error", ["error": error.message, "generation": String(generation)])
            state.withLock { s in
                if s.generation == generation { s.fatal = s.fatal ?? error }
            }
        } else {
            logger.warning("producer error", ["error": "\(error)"])
        }
    }

    // MARK: Poll thread

    private func pollLoop() {
        defer { Heartbeats.shared.remove(monitor.heartbeat) }
        while true {
            monitor.heartbeat.beat()
            let (client, stopping, hasBacklog, fatal) = state.withLock { s in (s.client, s.stopping, !s.backlog.isEmpty, s.fatal) }
            if stopping { break }
            if let fatal {
                handleFatal(fatal, old: client)
                continue
            }
            guard let client else { break }
            client.poll(timeoutMilliseconds: hasBacklog ? 5 : 100)
            if hasBacklog { drainBacklog() }
        }
        // Destroy the instance here, on this thread: rd_kafka_destroy blocks.
        let (client, leftovers, flushWaiters, stopWaiters) = state.withLock { s in
            let client = s.client
            s.client = nil
            s.stopped = true
            let leftovers = s.pending.values.map(\.completion)
            s.pending.removeAll()
            s.backlog.removeAll()
            let flushWaiters = s.flushWaiters.values.compactMap(\.continuation)
            s.flushWaiters.removeAll()  // an announced waiter finds itself served: it sees `stopped`
            let stopWaiters = s.stopWaiters
            s.stopWaiters.removeAll()
            return (client, leftovers, flushWaiters, stopWaiters)
        }
        _ = consume client
        leftovers.forEach { $0(.failure(KafkaError(code: .shutdown, message: "producer shut down before acknowledgement"))) }
        flushWaiters.forEach { $0.resume(returning: false) }
        stopWaiters.forEach { $0.resume() }
    }

    /// Enqueues backlog records in order until the local queue is full again.
    private func drainBacklog() {
        let failures = state.withLock { s -> [(Completion, KafkaError)] in
            guard let client = s.client, s.fatal == nil else { return [] }
            var failures: [(Completion, KafkaError)] = []
            var index = 0
            loop: while index < s.backlog.count {
                let id = s.backlog[index]
                guard let pending = s.pending[id] else {
                    index += 1
                    continue
                }
                if let error = client.produce(id: id, pending.record) {
                    switch error.code {
                    case .queueFull:
                        break loop
                    case .fatal:
                        s.fatal = s.fatal ?? error
                        break loop
                    default:
                        s.pending[id] = nil
                        failures.append((pending.completion, error))
                    }
                } else {
                    s.pending[id]!.generation = client.generation
                }
                index += 1
            }
            s.backlog.removeFirst(index)
            return failures
        }
        for (completion, error) in failures { completion(.failure(error)) }
    }

    /// Replaces the failed instance and re-sends every unacknowledged record, or fails them all when
    /// recovery is disabled.
    private func handleFatal(_ fatal: KafkaError, old: RDKafkaProducerClient?) {
        // Serve what the old instance still has: acknowledgements received before the fatal error
        // resolve their callers; its failures are ignored (the records stay pending).
        old?.poll(timeoutMilliseconds: 0)
        let detail = old?.fatalError ?? fatal
        guard configuration.recoverFromFatalErrors else {
            let (failed, waiters) = state.withLock { s in
                s.failedPermanently = detail
                s.fatal = nil
                let failed = s.pending.values.map(\.completion)
                s.pending.removeAll()
                s.backlog.removeAll()
                return (failed, s.takeFlushWaitersIfIdle())
            }
            failed.forEach { $0(.failure(detail)) }
            waiters.forEach { $0.resume(returning: true) }
            logger.error("producer failed fatally; recovery disabled", ["error": detail.message])
            state.withLock { $0.stopping = true }
            return
        }
        let generation = state.withLock { s in
            s.client = nil
            return s.generation + 1
        }
        _ = consume old  // rd_kafka_destroy, on this thread
        // Back off when fatal errors follow each other closely (a broker that keeps failing us):
        // 0 s for the first, then 0.2 s, 0.4 s, … up to 5 s.
        let now = ContinuousClock.now
        let consecutiveFatal = state.withLock { s in
            s.consecutiveFatal = s.lastRecovery.map { now - $0 < .seconds(30) } == true ? s.consecutiveFatal + 1 : 0
            s.lastRecovery = now
            return s.consecutiveFatal
        }
        if consecutiveFatal > 0 {
            Thread.sleep(forTimeInterval: min(5, 0.1 * Double(1 << min(consecutiveFatal, 6))))
        }
        var replacement: RDKafkaProducerClient?
        while replacement == nil {
            do {
                replacement = try makeClient(generation: generation)
            } catch {
                logger.error("cannot recreate producer after fatal error; retrying in 1 s", ["error": "\(error)"])
                Thread.sleep(forTimeInterval: 1)
                if state.withLock({ $0.stopping }) { return }
            }
        }
        let resent = state.withLock { s in
            s.client = replacement
            s.generation = generation
            s.fatal = nil
            s.recoveries += 1
            for id in s.pending.keys { s.pending[id]!.generation = nil }
            s.backlog = s.pending.keys.sorted()
            return s.backlog.count
        }
        logger.warning(
            "producer recreated after fatal error; re-sending unacknowledged records",
            ["error": detail.message, "generation": String(generation), "records": String(resent)])
        drainBacklog()
    }

    // MARK: Flush and stop

    /// Waits until nothing is pending, for up to `timeout`.
    ///
    /// The deadline is a child of a task group: it sleeps until `timeout` has passed, then expires the
    /// waiter; the group's body suspends on the waiter's continuation and cancels the child once served.
    /// A deadline that passes before the body suspended marks the waiter `expired`, which the body finds.
    /// - Returns: `true` when nothing was pending (or the producer had stopped) at the call or later
    ///   within `timeout`; `false` when `timeout` passed first, the producer stopped while records were
    ///   pending, or the calling task was cancelled (the child's sleep then ends at once).
    func flush(timeout: Duration) async -> Bool {
        let id = state.withLock { s -> UInt64? in
            guard !s.pending.isEmpty, !s.stopped else { return nil }
            s.nextWaiterID += 1
            s.flushWaiters[s.nextWaiterID] = .announced
            return s.nextWaiterID
        }
        guard let id else { return true }
        let deadline = ContinuousClock.now.advanced(by: timeout)
        return await withTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                // Cancelled (served, or the caller was cancelled): the sleep ends early and expiring
                // finds nothing to do when the waiter was served.
                try? await Task.sleep(until: deadline, clock: .continuous)
                expireFlushWaiter(id)
            }
            defer { group.cancelAll() }
            return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let outcome = state.withLock { s -> Bool? in
                    switch s.flushWaiters[id] {
                    case nil:
                        return true  // served before it suspended (nothing pending, or stopped)
                    case .expired?:
                        s.flushWaiters[id] = nil
                        return false
                    case .announced?, .waiting?:
                        if s.pending.isEmpty || s.stopped {
                            s.flushWaiters[id] = nil
                            return true
                        }
                        s.flushWaiters[id] = .waiting(continuation)
                        return nil
                    }
                }
                if let outcome { continuation.resume(returning: outcome) }
            }
        }
    }

    /// The deadline of flush waiter `id` passed: resumes it with `false` when it is still waiting, marks
    /// it `expired` when it has not suspended yet, and does nothing when it was served.
    private func expireFlushWaiter(_ id: UInt64) {
        let continuation = state.withLock { s -> CheckedContinuation<Bool, Never>? in
            switch s.flushWaiters[id] {
            case .waiting(let continuation)?:
                s.flushWaiters[id] = nil
                return continuation
            case .announced?:
                s.flushWaiters[id] = .expired
                return nil
            case .expired?, nil:
                return nil
            }
        }
        continuation?.resume(returning: false)
    }

    func stop() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { s -> Bool in
                if s.stopped { return true }
                s.stopping = true
                s.stopWaiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// Asks the poll thread to end without waiting (from `KafkaProducer.deinit`).
    func requestStop() {
        state.withLock { $0.stopping = true }
    }
}

extension ProducerCore.State {
    /// The flush waiters to resume when nothing is pending any more. Every waiter is removed: one that
    /// has not suspended yet finds itself served and returns `true`; one that expired before suspending
    /// also returns `true`, since nothing is pending.
    fileprivate mutating func takeFlushWaitersIfIdle() -> [CheckedContinuation<Bool, Never>] {
        guard pending.isEmpty, !flushWaiters.isEmpty else { return [] }
        defer { flushWaiters.removeAll() }
        return flushWaiters.values.compactMap(\.continuation)
    }
}

extension ProducerCore.FlushWaiter {
    /// The continuation of a suspended waiter.
    fileprivate var continuation: CheckedContinuation<Bool, Never>? {
        if case .waiting(let continuation) = self { continuation } else { nil }
    }
}
