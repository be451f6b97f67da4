import Kafka
import Postgres
import PushMessages
import ServiceCore

// MARK: - Send requests (docs/semantics.md, docs/campaigns.md)

extension Dispatcher {
    /// One record of the send-requests topic: a `CancelRequest` (applied), a record refused for its
    /// content (dead-lettered, with a `RequestCompleted` naming the reason), a campaign or scheduled
    /// send (stored as a campaign row), or a request run here, joining a handling of the same request
    /// id still running in this process. The record is looked at once (`SendRequestsRoute`): its
    /// content type parsed and its value decoded and checked. Throws only for transient
    /// infrastructure failures.
    func handleSendRequest(_ message: KafkaMessage, retryContext: RetryContext, shouldStop: @escaping @Sendable () -> Bool) async throws -> RecordOutcome {
        let headerTrace = message.headers.last { $0.name.lowercased() == TraceParent.headerName }?.value.map { String(decoding: $0, as: UTF8.self) }
        let checked: CheckedSendRequest
        switch SendRequestsRoute(message, limits: configuration.intake.sendRequestLimits) {
        case .channelCommand(let command):
            // A ChannelCommand record (docs/live-activities.md), in key order.
            return try await applyChannelCommand(command, message, headerTrace: headerTrace)
        case .refusedChannelCommand(let error):
            try await refuseChannelCommand(message, error)
            return .finished
        case .cancel(let cancel):
            // Campaign hook: a CancelRequest record, in key order (its on-receipt effect came first).
            try await applyCancel(cancel)
            return .finished
        case .refused(let error):
            try await reject(message, error, trace: TraceParent.resolve([headerTrace]).trace)
            return .finished
        case .send(let accepted):
            checked = accepted
        }
        var request = checked.request
        // docs/observability.md "Trace context": the record's traceparent header, else the request's
        // trace_parent field, else a new trace; every record this request causes carries the result.
        let (trace, generated) = TraceParent.resolve([headerTrace, request.traceParent])
        if generated || request.traceParent != trace.text {
            if !request.traceParent.isEmpty, TraceParent(request.traceParent) == nil {
                logger.debug("invalid trace_parent ignored", ["request_id": request.requestID, "trace_parent": String(request.traceParent.prefix(64))])
            }
            request.traceParent = trace.text
        }
        // Campaign hook: audiences and future send_at_ms become campaign rows; the record is then done.
        let nowMs = clock.nowMilliseconds()
        do {
            // Idempotency: the same request id must ask for the same thing (docs/contracts.md
            // "Request ids"); another notification under a used id is not a repeat.
            let fingerprint = RequestFingerprint.of(request)
            let (earlier, firstTargets) = try await checkRequestID(request, fingerprint: fingerprint, template: checked.template, nowMs: nowMs)
            if let earlier, earlier != fingerprint {
                logger.warning("send request refused: its request id was used for another notification", [
                    "request_id": request.requestID, "partition": "\(message.topicPartition)", "offset": "\(message.offset)", "trace_id": trace.traceID,
                ])
                try await feedback.deadLetter(
                    message,
                    error: "request_id: \"\(request.requestID)\" was used before for another notification or target; a request id names one send (not applied)",
                    rejectedBy: "dispatcher")
                metrics.deadLetters.increment(labels: ["request_id_reused"])
                return .finished
            }
            if CampaignRunner.isCampaign(request, nowMs: nowMs) {
                try await campaignStore.create(request, requestedAtMs: request.createdAtMs > 0 ? request.createdAtMs : nowMs, nowMs: nowMs)
                return .finished
            }
            let requestID = request.requestID
            // An earlier handling of this request still running here (its partition was lost or
            // revoked and assigned back) is joined, never run beside.
            guard let claim = try await claimRequest(requestID, message) else { return .finished }
            var finished = false
            defer { releaseRequest(requestID, finished: finished) }
            // Its first handling: the fingerprint was recorded by this one, and no other handling ran
            // the request before it (it did not wait for one). Tokens read before a wait are read again.
            let first = earlier == nil && claim == .ranAtOnce
            let outcome = try await processor.process(
                request, template: checked.template, consumedAtMs: nowMs, firstHandling: first,
                firstTargets: claim == .ranAtOnce ? firstTargets : nil, retryContext: retryContext, shouldStop: shouldStop)
            finished = outcome != .abandoned
            return outcome
        } catch let error as PostgresError where error.isCausedByTheData {
            // Retrying cannot help a record the database refuses: keep it for operators and go on.
            logger.error("record refused by PostgreSQL", [
                "error": "\(error)", "offset": "\(message.offset)", "request_id": request.requestID, "trace_id": trace.traceID,
            ])
            try await feedback.deadLetter(message, error: "refused by PostgreSQL: \(error)", rejectedBy: "dispatcher")
            metrics.deadLetters.increment(labels: ["refused_by_postgres"])
        }
        return .finished
    }

