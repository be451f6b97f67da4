import DispatcherStatus
import PushMessages
import ServiceCore

// MARK: - Stage 7: complete

extension SendRequestProcessor {
    /// Publishes a request's `RequestCompleted` (built by `RequestCompletion`, its usual event id),
    /// waits for Kafka's acknowledgement, and observes `push_request_duration_seconds{lane}` (from
    /// `requested_at_ms` to the acknowledgement). Every source completes its requests here.
    /// - Returns: the event's body as published.
    /// - Throws: `KafkaError`.
    @discardableResult
    func publishCompleted(_ completion: RequestCompletion) async throws -> RequestCompleted {
        let completed = completion.event(completedAtMs: clock.nowMilliseconds())
        let id = FeedbackEventID.requestCompleted(requestID: completion.requestID)
        try await feedback.publish(
            feedback.event(id: id, .requestCompleted(completed), traceParent: completion.traceParent), key: completion.requestID)
        if completion.requestedAtMs > 0 {
            let seconds = Double(max(0, clock.nowMilliseconds() - completion.requestedAtMs)) / 1000
            metrics.requestDuration.observe(seconds, labels: [completion.lane.rawValue])
        }
        return completed
    }

    /// Completes an immediate request whose notifications all settled: its `RequestCompleted` is
    /// published with the reports still in `acks`, and once Kafka acknowledged it the completion is
    /// recorded in `request_completions` (even when this handling was cancelled meanwhile: a lost
    /// partition's record queued in the producer still goes out), so that handling the request again
    /// publishes nothing. Returns once every acknowledgement arrived; then the request's entries in
    /// `acknowledged` are forgotten (not before: a report acknowledged after the completion, from
    /// another feedback partition, would put its request back for good).
    /// - Throws: `KafkaError`; `CancellationError`.
    func complete(_ completion: RequestCompletion, acks: Acknowledgements) async throws {
        let requestID = completion.requestID
        var recorded = false
        if !acknowledged.contains(requestID: requestID, token: AcknowledgedReports.requestCompleted) {
            // Awaited here, beside the reports still in `acks`: neither the acknowledgement nor the
            // completion row's batch is withdrawn when this handling is cancelled meanwhile.
            try await publishCompleted(completion)
            acknowledged.insert(requestID: requestID, token: AcknowledgedReports.requestCompleted)
            do {
                try await completionRecorder.submit(CompletionRow(
                    requestID: requestID, eventID: FeedbackEventID.requestCompleted(requestID: requestID), status: completion.status))
                recorded = true
            } catch {
                // Finished all the same; only a redelivery to another process would publish again.
                logger.warning("recording the completion failed", ["request_id": requestID, "error": "\(error)"])
            }
        }
        try await acks.waitForAll()
        if recorded { acknowledged.remove(requestID: requestID) }
    }

    /// Publishes the `RequestCompleted` of a request whose notifications were parked, if it is
    /// complete now: its record finished and no parked notification remains
    /// (`ParkedRequestCompletion`), once however many callers ask at the same time
    /// (`PendingRetryStore.completeOnce`). Counts come from `send_log`; the status is `cancelled` when
    /// a cancel for the request is known; it waits for Kafka's acknowledgement before the completion
    /// is recorded.
    /// - Throws: `PostgresError`, `KafkaError` (nothing was recorded: the caller retries).
    func completeParkedRequest(_ requestID: String) async throws {
        let eventID = FeedbackEventID.requestCompleted(requestID: requestID)
        let status = CampaignState.final(cancelRequested: cancellations.contains(requestID))
        let published = try await parking.completeOnce(requestID: requestID, eventID: eventID, status: status.rawValue) {
            requestedAt, traceParent, outcomes in
            try await publishCompleted(RequestCompletion(
                requestID: requestID, requestedAtMs: requestedAt, counts: RequestCompletion.counts(outcomes), status: status,
                lane: .transactional, traceParent: traceParent))
        }
        if published {
            acknowledged.remove(requestID: requestID)  // recorded: a redelivery publishes nothing
            logger.debug("request with parked notifications completed", ["request_id": requestID])
        }
    }

    /// Tells the producer of a send request refused at intake: a `RequestCompleted` with the refusal
    /// in `error` (docs/contracts.md), keyed by the record's key.
    /// - Throws: `KafkaError`.
    func publishRejected(requestID: String, error: String, traceParent: String) async throws {
        let completed = RequestCompletion.rejected(requestID: requestID, error: error, completedAtMs: clock.nowMilliseconds())
        try await feedback.publish(feedback.event(.requestCompleted(completed), traceParent: traceParent), key: requestID)
    }
}
