import APNs
import Postgres
import PushMessages
import ServiceCore

// MARK: - Stages 5 and 6: record, publish

extension SendRequestProcessor {
    /// What `send_log` holds for a notification once its outcome was given to it.
    enum RecordedAnswer: Sendable {
        /// This outcome was recorded: it is the notification's.
        case recorded
        /// Another delivery of the request recorded this token first: its report (and the bytes of its
        /// event, to publish again) stand, never a second outcome.
        case recordedEarlier(DeliveryReport, event: [UInt8])
    }

    /// Stages "record" and "publish": records the final outcome in `send_log` (batched, see
    /// `SendLogWriter`), then publishes its report (in that order: a redelivered request re-publishes
    /// what was recorded instead of sending again). When the row already existed, the stored report
    /// is published, never a new outcome. With acknowledgement marks on, the report first waits for a
    /// place in the unmarked window (`SendLogWriter.reserveUnmarked()`), held until its mark is written.
    /// - Returns: the outcome that stands (this one, or the one recorded first).
    /// - Throws: `PostgresError` caused by the data; `CancellationError`.
    func publishOutcome(_ report: DeliveryReport, traceParent: String, acks: Acknowledgements) async throws -> DeliveryReport {
        var report = report
        report.eventID = FeedbackEventID.deliveryReport(requestID: report.requestID, deviceToken: report.deviceToken)
        let bytes = feedback.event(id: report.eventID, .deliveryReport(report), traceParent: traceParent).serializedBytes()
        let place = try await sendLog.reserveUnmarked()
        let answer: RecordedAnswer
        do {
            answer = try await record(report, event: bytes)
        } catch {
            place?.release()
            throw error
        }
        let publish: [UInt8]
        switch answer {
        case .recorded:
            publish = bytes
        case .recordedEarlier(let first, let event):
            publish = event
            report = first
        }
        start(publishing: publish, requestID: report.requestID, token: report.deviceToken, traceParent: traceParent,
              place: place, acks: acks)
        return report
    }

    /// Produces a recorded report's event without waiting for Kafka (`acks` waits): once Kafka
    /// acknowledged it, it is remembered (`AcknowledgedReports`) and its row marked, which gives back
    /// its place in the unmarked window; a failed publication gives the place back at once.
    private func start(publishing event: [UInt8], requestID: String, token: String, traceParent: String,
                       place: NotificationPermit?, acks: Acknowledgements) {
        acks.start { [feedback, acknowledged, sendLog] ended in
            feedback.publish(serialized: event, key: token, traceParent: traceParent) { failure in
                if failure == nil {
                    acknowledged.insert(requestID: requestID, token: token)
                    sendLog.markAcknowledged(requestID: requestID, deviceToken: token, releasing: place)
                } else {
                    place?.release()
                }
                ended(failure)
            }
        }
    }

    /// Records the outcome (`recordRetrying`) and says whose outcome `send_log` holds: the writer
    /// answers the stored event's bytes, which are this event's exactly when this call recorded it.
    private func record(_ report: DeliveryReport, event: [UInt8]) async throws -> RecordedAnswer {
        let stored = try await recordRetrying(report, event: event)
        guard stored != event, let earlier = try? FeedbackEvent(protobufBytes: stored), case .deliveryReport(let first)? = earlier.event
        else { return .recorded }
        return .recordedEarlier(first, event: stored)
    }

    /// Stage "publish" for an outcome an earlier delivery recorded (`DeliveryContext.recorded`): never
    /// sent again; its report is published again unless Kafka is known to have acknowledged it (with
    /// marks on, after taking a place in the unmarked window, as `publishOutcome` does).
    /// - Returns: the recorded report, or nil when the stored bytes are not a delivery report (the
    ///   notification then goes through the pipeline again).
    /// - Throws: `CancellationError` while waiting for a place in the unmarked window.
    func republish(_ earlier: TokenStore.RecordedOutcome, token: String, _ context: DeliveryContext) async throws -> DeliveryReport? {
        guard let event = try? FeedbackEvent(protobufBytes: earlier.event), case .deliveryReport(let report)? = event.event else { return nil }
        let requestID = context.request.requestID
        if !earlier.acknowledged, !acknowledged.contains(requestID: requestID, token: token) {
            let place = try await sendLog.reserveUnmarked()
            start(publishing: earlier.event, requestID: requestID, token: token, traceParent: event.traceParent,
                  place: place, acks: context.acks)
        }
        return report
    }