    /// Records `request`'s fingerprint unless its id has one (`fingerprints`). An immediate request's
    /// first tokens are read meanwhile: the read changes nothing and is dropped when the id was used
    /// for another request (docs/dispatcher-engine.md "Batched I/O").
    /// - Returns: the fingerprint recorded earlier (nil when this call recorded it), and the request's
    ///   first targets when they were read.
    /// - Throws: `PostgresError` and cancellation.
    private func checkRequestID(_ request: SendRequest, fingerprint: [UInt8], template: NotificationTemplate?, nowMs: Int64) async throws
        -> (earlier: [UInt8]?, firstTargets: SendRequestProcessor.FirstTargets?)
    {
        let check = FingerprintInput(requestID: request.requestID, fingerprint: fingerprint)
        guard let template, !CampaignRunner.isCampaign(request, nowMs: nowMs) else {
            return (try await fingerprints.submit(check), nil)
        }
        async let lookup = processor.lookUpFirstTargets(request, template: template)
        let earlier = try await fingerprints.submit(check)
        return (earlier, try await lookup)
    }

    /// A send request refused for its content: to the dead-letter topic, and a `RequestCompleted`
    /// with the reason when the record has a key (its request finishes visibly).
    private func reject(_ message: KafkaMessage, _ error: SendRequestDecoder.Rejection, trace: TraceParent) async throws {
        logger.warning("send request rejected", [
            "error": error.description, "partition": "\(message.topicPartition)", "offset": "\(message.offset)",
            "key": message.key.map { String(decoding: $0, as: UTF8.self) } ?? "", "trace_id": trace.traceID,
        ])
        try await feedback.deadLetter(message, error: error.description, rejectedBy: "dispatcher")
        metrics.deadLetters.increment(labels: [error.reason])
        guard let key = message.key, !key.isEmpty else { return }
        try await processor.publishRejected(requestID: String(decoding: key, as: UTF8.self), error: error.description, traceParent: trace.text)
    }
}

// MARK: - Channel commands (docs/live-activities.md)

extension Dispatcher {
    /// Applies a checked `ChannelCommand` (`SendRequestsRoute`) once its event was acknowledged, with
    /// the record's `traceparent` header, else the command's, else a new trace.
    /// - Throws: transient infrastructure failures (`PostgresError`, `KafkaError`) and cancellation.
    func applyChannelCommand(_ command: ChannelCommand, _ message: KafkaMessage, headerTrace: String?) async throws -> RecordOutcome {
        var command = command
        command.traceParent = TraceParent.resolve([headerTrace, command.traceParent]).trace.text
        do {
            try await channelCommands.apply(command)
        } catch let error as PostgresError where error.isCausedByTheData {
            logger.error("channel command refused by PostgreSQL", ["error": "\(error)", "offset": "\(message.offset)"])
            try await feedback.deadLetter(message, error: "refused by PostgreSQL: \(error)", rejectedBy: "dispatcher")
            metrics.deadLetters.increment(labels: ["refused_by_postgres"])
        }
        return .finished
    }

    /// A `ChannelCommand` refused for its content goes to the dead-letter topic naming the field (no
    /// `RequestCompleted`: its key is not a request id).
    /// - Throws: `KafkaError` and cancellation.
    func refuseChannelCommand(_ message: KafkaMessage, _ error: SendRequestDecoder.Rejection) async throws {
        logger.warning("channel command rejected", [
            "error": error.description, "partition": "\(message.topicPartition)", "offset": "\(message.offset)",
            "key": message.key.map { String(decoding: $0, as: UTF8.self) } ?? "",
        ])
        try await feedback.deadLetter(message, error: error.description, rejectedBy: "dispatcher")
        metrics.deadLetters.increment(labels: [error.reason])
    }
}

// MARK: - One handling of a request at a time (docs/dispatcher-engine.md "Records handled again")