    /// Counts a final outcome this owner reached (not one republished from `send_log`) wherever the
    /// notification came from, so campaign notifications are counted by construction:
    /// `push_notifications_total` and readiness's Apple-trouble detail.
    func noteFinal(_ report: DeliveryReport) {
        metrics.count(report)
        monitor?.noteAppleTrouble(report)
    }

    /// Records an outcome Apple already gave, waiting out a PostgreSQL outage (`waitingOutPostgres`)
    /// instead of failing the request: a failed request would be handled again and this notification
    /// sent to Apple a second time.
    /// - Throws: `PostgresError` caused by the data; `CancellationError`.
    private func recordRetrying(_ report: DeliveryReport, event: [UInt8]) async throws -> [UInt8] {
        try await waitingOutPostgres("recording an outcome failed: retrying (Apple already answered)", requestID: report.requestID) {
            try await sendLog.record(report, event: event)
        }
    }

    /// Runs `body` until it does not fail for PostgreSQL being unavailable, with capped exponential
    /// back-off (50 ms to 2 s) and one warning (`failure`) a few seconds: for the PostgreSQL work of a
    /// request whose notifications are already in flight (an outcome to record, the next page of a
    /// user's tokens), where failing would cancel those notifications and the request's next handling
    /// would send them to Apple a second time. Stops only when the task is cancelled (the notifications
    /// are then sent again by the next delivery, as after a crash) or when PostgreSQL refuses the work
    /// for its content (SQLSTATE class 22 or 23, rethrown).
    /// - Throws: `PostgresError` caused by the data; `CancellationError`; what `body` throws otherwise.
    func waitingOutPostgres<T>(_ failure: String, requestID: String, _ body: () async throws -> T) async throws -> T {
        var delay = Duration.milliseconds(50)
        var failures = 0
        while true {
            do {
                return try await body()
            } catch let error as PostgresError where !error.isCausedByTheData {
                try Task.checkCancellation()
                failures += 1
                if recordWarnings.withLock({ $0.admit(failure, now: .now) }) != nil {
                    logger.warning(failure, ["request_id": requestID, "failures": "\(failures)", "error": "\(error)"])
                }
                try await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
    }

    /// docs/semantics.md "Token hygiene": deactivate unless registered again after Apple's timestamp, and
    /// announce it with `TokenInvalidated`.
    func invalidate(_ token: String, response: APNsResponse, report: DeliveryReport, traceParent: String) async throws {
        let now = clock.nowMilliseconds()
        let invalidatedAt = response.timestampMilliseconds ?? report.sentAtMs
        guard let row = try await store.deactivate(
            token: token, reason: response.reason?.rawValue ?? "HTTP \(response.status)",
            invalidatedAtMs: invalidatedAt, nowMs: now)
        else { return }
        var invalidated = TokenInvalidated(
            deviceToken: row.deviceToken, bundleID: row.bundleID, environment: Environment(row.environment),
            userID: row.userID, installationID: row.installationID)
        invalidated.apnsReason = response.reason?.rawValue ?? ""
        invalidated.apnsTimestampMs = response.timestampMilliseconds ?? 0
        invalidated.requestID = report.requestID
        let id = FeedbackEventID.tokenInvalidated(
            deviceToken: invalidated.deviceToken, apnsTimestampMs: invalidated.apnsTimestampMs, requestID: invalidated.requestID)
        try await feedback.publish(feedback.event(id: id, .tokenInvalidated(invalidated), traceParent: traceParent), key: row.deviceToken)
        logger.info("token deactivated", [
            "token": Logger.shortened(token: row.deviceToken), "reason": invalidated.apnsReason, "apns_id": report.apnsID,
        ])
    }
}