extension Dispatcher {
    /// Claims `requestID` for this handling of `message`; when another handling in this process runs
    /// it, waits for that one to end (starting nothing meanwhile).
    /// - Returns: how this handling runs the request (and then it must call `releaseRequest`); nil
    ///   when the handling it joined finished the request: the record is then finished without
    ///   publishing anything.
    /// - Throws: `CancellationError` when cancelled while waiting.
    func claimRequest(_ requestID: String, _ message: KafkaMessage) async throws -> RunningRequests.Run? {
        let ticket = runningRequests.withLock { state in
            state.nextTicket += 1
            return state.nextTicket
        }
        var joined = false
        let turn = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<RunningRequests.Turn?, Never>) in
                let claim = runningRequests.withLock { state -> RunningRequests.Claim? in
                    if Task.isCancelled { return nil }
                    let claim = state.requests.claim(requestID, ticket: ticket)
                    if claim == .join { state.waiters[ticket] = continuation }
                    return claim
                }
                switch claim {
                case nil: continuation.resume(returning: nil)
                case .run?: continuation.resume(returning: .run)
                case .join?:
                    joined = true
                    rereadsJoined.increment()
                    logger.info("request already running in this process: waiting for that handling", [
                        "request_id": requestID, "partition": "\(message.topicPartition)", "offset": "\(message.offset)",
                    ])
                }
            }
        } onCancel: {
            runningRequests.withLock { state in
                state.requests.leave(requestID, ticket: ticket) ? state.waiters.removeValue(forKey: ticket) : nil
            }?.resume(returning: nil)
        }
        switch turn {
        case nil:
            throw CancellationError()
        case .run?:
            return joined ? .afterWaiting : .ranAtOnce
        case .finishedByOther?:
            logger.info("request finished by the handling it waited for: nothing published again", [
                "request_id": requestID, "partition": "\(message.topicPartition)", "offset": "\(message.offset)",
            ])
            return nil
        }
    }

    /// The handling that ran `requestID` ended (`finished`: the request is finished); resumes the
    /// handlings waiting for it.
    func releaseRequest(_ requestID: String, finished: Bool) {
        let resumed = runningRequests.withLock { state in
            state.requests.release(requestID, finished: finished).compactMap { ticket, turn in
                state.waiters.removeValue(forKey: ticket).map { ($0, turn) }
            }
        }
        for (waiter, turn) in resumed { waiter.resume(returning: turn) }
    }
}

// MARK: - Campaign hooks (docs/campaigns.md "Cancellation")

extension Dispatcher {
    /// A cancel takes effect on receipt (the consumer's `onReceipt`, on its poll thread), before key
    /// order: the in-process set at once; the `cancellations` row (which every replica polls) and the
    /// campaign row's flag through the `cancelWrites` batcher, as soon as PostgreSQL answers (no task
    /// per cancel: the poll thread only queues the write). The record's in-order handling writes both
    /// again (idempotent) before its offset is stored, so a failed write here loses nothing.
    func applyCancelOnReceipt(_ message: KafkaMessage) {
        guard let cancel = try? CampaignCancellations.cancelRequest(in: message, maxBytes: configuration.intake.maxSendRequestBytes) else { return }
        let nowMs = clock.nowMilliseconds()
        cancellations.insert(cancel.requestID, atMs: nowMs)
        _ = cancelWrites.enqueue(CancelWrite(
            requestID: cancel.requestID, reason: cancel.reason, atMs: cancel.requestedAtMs > 0 ? cancel.requestedAtMs : nowMs))
    }

    /// A cancel taken on receipt, to be written to the `cancellations` table and the campaign row.
    struct CancelWrite: Sendable {
        var requestID: String
        var reason: String
        var atMs: Int64
    }

    /// The batcher of the writes of cancels taken on receipt: each batch writes its cancels one after
    /// the other; a failed write is dropped (the record's in-order handling writes it again).
    static func cancelWriter(store: TokenStore) -> Batcher<CancelWrite, Void> {
        Batcher(name: "cancels on receipt", metricLabel: "cancels") { writes in
            let cancellationStore = CancellationStore(pool: store.pool)
            let campaignStore = CampaignStore(pool: store.pool)
            for write in writes {
                try? await cancellationStore.record(requestID: write.requestID, reason: write.reason, requestedAtMs: write.atMs)
                _ = try? await campaignStore.requestCancel(requestID: write.requestID, reason: write.reason, atMs: write.atMs)
            }
            return writes.map { _ in () }
        }
    }

    func applyCancel(_ cancel: CancelRequest) async throws {
        let nowMs = clock.nowMilliseconds()
        cancellations.insert(cancel.requestID, atMs: nowMs)
        let atMs = cancel.requestedAtMs > 0 ? cancel.requestedAtMs : nowMs
        try await CancellationStore(pool: store.pool).record(requestID: cancel.requestID, reason: cancel.reason, requestedAtMs: atMs)
        let applied = try await campaignStore.requestCancel(requestID: cancel.requestID, reason: cancel.reason, atMs: atMs)
        logger.info("cancel request", ["request_id": cancel.requestID, "reason": cancel.reason, "campaign": "\(applied)"])
    }
}

extension PostgresError {
    /// SQLSTATE classes 22 (data exception) and 23 (integrity constraint violation): the record's
    /// content is at fault, so retrying the same record cannot succeed.
    var isCausedByTheData: Bool {
        guard let state = sqlState else { return false }
        return state.hasPrefix("22") || state.hasPrefix("23")
    }
}
